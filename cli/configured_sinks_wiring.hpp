#pragma once
// `idem consume` and `idem config check` with routes declared in the configuration file
// (the `routes` table; docs/configured-sinks.md): the CLI's side of idem::sinks.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idem/config.hpp"
#include "idem/consumer.hpp"
#include "idem/metrics/metrics.hpp"
#include "idem/sinks/configured_sinks.hpp"
#include "idem/sinks/sink_config.hpp"
#include "idem/store.hpp"

namespace idem::cli {

/// The routes of the configuration file, or nullopt when it declares none.
/// \throws ConfigError with every problem of the `routes` table.
[[nodiscard]] std::optional<sinks::SinkConfig> configured_routes(const Config& settings);

/// Fits `consumer` to the topics its handlers read (`read`, by `readers`, e.g. "the
/// routes"): those topics when consumer.topics is unset (else both must name the same
/// topics), a consumer.group required, no consumer.handler (a built-in handler of `idem
/// consume`). \throws ConfigError naming what does not fit.
void adopt_topics(const std::vector<std::string>& read, std::string_view readers,
                  const Config& settings, ConsumerConfig& consumer);

/// Creates idem's own tables in `store` (never the reference system's), compiles the
/// routes and checks every statement against the store.
/// \throws ConfigError with every problem; Error when the store cannot be used.
[[nodiscard]] std::unique_ptr<sinks::ConfiguredSinks> start_configured_sinks(
    sinks::SinkConfig routes, Store& store);

/// Prints the routes of the configuration file as `# ` lines, secrets redacted (for
/// `idem config check` and `--print-config`); returns them, nullopt when there are none.
/// \throws ConfigError with every problem of the `routes` table.
std::optional<sinks::SinkConfig> print_configured_routes(const Config& settings);

/// What the running routes report: pause and resume lines to `log`; with `metrics`, each
/// route's call latency and whether it is paused (`idem_route_*` of `group`). `metrics`
/// must outlive the consumer's run().
[[nodiscard]] sinks::SinkObservers route_observers(const sinks::SinkConfig& routes,
                                                   Metrics* metrics, const std::string& group,
                                                   std::function<void(std::string_view)> log);

/// /readyz: not ready while a route is paused, naming each with why.
[[nodiscard]] ReadinessCheck routes_readiness(const sinks::ConfiguredSinks& configured);

/// `idem config check`: when store.url is set, checks every statement of the routes
/// against that store (nothing is created or changed in it).
/// \throws ConfigError with every problem.
void check_configured_routes(const Config& settings);

/// `idem config test`: runs the `[[tests]]` of the configuration file on store.url (or a
/// throwaway in-memory SQLite store), each rolled back, and prints one line per test and
/// each failure. Returns true when every test passed.
/// \throws ConfigError when the file has no routes or no tests, or a test is malformed.
[[nodiscard]] bool run_configured_route_tests(const Config& settings);

}  // namespace idem::cli
