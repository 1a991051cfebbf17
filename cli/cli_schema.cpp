#include "cli_schema.hpp"

#include "demo/demo.hpp"
#include "idem/console/console.hpp"
#include "idem/devtools/dev_broker.hpp"
#include "idem/metrics/metrics.hpp"
#include "idem/reference/billing.hpp"
#include "idem/reference/payment_provider.hpp"
#include "idem/sinks/sink_config.hpp"

namespace idem::cli {

namespace {

void declare_consume_keys(SectionKeys<ConsumeSettings>& keys) {
  keys.choice(
      "consumer.handler", &ConsumeSettings::handler,
      "built-in handler of idem consume: count, billing or analytics",
      std::vector<std::pair<std::string, HandlerKind>>{{"count", HandlerKind::Count},
                                                       {"billing", HandlerKind::Billing},
                                                       {"analytics", HandlerKind::Analytics}});
}

}  // namespace

const ConfigSchema& cli_config_schema() {
  static const ConfigSchema schema = [] {
    ConfigSchema s;
    s.add<AdminSettings>(declare_admin_keys)
        .add<ConsoleOptions>(declare_console_keys)
        .add<http::ProviderSettings>(http::declare_provider_keys)
        .add<BillingSettings>(declare_billing_keys)
        .add<http::BreakerPolicy>(http::declare_breaker_keys)
        .add<DevBrokerSettings>(declare_dev_broker_keys)
        .add<demo::DemoOptions>(demo::declare_demo_keys)
        .add<ConsumeSettings>(declare_consume_keys)
        .warn([](const Config& config, std::vector<std::string>& warnings) {
          const bool billing = config.get<ConsumeSettings>().handler == HandlerKind::Billing;
          warn_provider_key_retention(config, billing, warnings);
        });
    sinks::reserve_tables(s);
    return s;
  }();
  return schema;
}

}  // namespace idem::cli
