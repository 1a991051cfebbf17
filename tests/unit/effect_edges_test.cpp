// Edge cases of the effect path (Consumer::on_effect), each driven turn by turn through
// the EffectHarness: real records and letters on an in-process DevBroker, a scripted
// fetch (librdkafka's pause flags and positions), clocks moved by hand and calls the
// test completes. Each test names the way an effect could be lost, doubled, stalled or
// repeated, and asserts that it is not. docs/effect-path-edges.md says what each printed
// on the code before its fix.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "consumer/retry_topics.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/effect_harness.hpp"

namespace idem::test {
namespace {

using namespace std::chrono_literals;

class EffectPathEdges : public DevBrokerSuite {};

/// The headers idem writes on a retry-topic record of level 1, due at `not_before`.
Headers retry_headers(std::chrono::system_clock::time_point not_before) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(not_before.time_since_epoch()).count();
  return {{detail::kAttemptsHeader, "1"}, {detail::kNotBeforeHeader, std::to_string(ms)}};
}

/// Turns, completing every call with done(), until nothing is pending and the committed
/// position of each partition in `partitions` reached its end (at most `turns` turns, the
/// clocks 100 ms on per turn).
void drain(EffectHarness& h, const std::vector<TopicPartition>& partitions, int turns = 200) {
  for (int i = 0; i < turns; ++i) {
    h.turn();
    while (!h.pending().empty()) h.complete(0, Outcome::Done);
    bool all = true;
    for (const auto& tp : partitions) all = all && h.committed(tp) == h.log().end(tp);
    if (all && h.pending().empty()) return;
    h.advance(100ms);
  }
}

// A retry-topic partition held by both the buffer limit and a not-before deferral: the
// deferral's end must not resume it while the buffer still holds it (and the buffer's end
// must not resume it past a deferral), and the records a paused partition refused come
// again. Every record is called once, applied once, and the committed position never
// passes a record that was not applied.
TEST_F(EffectPathEdges, RetryTopicRecordsSkipped) {
  const std::string topic = unique_name("orders");
  EffectHarness h(
      *broker_,
      {.topics = {{topic, 1}}, .retry_delays = {1000ms}, .max_buffered_per_partition = 4});
  const TopicPartition retry{h.retry_topic(topic, 1), 0};
  const auto now = h.wall().now();
  std::vector<OrderConfirmed> events;
  for (int i = 0; i < 14; ++i) {
    // 0-3 due now, 4-9 due in 1 s, 10-13 due in 5 s: retry records in not-before order.
    const auto due = i < 4 ? now - 1s : i < 10 ? now + 1s : now + 5s;
    events.push_back(h.order(i + 1));
    h.append(retry, std::to_string(i + 1), to_json(events.back()), retry_headers(due));
  }
  h.turn();  // 0-3 are called (slow); 4 is not due: deferred; the buffer (4) is full
  ASSERT_EQ(h.pending().size(), 4u);
  h.advance(1000ms);
  h.turn();  // 4 is due; 10 is not
  while (!h.pending().empty()) h.complete(0, Outcome::Done);
  h.turn();  // 0-3 applied: the buffer drains
  h.advance(4000ms);
  drain(h, {retry});

  for (int i = 0; i < 14; ++i) {
    const std::int64_t applied = h.effects_of(events[i].event_id);
    EXPECT_EQ(applied, 1) << "retry record at offset " << i << " was applied that many times";
    if (applied == 0) {
      EXPECT_LE(h.committed(retry).value_or(0), i)
          << "the committed position passed offset " << i << ", which was never applied";
    }
  }
  EXPECT_EQ(h.committed(retry), 14);
  EXPECT_EQ(h.stats().calls, 14u);
}

}  // namespace
}  // namespace idem::test
