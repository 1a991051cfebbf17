// Events at the consumer boundary: how fast ids are made and how fast a
// payload becomes a validated OrderConfirmed.
//
//   idem_bench_events [--benchmark_filter=...]
//
// items_per_second is UUIDs or events per second. BM_ParseNlohmann parses
// the same payload with nlohmann::json and applies the same field checks
// (reusing idem's UUID, RFC 3339 and Amount validators), so the difference
// between it and BM_ParseOrderConfirmed is the JSON layer alone. It is, if
// anything, flattered: it does not detect duplicate keys, which
// parse_order_confirmed does.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "idem/reference/order_confirmed.hpp"
#include "idem/uuid.hpp"

namespace {

// A realistic order.confirmed.v1 payload as the relay produces it (~200 bytes).
constexpr std::string_view kPayload =
    R"({"event_id":"01932c07-8a5e-7c3b-9f1a-3d2e4c5b6a79","event_type":"order.confirmed.v1",)"
    R"("occurred_at":"2026-11-29T22:33:47.123456Z","order_id":1234567,"customer_id":987654,)"
    R"("total_amount":"1299.90"})";

void BM_UuidV7Generate(benchmark::State& state) {
  // The process-wide generator, shared by all benchmark threads: this is what
  // callers use, and with Threads(2) it shows the cost of the mutex.
  for (auto _ : state) benchmark::DoNotOptimize(idem::new_uuid_v7());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_UuidV7Generate);
BENCHMARK(BM_UuidV7Generate)->Threads(2)->UseRealTime();

void BM_UuidFormat(benchmark::State& state) {
  const idem::Uuid id = idem::new_uuid_v7();
  char out[36];
  for (auto _ : state) {
    id.format_to(out);
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_UuidFormat);

void BM_UuidParse(benchmark::State& state) {
  const std::string text = idem::new_uuid_v7().to_string();
  for (auto _ : state) benchmark::DoNotOptimize(idem::Uuid::parse(text));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_UuidParse);

void BM_ParseOrderConfirmed(benchmark::State& state) {
  if (!idem::parse_order_confirmed(kPayload).ok()) {
    state.SkipWithError("benchmark payload does not validate");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(idem::parse_order_confirmed(kPayload));
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(kPayload.size()));
}
BENCHMARK(BM_ParseOrderConfirmed);

// The same validation as parse_order_confirmed, on nlohmann::json's DOM.
bool parse_with_nlohmann(std::string_view payload, idem::OrderConfirmed& out) {
  const auto doc = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return false;  // also the discarded (parse error) value

  const auto string_field = [&doc](const char* name) -> const std::string* {
    const auto it = doc.find(name);
    return it != doc.end() && it->is_string() ? it->get_ptr<const std::string*>() : nullptr;
  };
  const auto id_field = [&doc](const char* name, std::int64_t& v) {
    const auto it = doc.find(name);
    if (it == doc.end() || !it->is_number_integer()) return false;
    v = it->get<std::int64_t>();
    // An unsigned beyond INT64_MAX converts to a negative value here.
    return v > 0 && !(it->is_number_unsigned() && it->get<std::uint64_t>() > INT64_MAX);
  };

  const std::string* event_id = string_field("event_id");
  const std::string* event_type = string_field("event_type");
  const std::string* occurred_at = string_field("occurred_at");
  const std::string* amount = string_field("total_amount");
  if (event_id == nullptr || event_type == nullptr || occurred_at == nullptr || amount == nullptr) {
    return false;
  }
  const auto id = idem::Uuid::parse(*event_id);
  if (!id || !id->is_v7() || *event_type != idem::kOrderConfirmedV1) return false;
  const auto at = idem::parse_rfc3339(*occurred_at);
  const auto total = idem::Amount::parse(*amount);
  if (!at || !total) return false;
  if (!id_field("order_id", out.order_id) || !id_field("customer_id", out.customer_id))
    return false;
  out.event_id = *id;
  out.occurred_at = *at;
  out.total_amount = *total;
  return true;
}

void BM_ParseNlohmann(benchmark::State& state) {
  idem::OrderConfirmed event;
  if (!parse_with_nlohmann(kPayload, event) ||
      event != idem::parse_order_confirmed(kPayload).value()) {
    state.SkipWithError("nlohmann comparison disagrees with parse_order_confirmed");
    return;
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(parse_with_nlohmann(kPayload, event));
    benchmark::DoNotOptimize(event);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(kPayload.size()));
}
BENCHMARK(BM_ParseNlohmann);

void BM_ToJson(benchmark::State& state) {
  const idem::OrderConfirmed event = idem::parse_order_confirmed(kPayload).value();
  for (auto _ : state) benchmark::DoNotOptimize(idem::to_json(event));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ToJson);

}  // namespace

BENCHMARK_MAIN();
