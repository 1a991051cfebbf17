// idem dlq (idem/dlq.hpp) against the shared dev broker and a real Consumer on a
// SQLite file store: dead letters are read back with their idem.* headers decoded and
// filtered; a replay after the cause was fixed applies each event exactly once, and
// replaying again applies nothing new; a replay also reaching another group is a
// no-op there; events past the dedup horizon are refused unless forced; --dry-run
// sends nothing. Synchronisation is by condition with a deadline.
#include "idem/dlq.hpp"
#include "idem/reference/schema.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/consumer.hpp"
#include "idem/devtools/dev_broker.hpp"
#include "idem/error.hpp"
#include "idem/reference/count_handler.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/store.hpp"
#include "support/consumer_scenario.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/manual_clock.hpp"
#include "support/process.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem {
namespace dlq_test {

using namespace std::chrono_literals;
using test::KafkaTestProducer;
using test::TestRecord;

using test::unique_name;

OrderConfirmed make_event(std::int64_t order_id, Uuid id = new_uuid_v7()) {
  OrderConfirmed e;
  e.event_id = id;
  e.occurred_at = std::chrono::time_point_cast<std::chrono::microseconds>(id.timestamp());
  e.order_id = order_id;
  e.customer_id = 7;
  e.total_amount = Amount::from_hundredths(1250);
  return e;
}

TestRecord record_of(const std::string& topic, const OrderConfirmed& e) {
  return {
      topic, std::to_string(e.order_id), to_json(e), {{"event_id", e.event_id.to_string()}}, -1};
}

class DlqTest : public test::DevBrokerSuite {
 protected:
  void SetUp() override { set_up(*broker_); }

  /// A store, and a topic with its DLQ on `broker`.
  template <class Broker>
  void set_up(Broker& broker) {
    bootstrap_ = broker.bootstrap_servers();
    db_url_ = test::fresh_sqlite_url();
    idem::migrate_reference_system(*open_store(db_url_));
    observer_ = open_store(db_url_);
    topic_ = unique_name("orders");
    broker.create_topic(topic_, 2);
    broker.create_topic(topic_ + ".dlq", 1);
  }

  [[nodiscard]] DlqConnection connection() const { return DlqConnection{bootstrap_, {}, 20s}; }

  ConsumerConfig config_for(const std::string& group) const {
    return test::mock_consumer_config(bootstrap_, group, {topic_});
  }

  void produce(const std::vector<TestRecord>& records) {
    KafkaTestProducer producer(bootstrap_);
    for (const auto& r : records) producer.send(r);
    producer.flush();
  }

  std::int64_t effects_of(const Uuid& id, const std::string& group) {
    auto tx = observer_->begin();
    return tx
        ->execute("SELECT count(*) FROM effect_log WHERE event_id = $1 AND consumer_group = $2", id,
                  group)[0]
        .int64(0);
  }

  std::string bootstrap_;
  std::string db_url_;
  std::unique_ptr<Store> observer_;
  std::string topic_;
};

/// On a broker of its own: the test refuses Produce requests, which would reach every
/// client of the shared broker.
class DlqRefusalTest : public DlqTest {
 protected:
  void SetUp() override { set_up(private_broker_); }
  DevBroker private_broker_;
};

// A 2 MiB record with valid fields at offset 0 used to block its
// partition for ever (its dead letter was refused as too large and the batch retried),
// and the batch's other dead letters were sent again on every retry. Now the letter is
// sent once, cut to a prefix with the original size and SHA-256, and the partition moves on.
TEST_F(DlqTest, OversizedRecordReachesTheDlqTruncatedOnceAndDoesNotBlockItsPartition) {
  OrderConfirmed big = make_event(1);
  std::string payload = to_json(big);
  payload.insert(payload.size() - 1, ",\"padding\":\"" + std::string(2 * 1024 * 1024, 'x') + "\"");
  std::vector<TestRecord> records = {
      {topic_, "1", payload, {{"event_id", big.event_id.to_string()}}, 0}};
  records.push_back({topic_, "2", "{not json", {}, 0});  // malformed, same batch
  std::vector<OrderConfirmed> valid;
  for (int i = 3; i <= 22; ++i) {
    valid.push_back(make_event(i));
    records.push_back(record_of(topic_, valid.back()));
    records.back().partition = 0;
  }
  produce(records);

  const std::string group = unique_name("billing");
  auto consumer = std::make_unique<Consumer>(config_for(group), open_store(db_url_));
  consumer->on<OrderConfirmed>(topic_, count_handler<OrderConfirmed>());
  test::RunningConsumer running(std::move(consumer));
  ASSERT_TRUE(test::eventually([&] { return count_effects(*observer_, group) == 20; }, 60s))
      << "the valid records behind the oversized one were not processed";
  ASSERT_TRUE(test::eventually([&] { return running->stats().dead_lettered == 2; }, 30s));

  const auto letters = read_dead_letters(connection(), topic_ + ".dlq");
  ASSERT_EQ(letters.size(), 2u);
  const DeadLetterRecord& cut = letters[0].original_offset == 0 ? letters[0] : letters[1];
  EXPECT_EQ(cut.original_offset, 0);
  EXPECT_EQ(cut.error_class, "validation.too_large");
  EXPECT_EQ(cut.header("idem.payload.truncated"), "true");
  EXPECT_EQ(cut.header("idem.original.size"), std::to_string(payload.size()));
  ASSERT_TRUE(cut.header("idem.original.sha256").has_value());
  EXPECT_EQ(cut.header("idem.original.sha256")->size(), 64u);
  EXPECT_LT(cut.payload.size(), payload.size());
  EXPECT_EQ(cut.payload, payload.substr(0, cut.payload.size()));
  for (const auto& letter : letters)
    EXPECT_EQ(letter.copies, 1u) << letter.original_offset.value_or(-1);
}

// A dead letter the broker refuses for good (here: "not
// authorized" for the DLQ topic, on its next three Produce requests) cannot be dropped
// (the record would be lost), so its record is retried in place, after the backoff, as
// before; it is now counted (idem_consumer_dead_letters_refused_total) and logged as
// permanent instead of spinning silently, and the other partitions go on. Once the broker
// accepts the letter, it goes. (Metadata errors for the topic, `topic-error`, make
// librdkafka hold the letter until dlq_ack_timeout instead: a timeout, transient.)
TEST_F(DlqRefusalTest, ADeadLetterRefusedForGoodIsCountedAndRetriedUntilTheDlqIsFixed) {
  constexpr int kTopicAuthorizationFailed = 29;
  constexpr int kProduce = 0;
  const std::array<int, 3> refusals = {kTopicAuthorizationFailed, kTopicAuthorizationFailed,
                                       kTopicAuthorizationFailed};
  std::vector<TestRecord> records = {{topic_, "1", "{not json", {}, 0}};
  std::vector<OrderConfirmed> valid;
  for (int i = 2; i <= 11; ++i) {
    valid.push_back(make_event(i));
    records.push_back(record_of(topic_, valid.back()));
    records.back().partition = 1;
  }
  produce(records);
  private_broker_.push_request_errors(kProduce, refusals);  // after the test's own produce

  const std::string group = unique_name("billing");
  ConsumerConfig config = config_for(group);
  config.dlq_ack_timeout = 5s;
  auto consumer = std::make_unique<Consumer>(config, open_store(db_url_));
  consumer->on<OrderConfirmed>(topic_, count_handler<OrderConfirmed>());
  test::RunningConsumer running(std::move(consumer));
  ASSERT_TRUE(test::eventually([&] { return count_effects(*observer_, group) == 10; }, 60s))
      << "the other partition was held up";
  ASSERT_TRUE(test::eventually([&] { return running->stats().dead_lettered == 1; }, 90s))
      << "the record was lost or is still blocked";
  EXPECT_GE(running->stats().dead_letters_refused, 1u) << "the refusals were counted";
  ASSERT_TRUE(test::eventually([&] { return running->stats().dead_lettered == 1; }, 90s))
      << "the record was lost or is still blocked";
  const auto letters = read_dead_letters(connection(), topic_ + ".dlq");
  ASSERT_EQ(letters.size(), 1u);
  EXPECT_EQ(letters[0].original_offset, 0);
}

// A consumer that crashed after its letter was acknowledged but before its offset commit
// sends the letter again; `idem dlq list/replay` show and replay the record once.
TEST_F(DlqTest, LettersOfTheSameOriginalRecordAreCollapsed) {
  const OrderConfirmed five = make_event(5);
  const OrderConfirmed six = make_event(6);
  const auto letter_for = [&](const OrderConfirmed& event, std::int64_t original_offset) {
    TestRecord r = record_of(topic_ + ".dlq", event);
    r.headers.emplace_back("idem.original.topic", topic_);
    r.headers.emplace_back("idem.original.partition", "1");
    r.headers.emplace_back("idem.original.offset", std::to_string(original_offset));
    r.headers.emplace_back("idem.error.class", "validation.missing");
    return r;
  };
  // Offset 7 twice, but two different events: a topic created again reuses offsets, so
  // those are two records.
  produce({letter_for(five, 5), letter_for(five, 5), letter_for(six, 6), letter_for(five, 5),
           letter_for(make_event(7), 7), letter_for(make_event(8), 7)});
  const auto letters = read_dead_letters(connection(), topic_ + ".dlq");
  ASSERT_EQ(letters.size(), 4u);
  EXPECT_EQ(letters[0].original_offset, 5);
  EXPECT_EQ(letters[0].copies, 3u);
  EXPECT_EQ(letters[1].original_offset, 6);
  EXPECT_EQ(letters[1].copies, 1u);
}

TEST_F(DlqTest, ReplayAfterTheFixAppliesEachEventOnceAndAgainAppliesNothing) {
  std::vector<OrderConfirmed> events;
  std::vector<TestRecord> records;
  for (int i = 1; i <= 12; ++i) {
    events.push_back(make_event(i));
    records.push_back(record_of(topic_, events.back()));
  }
  produce(records);

  // Billing has a bug for every third order until it is fixed; analytics has none.
  const std::string billing = unique_name("billing");
  const std::string analytics = unique_name("analytics");
  std::atomic<bool> fixed{false};
  auto billing_consumer = std::make_unique<Consumer>(config_for(billing), open_store(db_url_));
  billing_consumer->on<OrderConfirmed>(
      topic_, Handler<OrderConfirmed>(
                  [&fixed](const OrderConfirmed& e, const RecordInfo& r, Transaction& tx) {
                    if (!fixed.load() && e.order_id % 3 == 0) return Outcome::DeadLetter;
                    record_effect(tx, e.event_id, r);
                    return Outcome::Done;
                  }));
  auto analytics_consumer = std::make_unique<Consumer>(config_for(analytics), open_store(db_url_));
  analytics_consumer->on<OrderConfirmed>(topic_, count_handler<OrderConfirmed>());
  test::RunningConsumer b(std::move(billing_consumer));
  test::RunningConsumer a(std::move(analytics_consumer));
  ASSERT_TRUE(test::eventually(
      [&] {
        return b->stats().dead_lettered == 4 && count_effects(*observer_, billing) == 8 &&
               count_effects(*observer_, analytics) == 12;
      },
      60s, 20ms));

  // The dead letters decode: reason, group, original position, attempts, event id.
  const auto letters = read_dead_letters(connection(), topic_ + ".dlq");
  ASSERT_EQ(letters.size(), 4u);
  for (const auto& l : letters) {
    EXPECT_EQ(l.error_class, "handler.dead_letter");
    EXPECT_EQ(l.consumer_group, billing);
    EXPECT_EQ(l.original_topic, topic_);
    EXPECT_TRUE(l.original_partition.has_value());
    EXPECT_TRUE(l.original_offset.has_value());
    EXPECT_EQ(l.attempts, 1u);
    ASSERT_TRUE(l.event_id.has_value());
    EXPECT_EQ(std::stoi(l.key) % 3, 0);
  }
  DlqFilter by_key;
  by_key.key = "6";
  ASSERT_EQ(read_dead_letters(connection(), topic_ + ".dlq", by_key).size(), 1u);
  DlqFilter by_family;
  by_family.reason = "handler";
  EXPECT_EQ(read_dead_letters(connection(), topic_ + ".dlq", by_family).size(), 4u);
  DlqFilter other_reason;
  other_reason.reason = "validation";
  EXPECT_TRUE(read_dead_letters(connection(), topic_ + ".dlq", other_reason).empty());

  // Dry run: nothing is sent.
  const auto end_before = test::end_offsets(bootstrap_, topic_, 2);
  ReplayOptions dry;
  dry.dry_run = true;
  const ReplayReport planned = replay_dead_letters(connection(), topic_ + ".dlq", dry);
  EXPECT_EQ(planned.replayed, 4u);
  EXPECT_EQ(test::end_offsets(bootstrap_, topic_, 2), end_before);

  // Fix the cause, replay: each dead-lettered event gets exactly one effect.
  fixed.store(true);
  std::size_t progress_calls = 0;
  ReplayOptions replay;
  replay.on_progress = [&](const ReplayProgress& p) {
    ++progress_calls;
    EXPECT_LE(p.done, p.total);
  };
  const ReplayReport first = replay_dead_letters(connection(), topic_ + ".dlq", replay);
  EXPECT_EQ(first.replayed, 4u);
  EXPECT_EQ(first.failed, 0u);
  EXPECT_GT(progress_calls, 0u);
  ASSERT_TRUE(test::eventually([&] { return count_effects(*observer_, billing) == 12; }, 60s));
  // Analytics saw the replayed records too and skipped them as duplicates.
  ASSERT_TRUE(test::eventually([&] { return a->stats().duplicates >= 4; }, 60s));

  // Replay again: the same 4 records are sent again, and nothing new is applied.
  const auto delivered_before = b->stats().delivered;
  const ReplayReport second = replay_dead_letters(connection(), topic_ + ".dlq", replay);
  EXPECT_EQ(second.replayed, 4u);
  ASSERT_TRUE(test::eventually([&] { return b->stats().delivered >= delivered_before + 4; }, 60s));
  ASSERT_TRUE(test::eventually([&] { return a->stats().duplicates >= 8; }, 60s));
  EXPECT_EQ(count_effects(*observer_, billing), 12);
  EXPECT_EQ(count_effects(*observer_, analytics), 12);
  for (const auto& e : events) {
    EXPECT_EQ(effects_of(e.event_id, billing), 1) << e.order_id;
    EXPECT_EQ(effects_of(e.event_id, analytics), 1) << e.order_id;
  }
  EXPECT_TRUE(a.stop());
  EXPECT_TRUE(b.stop());
  EXPECT_FALSE(a.error());
  EXPECT_FALSE(b.error());
}

TEST_F(DlqTest, EventsPastTheDedupHorizonAreRefusedUnlessForced) {
  const test::ManualClock clock(std::chrono::system_clock::now());
  const OrderConfirmed old_event = make_event(1, test::uuid_v7_born_at(clock.now() - 8 * 24h));
  const OrderConfirmed fresh_event = make_event(2, test::uuid_v7_born_at(clock.now() - 1h));
  const auto letter = [&](const OrderConfirmed& e) {
    TestRecord r = record_of(topic_ + ".dlq", e);
    r.headers.emplace_back("idem.original.topic", topic_);
    r.headers.emplace_back("idem.original.partition", "0");
    r.headers.emplace_back("idem.original.offset", "0");
    r.headers.emplace_back("idem.consumer.group", "billing");
    r.headers.emplace_back("idem.error.class", "handler.exception");
    r.headers.emplace_back("idem.error.message", "boom");
    r.headers.emplace_back("idem.attempts", "1");
    return r;
  };
  produce({letter(old_event), letter(fresh_event)});

  ReplayOptions options;
  options.clock = &clock;
  options.horizon.retention = 7 * 24h;
  options.horizon.safety_margin = 1h;
  const ReplayReport report = replay_dead_letters(connection(), topic_ + ".dlq", options);
  EXPECT_EQ(report.replayed, 1u);
  EXPECT_EQ(report.refused_stale, 1u);
  ASSERT_EQ(report.items.size(), 2u);
  EXPECT_EQ(report.items[0].action, ReplayAction::RefusedStale);
  EXPECT_EQ(report.items[0].record.event_id, old_event.event_id);
  auto on_topic = test::read_topic(bootstrap_, topic_, 2, 1, 20s);
  ASSERT_EQ(on_topic.size(), 1u);
  EXPECT_EQ(on_topic[0].payload, to_json(fresh_event));  // same bytes: same event_id
  EXPECT_EQ(on_topic[0].header("event_id"), fresh_event.event_id.to_string());
  EXPECT_EQ(on_topic[0].header("idem.error.class"), std::nullopt);  // failure headers dropped
  EXPECT_EQ(on_topic[0].header("idem.replayed.from"), topic_ + ".dlq/0/1");

  // The same check with a clock 8 days later refuses the fresh one as well.
  test::ManualClock later(clock.now() + 8 * 24h);
  options.clock = &later;
  options.dry_run = true;
  EXPECT_EQ(replay_dead_letters(connection(), topic_ + ".dlq", options).refused_stale, 2u);

  // --force replays the old one too.
  options.clock = &clock;
  options.dry_run = false;
  options.force = true;
  options.filter.event_id = old_event.event_id;
  EXPECT_EQ(replay_dead_letters(connection(), topic_ + ".dlq", options).replayed, 1u);
  on_topic = test::read_topic(bootstrap_, topic_, 2, 2, 20s);
  EXPECT_EQ(on_topic.size(), 2u);
}

TEST_F(DlqTest, ReplayToAnotherTopicAndBadInputAreReported) {
  const OrderConfirmed e = make_event(5);
  TestRecord no_origin = record_of(topic_ + ".dlq", e);  // no idem.* headers at all
  produce({no_origin});
  const ReplayReport skipped = replay_dead_letters(connection(), topic_ + ".dlq", ReplayOptions{});
  EXPECT_EQ(skipped.no_target, 1u);
  EXPECT_EQ(skipped.replayed, 0u);

  const std::string other = unique_name("repaired");
  broker_->create_topic(other, 1);
  ReplayOptions to_other;
  to_other.to_topic = other;
  EXPECT_EQ(replay_dead_letters(connection(), topic_ + ".dlq", to_other).replayed, 1u);
  const auto copied = test::read_topic(bootstrap_, other, 1, 1, 20s);
  ASSERT_EQ(copied.size(), 1u);
  EXPECT_EQ(copied[0].key, "5");

  ReplayOptions negative;
  negative.rate_limit = -1;
  EXPECT_THROW(static_cast<void>(replay_dead_letters(connection(), topic_ + ".dlq", negative)),
               Error);
}

TEST_F(DlqTest, CliReplaysWithTheFlagsOperatorsUse) {
  const std::string cli = IDEM_CLI_PATH;
  IDEM_REQUIRE_CLI();
  const OrderConfirmed e = make_event(9);
  TestRecord letter = record_of(topic_ + ".dlq", e);
  letter.headers.emplace_back("idem.original.topic", topic_);
  letter.headers.emplace_back("idem.consumer.group", "billing");
  letter.headers.emplace_back("idem.error.class", "handler.dead_letter");
  produce({letter});

  // `idem dlq replay --brokers B --topic T.dlq [--to T] [--reason R] [--dry-run]`
  const auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"dlq",      "replay",  "--brokers",
                                     bootstrap_, "--topic", topic_ + ".dlq"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto child = test::ChildProcess::spawn(cli, args);
    std::string out;
    while (auto line = child.read_line(60s)) out += *line + "\n";
    return std::pair(child.wait(60s), out);
  };
  const auto [dry_rc, dry_out] = run({"--reason", "handler", "--dry-run"});
  EXPECT_EQ(dry_rc, 0) << dry_out;
  EXPECT_NE(dry_out.find("would replay 0/0 event_id=" + e.event_id.to_string()), std::string::npos)
      << dry_out;
  EXPECT_NE(dry_out.find("dry run: selected=1 replayed=1"), std::string::npos) << dry_out;
  const auto [none_rc, none_out] = run({"--reason", "validation"});
  EXPECT_EQ(none_rc, 0) << none_out;
  EXPECT_NE(none_out.find("selected=0"), std::string::npos) << none_out;
  const auto [rc, out] = run({"--to", topic_});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("selected=1 replayed=1"), std::string::npos) << out;
  const auto copied = test::read_topic(bootstrap_, topic_, 2, 1, 20s);
  ASSERT_EQ(copied.size(), 1u);
  EXPECT_EQ(copied[0].payload, to_json(e));
}

}  // namespace dlq_test
}  // namespace idem
