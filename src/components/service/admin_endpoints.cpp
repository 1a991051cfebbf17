// What admin.listen serves (idem/service/admin_endpoints.hpp).
#include "idem/service/admin_endpoints.hpp"

#include <utility>

namespace idem {

ConsoleOptions console_options(const Config& config) {
  ConsoleOptions options = config.get<ConsoleOptions>();
  options.kafka = DlqConnection{config.bootstrap_servers, config.kafka, config.dlq.timeout};
  options.store_url = config.store_url;
  options.store_options = config.store_options;
  options.store_options.application_name = "idem-console";
  options.dlq_suffix = config.consumer.dlq_suffix;
  options.horizon = config.dedup.horizon;
  return options;
}

AdminEndpoints start_admin_endpoints(const Config& settings, const Metrics& metrics,
                                     std::vector<ReadinessCheck> checks,
                                     std::vector<std::string> groups) {
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

}  // namespace idem
