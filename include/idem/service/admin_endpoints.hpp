#pragma once
/// \file
/// What `admin.listen` serves for a consumer or a relay: /metrics, /healthz and /readyz;
/// with `admin.console`, the web console serves those and its pages.

#include <memory>
#include <string>
#include <vector>

#include "idem/config.hpp"
#include "idem/console/console.hpp"
#include "idem/metrics/metrics.hpp"

namespace idem {

/// The console's options from the configuration, shared by `idem console` and by the
/// console on a consumer's or relay's admin port.
[[nodiscard]] ConsoleOptions console_options(const Config& config);

/// The admin server, or the console in its place (admin.console).
struct AdminEndpoints {
  std::unique_ptr<AdminServer> admin;
  std::unique_ptr<Console> console;

  [[nodiscard]] int port() const noexcept { return admin ? admin->port() : console->port(); }
};

/// Starts what admin.listen serves, with `checks` on /readyz; the console shows `groups`
/// besides the store's. `metrics` must outlive the endpoints.
[[nodiscard]] AdminEndpoints start_admin_endpoints(const Config& settings, const Metrics& metrics,
                                                   std::vector<ReadinessCheck> checks,
                                                   std::vector<std::string> groups = {});

}  // namespace idem
