#pragma once
// The web console's options from the configuration, shared by `idem console` and by
// `idem consume` with admin.console (the console on the consumer's admin port).
#include "idem/config.hpp"
#include "idem/console/console.hpp"

namespace idem::cli {

inline ConsoleOptions console_options(const Config& config) {
  ConsoleOptions options;
  options.listen = config.console.listen;
  options.token = config.console.token;
  options.kafka = DlqConnection{config.bootstrap_servers, config.kafka, config.dlq.timeout};
  options.store_url = config.store_url;
  options.store_options = config.store_options;
  options.store_options.application_name = "idem-console";
  options.dlq_suffix = config.consumer.dlq_suffix;
  options.horizon = config.dedup.horizon;
  options.refresh = config.console.refresh;
  options.scrape = config.console.scrape;
  options.groups = config.console.groups;
  return options;
}

}  // namespace idem::cli
