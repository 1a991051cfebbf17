#pragma once
// The web console's options from the configuration, shared by `idem console` and by
// `idem consume` with admin.console (the console on the consumer's admin port).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "idem/config.hpp"
#include "idem/console/console.hpp"
#include "idem/metrics/metrics.hpp"

namespace idem::cli {

inline ConsoleOptions console_options(const Config& config) {
  ConsoleOptions options = config.get<ConsoleOptions>();
  options.kafka = DlqConnection{config.bootstrap_servers, config.kafka, config.dlq.timeout};
  options.store_url = config.store_url;
  options.store_options = config.store_options;
  options.store_options.application_name = "idem-console";
  options.dlq_suffix = config.consumer.dlq_suffix;
  options.horizon = config.dedup.horizon;
  return options;
}

/// What admin.listen serves for `idem consume` and `idem relay`: /metrics, /healthz and
/// /readyz with `checks`; with admin.console the console serves those and its pages
/// (showing `groups` besides the store's).
struct AdminEndpoints {
  std::unique_ptr<AdminServer> admin;
  std::unique_ptr<Console> console;

  [[nodiscard]] int port() const noexcept { return admin ? admin->port() : console->port(); }
};

/// `metrics` must outlive the endpoints.
inline AdminEndpoints start_admin_endpoints(const Config& settings, const Metrics& metrics,
                                            std::vector<ReadinessCheck> checks,
                                            std::vector<std::string> groups = {}) {
  AdminEndpoints endpoints;
  const auto& admin = settings.get<AdminSettings>();
  if (admin.console) {
    ConsoleOptions options = console_options(settings);
    options.listen = admin.listen;
    for (auto& group : groups) options.groups.push_back(std::move(group));
    options.admin_metrics = &metrics;
    options.readiness = std::move(checks);
    endpoints.console = std::make_unique<Console>(std::move(options));
  } else {
    endpoints.admin = std::make_unique<AdminServer>(admin.listen, metrics, std::move(checks));
  }
  return endpoints;
}

}  // namespace idem::cli
