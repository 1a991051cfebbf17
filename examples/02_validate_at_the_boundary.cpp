// Validating a message into a typed event at the consumer boundary (EVT-4).
#include <idem/reference/order_confirmed.hpp>

#include <iostream>

int main() {
  const char* good = R"({"event_id":"017f22e2-79b0-7cc3-98c4-dc0c0c07398f",)"
                     R"("event_type":"order.confirmed.v1","occurred_at":"2026-11-29T10:00:00Z",)"
                     R"("order_id":42,"customer_id":7,"total_amount":"19.90"})";
  const char* bad = R"({"event_id":"017f22e2-79b0-7cc3-98c4-dc0c0c07398f",)"
                    R"("event_type":"order.confirmed.v1","occurred_at":"2026-11-29T10:00:00Z",)"
                    R"("order_id":42,"customer_id":7,"total_amount":19.9})";

  auto ok = idem::parse_order_confirmed(good);
  if (!ok) return 1;
  std::cout << "order " << ok.value().order_id << " amount " << ok.value().total_amount.to_string()
            << " born at " << ok.value().event_id.timestamp().time_since_epoch().count() << " ms\n";

  auto rejected = idem::parse_order_confirmed(bad);
  if (rejected) return 1;
  std::cout << "rejected: field '" << rejected.error().field << "', reason "
            << idem::to_string(rejected.error().reason) << ": " << rejected.error().message << "\n";
  return rejected.error().field == "total_amount" ? 0 : 1;
}
