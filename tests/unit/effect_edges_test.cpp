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

#include "consumer/letters/retry_topics.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/effect_harness.hpp"

namespace idem::test {
namespace effect_edges_test {

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

// The dedup-horizon guard that gates calls is the one the apply phase uses: an event born
// before what maintenance recorded as dropped makes no call, and is quarantined.
TEST_F(EffectPathEdges, HorizonGuardOfCallsIsTheApplysDroppedMarks) {
  const std::string topic = unique_name("orders");
  EffectHarness h(*broker_, {.topics = {{topic, 1}}});
  const TopicPartition tp{topic, 0};
  const OrderConfirmed old = h.order(1, std::chrono::minutes(10));  // young for the horizon
  DroppedDedupMarks dropped;
  dropped.born_before =
      std::chrono::time_point_cast<std::chrono::milliseconds>(h.wall().now() - 1min);
  dropped.dropped_at = std::chrono::time_point_cast<std::chrono::milliseconds>(h.wall().now());
  dropped.retention = 5min;
  h.horizon_guard().marks_dropped(dropped);
  h.append(tp, old);
  drain(h, {tp}, 20);

  EXPECT_EQ(h.stats().calls, 0u) << "a call was made for an event whose dedup mark may be gone";
  EXPECT_EQ(h.effects_of(old.event_id), 0);
  const auto letters = h.dead_letters(topic);
  ASSERT_EQ(letters.size(), 1u);
  EXPECT_EQ(letters[0].header("idem.error.class"), "stale");
  EXPECT_EQ(h.committed(tp), 1);
}

// An event fresh when admitted that waits behind its key until it is past the horizon:
// its verdict is decided once, at its call, and that verdict is what the apply phase
// does. A call that succeeded is applied; an event stale at its turn makes no call.
TEST_F(EffectPathEdges, HorizonVerdictDecidedOnceAtTheCall) {
  const std::string topic = unique_name("orders");
  DedupHorizon horizon;
  horizon.retention = std::chrono::hours(2);
  horizon.safety_margin = std::chrono::hours(1);  // stale from 1 h of age
  EffectHarness h(*broker_, {.topics = {{topic, 1}}, .dedup_horizon = horizon});
  const TopicPartition tp{topic, 0};
  const OrderConfirmed first = h.order(1);
  const OrderConfirmed waits = h.order(2, 59min);  // fresh now, stale in 1 min
  const OrderConfirmed calls = h.order(3, 58min);  // called at once, stale during its call
  h.append(tp, "key-a", to_json(first));
  h.append(tp, "key-a", to_json(waits));
  h.append(tp, "key-b", to_json(calls));
  h.turn();  // first (key-a) and calls (key-b) are called; waits queues behind first
  ASSERT_EQ(h.pending().size(), 2u);
  h.advance(3min);  // waits and calls are past the horizon now
  while (!h.pending().empty()) h.complete(0, Outcome::Done);
  drain(h, {tp}, 20);

  EXPECT_EQ(h.effects_of(first.event_id), 1);
  EXPECT_EQ(h.effects_of(calls.event_id), 1)
      << "a call that succeeded (the provider charged) was not applied";
  EXPECT_EQ(h.effects_of(waits.event_id), 0);
  EXPECT_EQ(h.stats().calls, 2u) << "the event that turned stale while it waited was called";
  const auto letters = h.dead_letters(topic);
  ASSERT_EQ(letters.size(), 1u);
  EXPECT_EQ(letters[0].header("idem.original.offset"), "1");
  EXPECT_EQ(letters[0].header("idem.error.class"), "stale");
  EXPECT_EQ(h.committed(tp), 3);
}

// A record of an effect topic is parsed once per delivery, when it is polled: its call is
// made on that event and its apply phase reuses it, whether it is applied, found a
// duplicate, or refused as malformed.
TEST_F(EffectPathEdges, EachRecordParsedOnce) {
  const std::string topic = unique_name("orders");
  int parses = 0;
  EffectHarness h(*broker_, {.topics = {{topic, 1}},
                             .parser = [&](const RecordInfo& record, const ParseLimits& limits) {
                               ++parses;
                               return EventCodec<OrderConfirmed>::parse(record.payload, limits);
                             }});
  const TopicPartition tp{topic, 0};
  const OrderConfirmed event = h.order(1);
  h.append(tp, event);
  h.append(tp, event);  // the producer's resend: the same event at the next offset
  h.append(tp, "key-x", "{not json");
  drain(h, {tp}, 20);

  EXPECT_EQ(h.effects_of(event.event_id), 1);
  EXPECT_EQ(h.dead_letters(topic).size(), 1u) << "the malformed record";
  EXPECT_EQ(h.committed(tp), 3);
  EXPECT_EQ(parses, 3) << "one parse per record delivered";
}

// Two copies of one event in one apply transaction, the first dead-lettered by its call
// and the second (another partition, another key) charged: the charge is applied once.
TEST_F(EffectPathEdges, TwinCopiesFirstDeadLetteredSecondApplied) {
  const std::string topic = unique_name("orders");
  EffectHarness h(*broker_, {.topics = {{topic, 2}}});
  const TopicPartition p0{topic, 0};
  const TopicPartition p1{topic, 1};
  const OrderConfirmed event = h.order(1);
  h.append(p0, "key-a", to_json(event));
  h.append(p1, "key-b", to_json(event));
  h.turn();
  ASSERT_EQ(h.pending().size(), 2u) << "both copies are called";
  for (std::size_t i = 0; i < 2; ++i) {
    const bool first = h.pending()[0].tp == p0;
    h.complete(0, first ? Outcome::DeadLetter : Outcome::Done, "declined for this copy");
  }
  drain(h, {p0, p1}, 20);

  EXPECT_EQ(h.effects_of(event.event_id), 1) << "the successful call of the second copy";
  EXPECT_EQ(h.committed(p0), 1);
  EXPECT_EQ(h.committed(p1), 1);
}

// A retry letter too large for its retry topic can never be sent: the record becomes a
// dead letter (cut to a prefix) with a reason of its own, instead of its call being
// repeated forever with its partition held.
TEST_F(EffectPathEdges, RetryLetterTooLargeForTheRetryTopic) {
  const std::string topic = unique_name("orders");
  EffectHarness h(*broker_, {.topics = {{topic, 1}}, .retry_delays = {1000ms}});
  h.config().limits.max_payload_bytes = 1'000'000;
  const TopicPartition tp{topic, 0};
  OrderConfirmed big = h.order(1);
  std::string payload = to_json(big);
  // 999,900 bytes: the record fits a Kafka message (1,000,000 bytes by default); its retry
  // letter, the same payload with idem's headers added, does not.
  const std::string field = ",\"padding\":\"\"";
  payload.insert(payload.size() - 1, field);
  payload.insert(payload.size() - 2, std::string(999'900 - payload.size(), 'x'));
  h.append(tp, "key-a", payload);
  int calls = 0;
  for (int turn = 0; turn < 30 && calls < 5; ++turn) {
    h.turn();
    while (!h.pending().empty()) {
      ++calls;
      h.complete(0, Outcome::Retry, "provider unavailable");
    }
    h.advance(100ms);
  }
  EXPECT_EQ(calls, 1) << "the call was repeated because its retry letter never got through";
  const auto letters = h.dead_letters(topic);
  ASSERT_EQ(letters.size(), 1u);
  EXPECT_EQ(letters[0].header("idem.error.class"), "retry.too_large");
  EXPECT_EQ(letters[0].header("idem.payload.truncated"), "true");
  EXPECT_EQ(h.committed(tp), 1);
}

// A record skipped as stale when admitted keeps its verdict: a wall clock that steps back
// before its apply does not turn it into a record whose apply asks for a retry, again and
// again.
TEST_F(EffectPathEdges, StaleSkippedRecordDoesNotLoop) {
  const std::string topic = unique_name("orders");
  DedupHorizon horizon;
  horizon.retention = std::chrono::hours(2);
  horizon.safety_margin = std::chrono::hours(1);
  EffectHarness h(*broker_, {.topics = {{topic, 1}},
                             .batch_size = 2,
                             .stale_events = StaleEventPolicy::Skip,
                             .dedup_horizon = horizon});
  const TopicPartition tp{topic, 0};
  const OrderConfirmed a = h.order(1);
  const OrderConfirmed b = h.order(2);
  const OrderConfirmed stale = h.order(3, std::chrono::hours(3));
  h.append(tp, "key-a", to_json(a));
  h.append(tp, "key-b", to_json(b));
  h.append(tp, "key-c", to_json(stale));
  h.turn();  // a and b are called (a poll takes a batch: 2 records)
  ASSERT_EQ(h.pending().size(), 2u);
  while (!h.pending().empty()) h.complete(0, Outcome::Done);
  h.turn();  // the stale one is skipped; a and b fill the apply transaction; it waits
  ASSERT_EQ(h.committed(tp), 2);
  h.wall().set(h.wall().now() - std::chrono::hours(4));  // the wall clock steps back
  drain(h, {tp}, 20);

  EXPECT_EQ(h.committed(tp), 3) << "the stale record did not finish";
  EXPECT_EQ(h.stats().calls, 2u);
  EXPECT_EQ(h.effects_of(stale.event_id), 0);
  EXPECT_LE(h.stats().transactions, 2u) << "the skipped record was applied again and again";
}

}  // namespace effect_edges_test
}  // namespace idem::test
