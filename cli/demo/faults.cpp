// The demo's injected inputs (faults.hpp) and the parsing of `--faults` (demo.hpp).
#include "demo/faults.hpp"

#include <chrono>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "demo/children.hpp"
#include "demo/demo.hpp"
#include "idem/devtools/child_process.hpp"
#include "idem/error.hpp"
#include "idem/outbox.hpp"
#include "idem/producer.hpp"
#include "idem/uuid.hpp"

namespace idem::cli::demo {

using namespace std::chrono_literals;

FaultMix FaultMix::parse(const std::vector<std::string>& list) {
  FaultMix m;
  if (list.size() == 1 && list.front() == "all") return m;
  m = FaultMix{false, false, false, false, false, false, false, false};
  for (const std::string& item : list) {
    if (item == "none") continue;
    if (item == "relay-kill")
      m.relay_kills = true;
    else if (item == "consumer-kill")
      m.consumer_kills = true;
    else if (item == "rebalance")
      m.rebalance = true;
    else if (item == "provider")
      m.provider = true;
    else if (item == "resend")
      m.resend = true;
    else if (item == "malformed")
      m.malformed = true;
    else if (item == "dlq-replay")
      m.dlq_replay = true;
    else if (item == "offset-reset")
      m.offset_reset = true;
    else
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                  fmt::format("--faults: unknown fault '{}' (known: relay-kill, consumer-kill, "
                              "rebalance, provider, resend, malformed, dlq-replay, offset-reset; "
                              "or all, none)",
                              item));
  }
  return m;
}

std::vector<std::pair<std::string, std::string>> malformed_messages() {
  const std::string id = new_uuid_v7().to_string();
  const std::string head = "{\"event_id\":\"" + id + "\",\"event_type\":\"order.confirmed.v1\",";
  const std::string tail =
      R"("occurred_at":"2026-11-29T10:00:00Z","order_id":1,"customer_id":1,"total_amount":"1.00"})";
  return {
      {"{not json", "validation.invalid_json"},
      {head + "\"x\":\"\xff\"," + tail, "validation.invalid_utf8"},
      {R"({"event_type":"order.confirmed.v1",)" + tail, "validation.missing"},
      {R"({"event_id":"not-a-uuid","event_type":"order.confirmed.v1",)" + tail,
       "validation.not_uuid"},
      {R"({"event_id":"6ba7b810-9dad-41d1-80b4-00c04fd430c8","event_type":"order.confirmed.v1",)" +
           tail,
       "validation.not_uuid_v7"},
      {"{\"event_id\":\"" + id + R"(","event_type":"order.cancelled.v1",)" + tail,
       "validation.unknown_event_type"},
      {head + R"("occurred_at":"yesterday","order_id":1,"customer_id":1,"total_amount":"1.00"})",
       "validation.not_rfc3339"},
      {head +
           R"("occurred_at":"2026-11-29T10:00:00Z","order_id":1,"customer_id":1,"total_amount":12.5})",
       "validation.wrong_type"},
      {head +
           R"("occurred_at":"2026-11-29T10:00:00Z","order_id":1,"customer_id":1,"total_amount":"-3.00"})",
       "validation.negative_amount"},
      {head +
           R"("occurred_at":"2026-11-29T10:00:00Z","order_id":1,"customer_id":1,"total_amount":"1.005"})",
       "validation.too_many_fraction_digits"},
  };
}

std::size_t produce_malformed(const RunScope& scope, Injected& injected) {
  ProducerConfig pc;
  pc.bootstrap_servers = scope.brokers;
  Producer producer(pc);
  const auto bad = malformed_messages();
  for (const auto& [payload, reason] : bad) {
    (void)producer.send(ProducerMessage{.topic = scope.topic,
                                        .key = "malformed",
                                        .payload = payload,
                                        .event_id = Uuid(),
                                        .traceparent = {},
                                        .headers = {}});
    ++injected.malformed_by_class[reason];
  }
  std::vector<Delivery> deliveries;
  if (!producer.flush(30s, deliveries))
    throw std::runtime_error("the broker did not acknowledge the malformed messages");
  return bad.size();
}

std::int64_t resend_outbox_rows(Store& store, const RunScope& scope, std::int64_t events,
                                double share, std::mt19937_64& rng) {
  const auto count = static_cast<std::int64_t>(static_cast<double>(events) * share);
  if (count <= 0) return 0;
  const std::int64_t first =
      scope.outbox_after + 1 + std::uniform_int_distribution<std::int64_t>(0, events - count)(rng);
  auto tx = store.begin();
  const std::int64_t resent = republish_outbox_rows(*tx, first, first + count);
  tx->commit();
  return resent;
}

std::int64_t run_dlq_replay(const RunScope& scope, const std::filesystem::path& log) {
  ChildProcess replayer = ChildProcess::spawn(
      self_program(),
      {"dlq", "replay", "--brokers", scope.brokers, "--topic", scope.dlq_topic, "--to", scope.topic,
       "--reason", "handler.dead_letter", "--group", std::string(kBilling)},
      {}, log.string());
  std::string last;
  while (auto line = replayer.read_line(60s)) {
    std::cout << "  dlq replay: " << *line << "\n";
    last = *line;
  }
  if (const int status = replayer.wait(60s); status != 0) {
    throw std::runtime_error(
        fmt::format("idem dlq replay exited with {}; see {}", status, log.string()));
  }
  const auto counters = parse_counters(last);
  const auto it = counters.find("replayed");
  return it == counters.end() ? 0 : static_cast<std::int64_t>(it->second);
}

}  // namespace idem::cli::demo
