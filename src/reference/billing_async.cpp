// billing_async_effect: the billing call phase through http::AsyncClient (many charges in
// flight on one event-loop thread). A file of its own so that nothing links AsyncClient's
// symbols until a caller uses this handler.
#include <fmt/format.h>

#include "idem/reference/billing.hpp"

#include "idem/error.hpp"

namespace idem {

EffectHandler<OrderConfirmed, BillingCharge> billing_async_effect(BillingConfig config) {
  if (config.provider_url.empty()) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "billing: the payment provider URL is required");
  }
  while (!config.provider_url.empty() && config.provider_url.back() == '/') config.provider_url.pop_back();
  const std::string charge_url = config.provider_url + "/payments/charge";
  auto client = std::make_shared<http::AsyncClient>(config.client);
  return {
      .call = [client, charge_url](const OrderConfirmed& event, const RecordInfo& record,
                                   CallCompletion<BillingCharge> done) {
        // The callback runs on the client's loop thread: complete_charge only hands the
        // result to the consumer's completion queue (never blocks).
        client->start(charge_request(charge_url, event, record),
                      [done](http::CallResult result) { complete_charge(result, done); });
      },
      .apply = [](const OrderConfirmed& event, const RecordInfo&, const BillingCharge& charge,
                  Transaction& tx) { return apply_charge(event, charge, tx); },
      .ordering_key = {},
  };
}

}  // namespace idem
