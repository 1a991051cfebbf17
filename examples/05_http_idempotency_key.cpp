// An external effect (a payment) made exactly once (IDEM-4): the client sends the
// event's id as `Idempotency-Key` on every attempt, and the provider deduplicates on it.
// Here every first answer is lost after the provider charged ("charged, answered 200,
// connection reset"): the client retries with the same key and gets the stored answer
// replayed, so each order is charged once however often the call is retried.
#include <idem/http/idempotent_client.hpp>
#include <idem/reference/payment_provider.hpp>
#include <idem/store.hpp>
#include <idem/uuid.hpp>

#include <iostream>
#include <string>

int main() {
  // The reference system's payment provider on loopback; every new charge's answer is
  // cut off after the charge committed.
  idem::http::ProviderConfig config;
  config.faults.reset_after_commit = 1.0;
  idem::http::PaymentProvider provider(idem::open_store("sqlite://:memory:"), config);
  provider.start("127.0.0.1", 0);

  idem::http::IdempotentClient client;
  int charged = 0;
  for (int order_id = 1; order_id <= 3; ++order_id) {
    const idem::Uuid event_id = idem::new_uuid_v7();  // the event's id: the key
    const std::string body = "{\"order_id\":" + std::to_string(order_id) + ",\"amount\":\"12.30\"}";
    const idem::http::CallResult result =
        client.post_json(provider.base_url() + "/payments/charge", body, event_id.to_string());
    std::cout << "order " << order_id << ": HTTP " << result.http_status << " after "
              << result.attempts << " attempts\n";
    if (result.ok()) ++charged;
  }
  const idem::http::ProviderSummary summary = provider.summary();
  provider.stop();
  std::cout << "charges: " << summary.charges << ", replays: " << summary.replays << "\n";
  return charged == 3 && summary.charges == 3 && summary.replays >= 3 ? 0 : 1;
}
