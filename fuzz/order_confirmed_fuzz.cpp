// libFuzzer target: parse_order_confirmed on any bytes, the boundary of every consumed
// order.confirmed.v1 payload (EVT-4). Beyond "no crash, no sanitizer report", it checks
// what the parser promises: it never throws (except std::bad_alloc, which libFuzzer's
// -rss_limit_mb handles), an accepted event keeps the schema's ranges, and an accepted
// event survives to_json -> parse unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "idem/reference/order_confirmed.hpp"

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "order_confirmed_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view payload(reinterpret_cast<const char*>(data), size);
  const auto parsed = idem::parse_order_confirmed(payload);
  if (!parsed.ok()) {
    if (parsed.error().message.empty()) broken("a rejection without a message");
    return 0;
  }
  const idem::OrderConfirmed& event = parsed.value();
  if (!event.event_id.is_v7()) broken("accepted an event_id that is not a UUIDv7");
  if (event.order_id <= 0 || event.customer_id <= 0) broken("accepted an id below 1");
  if (event.total_amount.hundredths() < 0 || event.total_amount > idem::kMaxOrderAmount)
    broken("accepted an amount the ledger cannot store");
  const std::string canonical = idem::to_json(event);
  const auto again = idem::parse_order_confirmed(canonical);
  if (!again.ok()) broken("to_json of an accepted event does not parse");
  if (!(again.value() == event)) broken("to_json -> parse changed the event");
  return 0;
}
