#include "configured_sinks_wiring.hpp"

#include <algorithm>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

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
  if (settings.file.empty()) return std::nullopt;
  return sinks::load_sink_config(settings.file, process_environment());
}

void adopt_routes(const sinks::SinkConfig& routes, const Config& settings,
                  ConsumerConfig& consumer) {
  std::vector<ConfigProblem> problems;
  const std::vector<std::string> topics = routes.topic_names();
  if (consumer.topics.empty()) {
    consumer.topics = topics;
  } else {
    const std::set<std::string> listed(consumer.topics.begin(), consumer.topics.end());
    const std::set<std::string> routed(topics.begin(), topics.end());
    if (listed != routed)
      problems.push_back(problem(settings, "consumer.topics",
                                 fmt::format("lists {} but the routes read {}: leave it unset, or "
                                             "name the same topics",
                                             fmt::join(listed, ","), fmt::join(routed, ","))));
  }
  if (consumer.group_id.empty())
    problems.push_back(problem(settings, "consumer.group",
                               "required with routes: the dedup rows' group (--group)"));
  const auto handler =
      std::find_if(settings.entries.begin(), settings.entries.end(),
                   [](const ConfigEntry& e) { return e.key == "consumer.handler"; });
  if (handler != settings.entries.end() && handler->origin.layer != ConfigLayer::Default)
    problems.push_back(problem(settings, "consumer.handler",
                               "a built-in handler and routes exclude each other: remove one"));
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

}  // namespace idem::cli
