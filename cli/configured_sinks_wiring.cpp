#include "configured_sinks_wiring.hpp"

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "idem/config_document.hpp"
#include "idem/sinks/route_tests.hpp"

namespace idem::cli {

namespace {

ConfigProblem problem(const Config& settings, std::string key, std::string message) {
  const auto entry = std::find_if(settings.entries.begin(), settings.entries.end(),
                                  [&](const ConfigEntry& e) { return e.key == key; });
  return {std::move(key), entry == settings.entries.end() ? ConfigOrigin{} : entry->origin,
          std::move(message)};
}

}  // namespace

std::optional<sinks::SinkConfig> configured_routes(const Config& settings) {
  if (!settings.document) return std::nullopt;
  return sinks::load_sink_config(*settings.document, settings.environment);
}

void adopt_topics(const std::vector<std::string>& read, std::string_view readers,
                  const Config& settings, ConsumerConfig& consumer) {
  std::vector<ConfigProblem> problems;
  if (consumer.topics.empty()) {
    consumer.topics = read;
  } else {
    const std::set<std::string> listed(consumer.topics.begin(), consumer.topics.end());
    const std::set<std::string> handled(read.begin(), read.end());
    if (listed != handled)
      problems.push_back(
          problem(settings, "consumer.topics",
                  fmt::format("lists {} but {} read {}: leave it unset, or "
                              "name the same topics",
                              fmt::join(listed, ","), readers, fmt::join(handled, ","))));
  }
  if (consumer.group_id.empty())
    problems.push_back(problem(settings, "consumer.group",
                               fmt::format("required with {}: the dedup rows' group", readers)));
  const auto handler =
      std::find_if(settings.entries.begin(), settings.entries.end(),
                   [](const ConfigEntry& e) { return e.key == "consumer.handler"; });
  if (handler != settings.entries.end() && handler->origin.layer != ConfigLayer::Default)
    problems.push_back(
        problem(settings, "consumer.handler",
                fmt::format("a built-in handler and {} exclude each other: remove one", readers)));
  if (!problems.empty()) throw ConfigError(std::move(problems));
}

std::unique_ptr<sinks::ConfiguredSinks> start_configured_sinks(sinks::SinkConfig routes,
                                                               Store& store) {
  store.migrate();
  auto configured = std::make_unique<sinks::ConfiguredSinks>(std::move(routes), store.backend());
  configured->check(store);
  return configured;
}

std::optional<sinks::SinkConfig> print_configured_routes(const Config& settings) {
  auto routes = configured_routes(settings);
  if (!routes) return routes;
  std::cout << "# routes of " << routes->file << ":\n";
  const std::string text = routes->describe();
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = text.find('\n', at);
    std::cout << "#   " << text.substr(at, end - at) << "\n";
    at = end == std::string::npos ? text.size() : end + 1;
  }
  return routes;
}

sinks::SinkObservers route_observers(const sinks::SinkConfig& routes, Metrics* metrics,
                                     const std::string& group,
                                     std::function<void(std::string_view)> log) {
  sinks::SinkObservers observers;
  observers.log = std::move(log);
  if (metrics == nullptr) return observers;
  // Made now, on this thread: the observers run on the HTTP client's and only read this.
  auto recorders = std::make_shared<std::map<std::string, DurationRecorder, std::less<>>>();
  for (const sinks::Route& route : routes.routes) {
    if (!route.http) continue;
    recorders->emplace(route.name, metrics->call_recorder(group, route.name));
    metrics->set_route_paused(group, route.name, false);
  }
  observers.on_call = [recorders](const std::string& route, std::chrono::nanoseconds took) {
    if (const auto it = recorders->find(route); it != recorders->end()) it->second.record(took);
  };
  observers.on_pause = [metrics, group](const std::string& route, bool paused) {
    metrics->set_route_paused(group, route, paused);
  };
  return observers;
}

ReadinessCheck routes_readiness(const sinks::ConfiguredSinks& configured) {
  return {"routes", [&configured]() -> std::optional<std::string> {
            const std::vector<std::string> paused = configured.paused_routes();
            if (paused.empty()) return std::nullopt;
            return fmt::format("paused: {}", fmt::join(paused, "; "));
          }};
}

void check_configured_routes(const Config& settings) {
  auto routes = configured_routes(settings);
  if (!routes) return;
  if (settings.store_url.empty()) {
    std::cout << "# statements not checked against a database: store.url is not set\n";
    return;
  }
  const auto store = open_store(settings.store_url, settings.store_options);
  const sinks::ConfiguredSinks configured(std::move(*routes), store->backend());
  configured.check(*store);
  std::cout << "# every statement prepared against " << redact_store_url(settings.store_url)
            << "\n";
}

bool run_configured_route_tests(const Config& settings) {
  auto routes = configured_routes(settings);
  if (!routes)
    throw ConfigError({{"routes",
                        {ConfigLayer::File, settings.file},
                        "the configuration declares no routes ([routes.NAME]): nothing to test"}});
  // Without a store, a throwaway one: the tests' `setup` creates what the routes need.
  const std::string url = settings.store_url.empty() ? "sqlite://:memory:" : settings.store_url;
  const auto store = open_store(url, settings.store_options);
  const std::string file = routes->file;
  const std::vector<sinks::RouteTest> tests = sinks::load_route_tests(*settings.document, *routes);
  sinks::ConfiguredSinks configured(std::move(*routes), store->backend());
  // On the configured store every statement must prepare first, as `idem consume` checks
  // them; a throwaway store has the routes' tables only once a test's setup ran.
  if (!settings.store_url.empty()) configured.check(*store);
  if (tests.empty())
    throw ConfigError({{"tests",
                        {ConfigLayer::File, file},
                        "the configuration declares no tests ([[tests]] with [[tests.events]])"}});
  sinks::RouteTester tester(configured, *store,
                            settings.consumer.group_id.empty() ? std::string("idem-config-test")
                                                               : settings.consumer.group_id);
  std::cout << fmt::format(
      "Running {} test(s) of {} on {} (rolled back), calls to a stub at {}\n", tests.size(), file,
      settings.store_url.empty() ? std::string("a throwaway SQLite store") : redact_store_url(url),
      tester.stub_url());
  std::size_t failed = 0;
  for (const sinks::RouteTest& test : tests) {
    const sinks::RouteTestReport report = tester.run(test);
    std::cout << fmt::format("test {} ... {}\n", report.name,
                             report.passed() ? "passed" : "FAILED");
    for (const std::string& failure : report.failures) std::cout << "  " << failure << "\n";
    if (!report.passed()) ++failed;
  }
  std::cout << fmt::format("{} test(s): {} passed, {} failed\n", tests.size(),
                           tests.size() - failed, failed);
  return failed == 0;
}

}  // namespace idem::cli
