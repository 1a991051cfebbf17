// idem::Consumer against the shared dev broker (the mock cluster) and a SQLite file store:
// exactly one effect per valid event, dead letters with their reasons, offsets only
// after the DB commit, savepoint isolation, per-partition retry, graceful stop, groups.
// Synchronisation is always "wait for a condition with a deadline", never a sleep.
#include "idem/consumer.hpp"
#include "idem/reference/schema.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/error.hpp"
#include "idem/reference/count_handler.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/retry.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/shared_broker.hpp"
#include "support/store_backends.hpp"
#include "support/wait.hpp"

namespace idem {
namespace consumer_test {

using test::eventually;

using namespace std::chrono_literals;
using test::KafkaTestProducer;
using test::RunningConsumer;
using test::TestRecord;
using test::unique_name;

OrderConfirmed make_event(std::int64_t order_id) {
  OrderConfirmed e;
  e.event_id = new_uuid_v7();
  e.occurred_at =
      std::chrono::time_point_cast<std::chrono::microseconds>(std::chrono::system_clock::now());
  e.order_id = order_id;
  e.customer_id = 42;
  e.total_amount = Amount::from_hundredths(1999);
  return e;
}

// The codec's own parse as a RecordParser: Consumer::on takes a HandlerScope only beside a
// parser.
RecordParser<OrderConfirmed> codec_parser() {
  return [](const RecordInfo& r, const ParseLimits& limits) {
    return EventCodec<OrderConfirmed>::parse(r.payload, limits);
  };
}

TestRecord record_of(const std::string& topic, const OrderConfirmed& e,
                     std::int32_t partition = -1) {
  return {topic,
          std::to_string(e.order_id),
          to_json(e),
          {{"event_id", e.event_id.to_string()}},
          partition};
}

class ConsumerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { broker_ = &test::shared_broker(); }

  void SetUp() override {
    db_url_ = test::fresh_sqlite_url();
    idem::migrate_reference_system(*open_store(db_url_));
    observer_ = open_store(db_url_);
  }

  /// A new topic with `partitions` partitions and its DLQ topic (1 partition).
  std::string make_topic(int partitions) {
    const std::string topic = unique_name("orders");
    broker_->create_topic(topic, partitions);
    broker_->create_topic(topic + ".dlq", 1);
    return topic;
  }

  ConsumerConfig config_for(const std::string& topic, const std::string& group) const {
    ConsumerConfig c = test::mock_consumer_config(broker_->bootstrap_servers(), group, {topic});
    c.retry.initial_backoff = 20ms;
    c.retry.max_backoff = 200ms;
    return c;
  }

  std::int64_t effects(const std::string& group) { return count_effects(*observer_, group); }
  std::int64_t scalar(const std::string& sql, const Uuid& id, const std::string& group) {
    auto tx = observer_->begin();
    const Rows rows = tx->execute(sql, id, group);
    return rows[0].int64(0);
  }

  void produce(const std::vector<TestRecord>& records) {
    KafkaTestProducer producer(broker_->bootstrap_servers());
    for (const auto& r : records) producer.send(r);
    producer.flush();
  }

  /// Produces orders first..first+count-1 to `topic`, order i to partition_of(i) (-1: by
  /// its key).
  void produce_orders(const std::string& topic, int first, int count,
                      const std::function<std::int32_t(int)>& partition_of = {}) {
    std::vector<TestRecord> records;
    for (int i = first; i < first + count; ++i)
      records.push_back(record_of(topic, make_event(i), partition_of ? partition_of(i) : -1));
    produce(records);
  }

  /// Orders 1-3 and then a malformed record, all to partition 0 of `topic`.
  void produce_orders_then_a_malformed_one(const std::string& topic) {
    std::vector<TestRecord> records;
    for (int i = 1; i <= 3; ++i) records.push_back(record_of(topic, make_event(i), 0));
    records.push_back({topic, "x", "{not json", {}, 0});
    produce(records);
  }

  static test::SharedBroker* broker_;
  std::string db_url_;
  std::unique_ptr<Store> observer_;
};

test::SharedBroker* ConsumerTest::broker_ = nullptr;

std::unique_ptr<Consumer> counting_consumer(const ConsumerConfig& config, const std::string& db_url,
                                            ConsumerHooks hooks = {}) {
  auto c = std::make_unique<Consumer>(config, open_store(db_url), std::move(hooks));
  for (const auto& t : config.topics) c->on<OrderConfirmed>(t, count_handler<OrderConfirmed>());
  return c;
}

TEST_F(ConsumerTest, EachValidEventHasExactlyOneEffect) {
  const std::string topic = make_topic(3);
  const std::string group = unique_name("g");
  std::vector<TestRecord> records;
  std::vector<OrderConfirmed> events;
  for (int i = 0; i < 200; ++i) events.push_back(make_event(i + 1));
  for (const auto& e : events) records.push_back(record_of(topic, e));
  // 10% resends: the same event (same event_id) at a new offset.
  for (int i = 0; i < 200; i += 10)
    records.push_back(record_of(topic, events[static_cast<std::size_t>(i)]));
  produce(records);

  RunningConsumer consumer(counting_consumer(config_for(topic, group), db_url_));
  ASSERT_TRUE(eventually([&] { return consumer->stats().delivered >= 220; }));
  ASSERT_TRUE(consumer.stop());
  EXPECT_EQ(effects(group), 200);
  EXPECT_EQ(max_effects_per_event(*observer_, group), 1);
  const ConsumerStats s = consumer->stats();
  EXPECT_EQ(s.processed, 200u);
  EXPECT_EQ(s.duplicates, 20u);
  EXPECT_EQ(s.dead_lettered, 0u);
  const auto committed = test::committed_offsets(broker_->bootstrap_servers(), group, topic, 3);
  EXPECT_EQ(committed, test::end_offsets(broker_->bootstrap_servers(), topic, 3));
}

TEST_F(ConsumerTest, MalformedMessagesGoToDlqWithReasonHeaders) {
  const std::string topic = make_topic(1);
  const std::string unrouted = make_topic(1);
  const std::string group = unique_name("g");
  OrderConfirmed v4 = make_event(7);
  v4.event_id = *Uuid::parse("6ba7b810-9dad-41d1-80b4-00c04fd430c8");  // a version-4 UUID
  std::string unknown_type = to_json(make_event(8));
  unknown_type.replace(unknown_type.find("order.confirmed.v1"), 18, "order.shipped.v9");

  std::vector<TestRecord> records;
  records.push_back(record_of(topic, make_event(1)));
  records.push_back({topic, "k-json", "{not json", {{"traceparent", "00-abc-def-01"}}});
  records.push_back({topic, "k-missing", R"({"event_type":"order.confirmed.v1"})", {}});
  records.push_back(record_of(topic, v4));
  records.push_back({topic, "k-type", unknown_type, {}});
  records.push_back({topic, "k-large", std::string(4096, 'x'), {}});
  records.push_back(record_of(topic, make_event(2)));
  records.push_back(record_of(unrouted, make_event(3)));
  produce(records);

  ConsumerConfig config = config_for(topic, group);
  config.topics.push_back(unrouted);
  config.limits.max_payload_bytes = 2048;
  auto c = std::make_unique<Consumer>(config, open_store(db_url_));
  c->on<OrderConfirmed>(topic, count_handler<OrderConfirmed>());  // `unrouted` has no handler
  RunningConsumer consumer(std::move(c));
  ASSERT_TRUE(eventually([&] { return consumer->stats().dead_lettered >= 6; }));
  ASSERT_TRUE(consumer.stop());
  EXPECT_EQ(effects(group), 2);

  const auto dlq = test::read_topic(broker_->bootstrap_servers(), topic + ".dlq", 1, 5, 20s);
  ASSERT_EQ(dlq.size(), 5u);
  const std::vector<std::string> expected_classes = {
      "validation.invalid_json", "validation.missing", "validation.not_uuid_v7",
      "validation.unknown_event_type", "validation.too_large"};
  for (std::size_t i = 0; i < dlq.size(); ++i) {
    const auto& r = dlq[i];
    SCOPED_TRACE(fmt::format("dlq record {}", i));
    EXPECT_EQ(r.header("idem.error.class"), expected_classes[i]);
    EXPECT_EQ(r.header("idem.original.topic"), topic);
    EXPECT_EQ(r.header("idem.original.partition"), "0");
    EXPECT_EQ(r.header("idem.original.offset"), std::to_string(i + 1));
    EXPECT_EQ(r.header("idem.consumer.group"), group);
    EXPECT_EQ(r.header("idem.attempts"), "1");
    EXPECT_FALSE(r.header("idem.error.message").value_or("").empty());
    EXPECT_EQ(r.key, records[i + 1].key);
    EXPECT_EQ(r.payload, records[i + 1].payload);
  }
  EXPECT_EQ(dlq[0].header("traceparent"), "00-abc-def-01");  // original headers kept

  const auto unrouted_dlq =
      test::read_topic(broker_->bootstrap_servers(), unrouted + ".dlq", 1, 1, 20s);
  ASSERT_EQ(unrouted_dlq.size(), 1u);
  EXPECT_EQ(unrouted_dlq[0].header("idem.error.class"), "route.no_route");

  // Dead-lettered records never block: every offset is committed.
  EXPECT_EQ(test::committed_offsets(broker_->bootstrap_servers(), group, topic, 1),
            std::vector<std::int64_t>{7});
  const ConsumerStats s = consumer->stats();
  EXPECT_EQ(s.dead_lettered_by_reason.at("validation.invalid_json"), 1u);
  EXPECT_EQ(s.dead_lettered_by_reason.at("route.no_route"), 1u);
}

TEST_F(ConsumerTest, RecordWithTooManyHeadersGoesToDlq) {
  const std::string topic = make_topic(1);
  const std::string group = unique_name("g");
  TestRecord at_limit = record_of(topic, make_event(1));  // 1 header (event_id) + 2 = 3
  TestRecord over_limit = record_of(topic, make_event(2));
  for (TestRecord* r : {&at_limit, &over_limit}) {
    r->headers.push_back({"h1", "a"});
    r->headers.push_back({"h2", "b"});
  }
  over_limit.headers.push_back({"h3", "c"});
  produce({at_limit, over_limit});

  ConsumerConfig config = config_for(topic, group);
  config.limits.max_headers = 3;
  std::mutex log_mutex;
  std::vector<std::string> log_lines;
  ConsumerHooks hooks;
  hooks.log = [&](std::string_view line) {
    std::lock_guard lock(log_mutex);
    log_lines.emplace_back(line);
  };
  RunningConsumer consumer(counting_consumer(config, db_url_, std::move(hooks)));
  ASSERT_TRUE(eventually([&] {
    const ConsumerStats s = consumer->stats();
    return s.processed + s.dead_lettered >= 2;
  }));
  ASSERT_TRUE(consumer.stop());
  EXPECT_EQ(effects(group), 1);
  EXPECT_EQ(consumer->stats().dead_lettered, 1u);

  const auto dlq = test::read_topic(broker_->bootstrap_servers(), topic + ".dlq", 1, 1, 20s);
  ASSERT_EQ(dlq.size(), 1u);
  EXPECT_EQ(dlq[0].header("idem.error.class"), "validation.too_many_headers");
  EXPECT_EQ(dlq[0].header("idem.error.message"), "record has 4 headers, more than the limit of 3");
  EXPECT_EQ(dlq[0].header("idem.original.offset"), "1");
  EXPECT_EQ(dlq[0].payload, over_limit.payload);
  EXPECT_EQ(dlq[0].header("h3"), "c");  // the record's own headers are kept

  // One log line locates the dead letter (topic, partition, offset, event id, reason).
  const std::string located = fmt::format(
      "idem consumer: dead-lettered topic={} partition=0 offset=1 event_id={} "
      "class=validation.too_many_headers attempts=1",
      topic, over_limit.headers[0].second);  // record_of's event_id header
  std::lock_guard lock(log_mutex);
  EXPECT_EQ(std::count(log_lines.begin(), log_lines.end(), located), 1) << located;
}

TEST_F(ConsumerTest, OffsetsAreCommittedOnlyAfterTheDbCommit) {
  const std::string topic = make_topic(2);
  const std::string group = unique_name("g");
  std::vector<TestRecord> records;
  for (int i = 0; i < 120; ++i) records.push_back(record_of(topic, make_event(i + 1)));
  produce(records);

  // First run: the hook "crashes" the consumer just before its first DB commit.
  ConsumerConfig config = config_for(topic, group);
  config.batch_size = 30;
  {
    ConsumerHooks hooks;
    hooks.at = [](HookPoint p) {
      if (p == HookPoint::BeforeDbCommit) throw std::runtime_error("crash before commit");
    };
    Consumer consumer(config, open_store(db_url_), hooks);
    consumer.on<OrderConfirmed>(topic, count_handler<OrderConfirmed>());
    EXPECT_THROW(consumer.run(), std::runtime_error);
  }
  EXPECT_EQ(effects(group), 0);
  EXPECT_EQ(test::committed_offsets(broker_->bootstrap_servers(), group, topic, 2),
            (std::vector<std::int64_t>{-1, -1}));

  // Second run: at every hook point the committed offsets never cover more records than
  // the database holds effects for (every record here is a distinct valid event). The
  // durable count is read at AfterDbCommit: at BeforeDbCommit the consumer's transaction
  // holds SQLite's write lock, and nothing else writes meanwhile.
  std::atomic<int> violations{0};
  std::atomic<int> checks{0};
  std::int64_t durable = 0;
  const std::string bootstrap = broker_->bootstrap_servers();
  auto probe = open_store(db_url_);
  ConsumerHooks hooks;
  hooks.at = [&](HookPoint p) {
    if (p == HookPoint::AfterDbCommit) durable = count_effects(*probe, group);
    if (p != HookPoint::BeforeDbCommit && p != HookPoint::AfterDbCommit &&
        p != HookPoint::AfterOffsetCommit)
      return;
    const auto committed = test::committed_offsets(bootstrap, group, topic, 2);
    std::int64_t covered = 0;
    for (auto o : committed) covered += std::max<std::int64_t>(o, 0);
    if (covered > durable) ++violations;
    ++checks;
  };
  RunningConsumer consumer(counting_consumer(config, db_url_, hooks));
  ASSERT_TRUE(eventually([&] { return effects(group) == 120; }));
  ASSERT_TRUE(consumer.stop());
  EXPECT_GT(checks.load(), 0);
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(max_effects_per_event(*observer_, group), 1);
  EXPECT_EQ(test::committed_offsets(broker_->bootstrap_servers(), group, topic, 2),
            test::end_offsets(broker_->bootstrap_servers(), topic, 2));
}

TEST_F(ConsumerTest, HandlerDeadLetterIsIsolatedBySavepoint) {
  const std::string topic = make_topic(1);
  const std::string group = unique_name("g");
  std::vector<OrderConfirmed> events;
  for (int i = 0; i < 20; ++i) events.push_back(make_event(i + 1));
  std::vector<TestRecord> records;
  for (const auto& e : events) records.push_back(record_of(topic, e));
  produce(records);
  const Uuid poison = events[9].event_id;  // order 10

  ConsumerConfig config = config_for(topic, group);
  config.batch_window = 500ms;  // let the whole topic land in one batch
  auto c = std::make_unique<Consumer>(config, open_store(db_url_));
  c->on<OrderConfirmed>(
      topic,
      Handler<OrderConfirmed>([](const OrderConfirmed& e, const RecordInfo& r, Transaction& tx) {
        record_effect(tx, e.event_id, r);  // an effect that must be rolled back for the poison
        if (e.order_id != 10) return Outcome::Done;
        r.dead_letter_reason("order 10 can never be charged");
        return Outcome::DeadLetter;
      }));
  RunningConsumer consumer(std::move(c));
  ASSERT_TRUE(
      eventually([&] { return consumer->stats().dead_lettered >= 1 && effects(group) == 19; }));
  ASSERT_TRUE(consumer.stop());

  EXPECT_EQ(effects(group), 19);
  EXPECT_EQ(scalar("SELECT count(*) FROM effect_log WHERE event_id = $1 AND consumer_group = $2",
                   poison, group),
            0);
  // Unmarked: a replay after a fix is processed, not skipped as a duplicate.
  EXPECT_EQ(
      scalar("SELECT count(*) FROM processed_event WHERE event_id = $1 AND consumer_group = $2",
             poison, group),
      0);
  const auto dlq = test::read_topic(broker_->bootstrap_servers(), topic + ".dlq", 1, 1, 20s);
  ASSERT_EQ(dlq.size(), 1u);
  EXPECT_EQ(dlq[0].header("idem.error.class"), "handler.dead_letter");
  EXPECT_EQ(dlq[0].header("idem.error.message"), "order 10 can never be charged");
  EXPECT_EQ(dlq[0].header("idem.original.offset"), "9");
  EXPECT_EQ(test::committed_offsets(broker_->bootstrap_servers(), group, topic, 1),
            std::vector<std::int64_t>{20});
}

TEST_F(ConsumerTest, HandlerExceptionsAreClassified) {
  const std::string topic = make_topic(1);
  const std::string group = unique_name("g");
  std::vector<TestRecord> records;
  for (int i = 0; i < 5; ++i) records.push_back(record_of(topic, make_event(i + 1)));
  produce(records);

  // A batch whose handler throws runs it twice (the optimistic pass gives up, the isolated
  // pass classifies the exception), so four throws are at least one retry and at most
  // four, depending on how the records fall into batches.
  std::atomic<int> transient_left{4};
  auto c = std::make_unique<Consumer>(config_for(topic, group), open_store(db_url_));
  c->on<OrderConfirmed>(
      topic,
      Handler<OrderConfirmed>([&](const OrderConfirmed& e, const RecordInfo& r, Transaction& tx) {
        if (e.order_id == 2) throw std::logic_error("bug in handler");
        if (e.order_id == 4 && transient_left.fetch_sub(1) > 0)
          throw Error(ErrorCode::Timeout, ErrorSource::Http, "provider timed out");
        record_effect(tx, e.event_id, r);
        return Outcome::Done;
      }));
  RunningConsumer consumer(std::move(c));
  ASSERT_TRUE(
      eventually([&] { return effects(group) == 4 && consumer->stats().dead_lettered == 1; }));
  ASSERT_TRUE(consumer.stop());
  EXPECT_GE(consumer->stats().retries, 1u);
  EXPECT_EQ(transient_left.load(), -1) << "order 4 did not run until it succeeded";
  EXPECT_EQ(consumer->stats().dead_lettered_by_reason.at("handler.exception"), 1u);
  const auto dlq = test::read_topic(broker_->bootstrap_servers(), topic + ".dlq", 1, 1, 20s);
  ASSERT_EQ(dlq.size(), 1u);
  EXPECT_NE(dlq[0].header("idem.error.message").value_or("").find("bug in handler"),
            std::string::npos);
}

// A binding to a language with a global lock (Python's GIL) takes it once per batch: the
// handler's scope is entered before its first call of a pass and left after its last, on
// the run() thread, and no call happens outside it.
TEST_F(ConsumerTest, AHandlerScopeBracketsTheCallsOfEachPass) {
  const std::string topic = make_topic(1);
  const std::string group = unique_name("g");
  produce_orders(topic, 1, 20);

  ConsumerConfig config = config_for(topic, group);
  config.batch_window = 500ms;  // the whole topic in one batch
  std::atomic<int> depth{0};
  std::atomic<int> entered{0};
  std::atomic<int> calls{0};
  std::atomic<int> calls_outside{0};
  auto c = std::make_unique<Consumer>(config, open_store(db_url_));
  c->on<OrderConfirmed>(
      topic, codec_parser(),
      Handler<OrderConfirmed>([&](const OrderConfirmed& e, const RecordInfo& r, Transaction& tx) {
        ++calls;
        if (depth.load() != 1) ++calls_outside;
        record_effect(tx, e.event_id, r);
        return Outcome::Done;
      }),
      HandlerScope{[&] {
                     ++depth;
                     ++entered;
                   },
                   [&] { --depth; }});
  RunningConsumer consumer(std::move(c));
  ASSERT_TRUE(eventually([&] { return effects(group) == 20; }));
  ASSERT_TRUE(consumer.stop());

  EXPECT_EQ(calls.load(), 20);
  EXPECT_EQ(calls_outside.load(), 0) << "a handler call ran outside its scope";
  EXPECT_EQ(depth.load(), 0) << "a scope was entered and not left";
  EXPECT_GE(entered.load(), 1);
  EXPECT_LE(static_cast<std::uint64_t>(entered.load()), consumer->stats().transactions)
      << "the scope was entered per event, not per batch";
}

// A record back from a retry topic runs its source topic's handler inside that handler's
// scope too: the retry topic's handler is the source's under another name, scope included.
TEST_F(ConsumerTest, ARecordFromARetryTopicRunsInsideItsHandlersScope) {
  const std::string topic = make_topic(1);
  const std::string group = unique_name("g");
  broker_->create_topic(topic + ".retry." + group + ".1", 1);
  produce_orders(topic, 1, 5);

  ConsumerConfig config = config_for(topic, group);
  config.retry_topics.delays = {50ms};
  std::atomic<int> depth{0};
  std::atomic<int> retried_calls{0};
  std::atomic<int> calls_outside{0};
  auto c = std::make_unique<Consumer>(config, open_store(db_url_));
  c->on<OrderConfirmed>(
      topic, codec_parser(),
      Handler<OrderConfirmed>([&](const OrderConfirmed& e, const RecordInfo& r, Transaction& tx) {
        if (depth.load() != 1) ++calls_outside;
        const bool retried = r.header("idem.attempts").has_value();
        if (retried) ++retried_calls;
        if (e.order_id == 3 && !retried) return Outcome::Retry;
        record_effect(tx, e.event_id, r);
        return Outcome::Done;
      }),
      HandlerScope{[&] { ++depth; }, [&] { --depth; }});
  RunningConsumer consumer(std::move(c));
  ASSERT_TRUE(eventually([&] { return effects(group) == 5; }));
  ASSERT_TRUE(consumer.stop());

  EXPECT_GE(retried_calls.load(), 1) << "order 3 never came back from its retry topic";
  EXPECT_EQ(calls_outside.load(), 0) << "a handler call ran outside its scope";
}

// A handler that throws StopConsumer stops the consumer at once: nothing of its batch
// commits (neither the effects nor the marks of the events before it), no offset of it is
// committed, and run() rethrows it.
TEST_F(ConsumerTest, StopConsumerFromAHandlerCommitsNothingOfItsBatch) {
  const std::string topic = make_topic(1);
  const std::string group = unique_name("g");
  produce_orders(topic, 1, 5);

  ConsumerConfig config = config_for(topic, group);
  config.batch_window = 500ms;
  auto c = std::make_unique<Consumer>(config, open_store(db_url_));
  c->on<OrderConfirmed>(topic, Handler<OrderConfirmed>([](const OrderConfirmed& e,
                                                          const RecordInfo& r, Transaction& tx) {
                          record_effect(tx, e.event_id, r);
                          if (e.order_id == 3) throw StopConsumer{"interrupted in order 3"};
                          return Outcome::Done;
                        }));
  RunningConsumer consumer(std::move(c));
  ASSERT_TRUE(eventually([&] { return consumer.finished(); }));
  ASSERT_TRUE(consumer.error());
  try {
    std::rethrow_exception(consumer.error());
  } catch (const StopConsumer& stop) {
    EXPECT_EQ(stop.reason, "interrupted in order 3");
  } catch (...) {
    ADD_FAILURE() << "run() threw something else than the handler's StopConsumer";
  }
  EXPECT_EQ(effects(group), 0);
  auto tx = observer_->begin();
  EXPECT_EQ(
      tx->execute("SELECT count(*) FROM processed_event WHERE consumer_group = $1", group)[0].int64(
          0),
      0);
  EXPECT_EQ(test::committed_offsets(broker_->bootstrap_servers(), group, topic, 1),
            std::vector<std::int64_t>{-1});
}

TEST_F(ConsumerTest, RetryPausesOnlyThatPartition) {
  const std::string topic = make_topic(2);
  const std::string group = unique_name("g");
  const OrderConfirmed stuck = make_event(1000);
  std::vector<TestRecord> records;
  records.push_back(record_of(topic, stuck, 0));
  for (int i = 0; i < 5; ++i) records.push_back(record_of(topic, make_event(2000 + i), 0));
  produce(records);

  std::atomic<int> retries_returned{0};
  std::atomic<bool> release{false};
  auto c = std::make_unique<Consumer>(config_for(topic, group), open_store(db_url_));
  c->on<OrderConfirmed>(
      topic,
      Handler<OrderConfirmed>([&](const OrderConfirmed& e, const RecordInfo& r, Transaction& tx) {
        // After the release, six more Retry answers: at least three pauses, as each attempt
        // calls the handler twice (optimistic pass, then the isolated pass).
        if (e.event_id == stuck.event_id && (!release.load() || retries_returned.load() < 6)) {
          ++retries_returned;
          return Outcome::Retry;
        }
        record_effect(tx, e.event_id, r);
        return Outcome::Done;
      }));
  RunningConsumer consumer(std::move(c));
  ASSERT_TRUE(eventually([&] { return retries_returned.load() >= 1; }));

  // While partition 0 is stuck, partition 1 keeps flowing.
  std::vector<TestRecord> more;
  for (int i = 0; i < 10; ++i) more.push_back(record_of(topic, make_event(3000 + i), 1));
  produce(more);
  ASSERT_TRUE(eventually([&] { return effects(group) == 10; }));
  EXPECT_EQ(effects(group), 10);  // nothing of partition 0 skipped ahead of the stuck event
  release.store(true);

  ASSERT_TRUE(eventually([&] { return effects(group) == 16; }));
  ASSERT_TRUE(consumer.stop());
  EXPECT_GE(retries_returned.load(), 3);
  EXPECT_EQ(max_effects_per_event(*observer_, group), 1);
  // Partition 0 applied in offset order: the stuck event first.
  auto tx = observer_->begin();
  const Rows rows = tx->execute(
      "SELECT kafka_offset FROM effect_log WHERE consumer_group = $1 AND kafka_partition = 0 "
      "ORDER BY id",
      group);
  ASSERT_EQ(rows.size(), 6u);
  for (std::size_t i = 0; i < rows.size(); ++i)
    EXPECT_EQ(rows[i].int64(0), static_cast<std::int64_t>(i));
  EXPECT_GE(consumer->stats().retries, 3u);
}

TEST_F(ConsumerTest, StopCommitsAndLeavesGroup) {
  const std::string topic = make_topic(2);
  const std::string group = unique_name("g");
  std::vector<TestRecord> records;
  for (int i = 0; i < 50; ++i) records.push_back(record_of(topic, make_event(i + 1)));
  produce(records);
  {
    RunningConsumer consumer(counting_consumer(config_for(topic, group), db_url_));
    ASSERT_TRUE(eventually([&] { return effects(group) == 50; }));
    const auto stop_started = std::chrono::steady_clock::now();
    ASSERT_TRUE(consumer.stop(20s));
    EXPECT_LT(std::chrono::steady_clock::now() - stop_started, 10s);
    EXPECT_EQ(consumer.error(), nullptr);
  }
  EXPECT_EQ(test::committed_offsets(broker_->bootstrap_servers(), group, topic, 2),
            test::end_offsets(broker_->bootstrap_servers(), topic, 2));

  // The next member of the group starts where the first one stopped: no redelivery.
  std::vector<TestRecord> more;
  for (int i = 0; i < 10; ++i) more.push_back(record_of(topic, make_event(100 + i)));
  produce(more);
  RunningConsumer next(counting_consumer(config_for(topic, group), db_url_));
  ASSERT_TRUE(eventually([&] { return effects(group) == 60; }));
  ASSERT_TRUE(next.stop());
  EXPECT_EQ(next->stats().delivered, 10u);
  EXPECT_EQ(next->stats().duplicates, 0u);
}

// pipeline_depth 2, stopped while its last batch commits, a batch that ends with a
// malformed record: the batch is finished on the way out, after the loop, and its letter
// moves the partition's position. That position must reach the stored offsets too: the
// next member starts from the store, and would otherwise send the letter again.
TEST_F(ConsumerTest, AStopAtDepthTwoStoresThePositionItsLastLetterMoved) {
  const std::string topic = make_topic(1);
  const std::string group = unique_name("g");
  produce_orders_then_a_malformed_one(topic);
  ConsumerConfig config = config_for(topic, group);
  config.pipeline_depth = 2;
  std::atomic<Consumer*> stopping{nullptr};
  ConsumerHooks hooks;
  // The stop is asked for as the batch is about to commit: the loop ends with the commit
  // in flight.
  hooks.at = [&stopping](HookPoint point) {
    if (point != HookPoint::BeforeDbCommit) return;
    if (Consumer* consumer = stopping.load()) consumer->stop();
  };
  auto consumer = counting_consumer(config, db_url_, hooks);
  stopping = consumer.get();
  {
    RunningConsumer first(std::move(consumer));
    ASSERT_TRUE(eventually([&] { return effects(group) == 3; }));
    ASSERT_TRUE(first.stop());
    EXPECT_EQ(first.error(), nullptr);
    // The letter went out with the batch the stop finished (else this test saw nothing).
    ASSERT_EQ(first->stats().dead_lettered, 1u);
  }
  produce({record_of(topic, make_event(4), 0)});
  RunningConsumer next(counting_consumer(config_for(topic, group), db_url_));
  ASSERT_TRUE(eventually([&] { return effects(group) == 4; }));
  ASSERT_TRUE(next.stop());
  EXPECT_EQ(next->stats().dead_lettered, 0u) << "the malformed record was read again";
  EXPECT_EQ(test::end_offsets(broker_->bootstrap_servers(), topic + ".dlq", 1).at(0), 1);
}

#ifdef IDEM_TEST_HAVE_POSTGRES_BACKEND
// As above, with a revoke instead of the stop: a second member joins while the first has
// the batch with the malformed record committing, and the first finishes that batch inside
// its revoke. So that the revoke comes while the batch commits: the first member's hook,
// as the batch is about to commit, starts the second member and waits until the first's
// librdkafka logged the rebalance (its revoke is then due at the next poll, the one right
// after the commit started); and the commit is held by a deferred trigger that waits for
// an advisory lock the test holds (PostgreSQL) until the first member's loop stops turning
// (it turns at least every half second while a commit is in flight), inside its revoke.
TEST_F(ConsumerTest, ARevokeAtDepthTwoStoresThePositionItsLastLetterMoved) {
  const std::string url = test::PostgresBackend::fresh_url();
  if (url.empty()) return;
  migrate_reference_system(*open_store(url));
  auto pg = open_store(url);
  {
    auto tx = pg->begin();
    tx->execute(
        "CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NULL; END $$");
    tx->execute(
        "CREATE CONSTRAINT TRIGGER hold_commit AFTER INSERT ON effect_log "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hold_commit()");
    tx->commit();
  }
  const std::string topic = make_topic(1);
  const std::string group = unique_name("g");
  produce_orders_then_a_malformed_one(topic);

  auto hold = pg->begin();
  hold->execute("SELECT pg_advisory_xact_lock(4242)");
  ConsumerConfig config = config_for(topic, group);
  config.pipeline_depth = 2;
  ConsumerConfig watched = config;
  watched.kafka.emplace_back("log_level", "7");
  watched.kafka.emplace_back("debug", "cgrp");
  std::mutex mutex;
  std::condition_variable changed;
  bool rebalancing = false;
  bool started_second = false;
  std::unique_ptr<RunningConsumer> second;
  ConsumerHooks hooks;
  hooks.log = [&](std::string_view line) {
    if (line.find("rebalance in progress") == std::string_view::npos) return;
    std::lock_guard lock(mutex);
    rebalancing = true;
    changed.notify_all();
  };
  hooks.at = [&](HookPoint point) {
    if (point != HookPoint::BeforeDbCommit) return;
    std::unique_lock lock(mutex);
    if (started_second) return;
    started_second = true;
    second = std::make_unique<RunningConsumer>(counting_consumer(config, url));
    changed.wait_for(lock, 60s, [&] { return rebalancing; });
  };
  RunningConsumer first(counting_consumer(watched, url, hooks));
  const bool in_revoke = eventually(
      [&] {
        {
          std::lock_guard lock(mutex);
          if (!rebalancing) return false;
        }
        return std::chrono::steady_clock::now() - first->stats().last_loop > 2s;
      },
      60s);
  hold->commit();
  ASSERT_TRUE(in_revoke) << "no rebalance, or the first member's loop kept turning";
  produce({record_of(topic, make_event(4), 0)});
  ASSERT_TRUE(eventually([&] { return count_effects(*pg, group) == 4; }, 60s))
      << count_effects(*pg, group);
  ASSERT_TRUE(first.stop());
  ASSERT_TRUE(second->stop());
  EXPECT_EQ(first->stats().dead_lettered + (*second)->stats().dead_lettered, 1u);
  EXPECT_EQ(test::end_offsets(broker_->bootstrap_servers(), topic + ".dlq", 1).at(0), 1)
      << "the malformed record was dead-lettered again by the next owner";
}
#endif

// A lossy failover that took back every transaction of a new group, its stored offsets
// included, while Kafka kept the offsets committed after them. Kafka's offset is past
// every effect the failover took back, so a start there would lose them; the start goes
// back to where the store kept the partitions from (the metadata of Kafka's commit) and
// applies every effect again.
TEST_F(ConsumerTest, AStoreThatLostEveryRowOfANewGroupGetsEveryEffectAgain) {
  const std::string topic = make_topic(2);
  const std::string group = unique_name("g");
  produce_orders(topic, 1, 20, [](int i) { return (i - 1) % 2; });
  {
    RunningConsumer first(counting_consumer(config_for(topic, group), db_url_));
    ASSERT_TRUE(eventually([&] { return effects(group) == 20; }));
    ASSERT_TRUE(first.stop());
  }
  EXPECT_EQ(test::committed_offsets(broker_->bootstrap_servers(), group, topic, 2),
            (std::vector<std::int64_t>{10, 10}));
  // What the failover took back: the group's effects, marks and stored offsets.
  {
    auto tx = observer_->begin();
    for (const char* table : {"effect_log", "processed_event", "idem_consumer_offsets"})
      tx->execute(fmt::format("DELETE FROM {} WHERE consumer_group = $1", table), group);
    tx->commit();
  }
  RunningConsumer next(counting_consumer(config_for(topic, group), db_url_));
  ASSERT_TRUE(eventually([&] { return effects(group) == 20; }))
      << "effects applied again: " << effects(group);
  ASSERT_TRUE(next.stop());
  EXPECT_EQ(next->stats().offset_disagreements, 2u);
  EXPECT_EQ(next->stats().offset_records_read_again, 20u);
  EXPECT_EQ(next->stats().duplicates, 0u);
}

// A store from before offsets were kept in it (a release without them, here a consumer
// with offsets_in_store off): no row, Kafka's committed offsets without the store's
// metadata. The consumer resumes where Kafka stands and reads nothing again.
TEST_F(ConsumerTest, AnUpgradeFromOffsetsInKafkaOnlyResumesWhereKafkaStands) {
  const std::string topic = make_topic(2);
  const std::string group = unique_name("g");
  produce_orders(topic, 1, 10);
  {
    ConsumerConfig before = config_for(topic, group);
    before.offsets_in_store = false;
    RunningConsumer first(counting_consumer(before, db_url_));
    ASSERT_TRUE(eventually([&] { return effects(group) == 10; }));
    ASSERT_TRUE(first.stop());
  }
  produce_orders(topic, 11, 5);
  RunningConsumer next(counting_consumer(config_for(topic, group), db_url_));
  ASSERT_TRUE(eventually([&] { return effects(group) == 15; }));
  ASSERT_TRUE(next.stop());
  EXPECT_EQ(next->stats().delivered, 5u) << "records read again after the upgrade";
  EXPECT_EQ(next->stats().offset_disagreements, 0u);
}

TEST_F(ConsumerTest, TwoGroupsApplyEachEventOnceEach) {
  const std::string topic = make_topic(3);
  const std::string billing = unique_name("billing");
  const std::string analytics = unique_name("analytics");
  std::vector<OrderConfirmed> events;
  std::vector<TestRecord> records;
  for (int i = 0; i < 100; ++i) events.push_back(make_event(i + 1));
  for (const auto& e : events) records.push_back(record_of(topic, e));
  for (int i = 0; i < 100; i += 5)
    records.push_back(record_of(topic, events[static_cast<std::size_t>(i)]));
  produce(records);

  RunningConsumer a(counting_consumer(config_for(topic, billing), db_url_));
  RunningConsumer b(counting_consumer(config_for(topic, analytics), db_url_));
  ASSERT_TRUE(eventually([&] { return effects(billing) == 100 && effects(analytics) == 100; }));
  ASSERT_TRUE(
      eventually([&] { return a->stats().delivered >= 120 && b->stats().delivered >= 120; }));
  ASSERT_TRUE(a.stop());
  ASSERT_TRUE(b.stop());
  EXPECT_EQ(effects(billing), 100);
  EXPECT_EQ(effects(analytics), 100);
  EXPECT_EQ(max_effects_per_event(*observer_, billing), 1);
  EXPECT_EQ(max_effects_per_event(*observer_, analytics), 1);
}

TEST_F(ConsumerTest, BatchSizeOneBehavesPerMessage) {
  const std::string topic = make_topic(1);
  const std::string group = unique_name("g");
  std::vector<TestRecord> records;
  for (int i = 0; i < 30; ++i) records.push_back(record_of(topic, make_event(i + 1)));
  produce(records);
  ConsumerConfig config = config_for(topic, group);
  config.batch_size = 1;
  std::atomic<int> batches{0};
  ConsumerHooks hooks;
  hooks.at = [&](HookPoint p) {
    if (p == HookPoint::BatchPolled) ++batches;
  };
  RunningConsumer consumer(counting_consumer(config, db_url_, hooks));
  ASSERT_TRUE(eventually([&] { return effects(group) == 30; }));
  ASSERT_TRUE(consumer.stop());
  EXPECT_EQ(batches.load(), 30);
  EXPECT_EQ(consumer->stats().transactions, 30u);
  EXPECT_GE(consumer->stats().offset_commits, 30u);
  EXPECT_EQ(test::committed_offsets(broker_->bootstrap_servers(), group, topic, 1),
            std::vector<std::int64_t>{30});
}

// --- configuration and backoff: no broker needed --------------------------------------

TEST(ConsumerConfigTest, RejectsOverridingOffsetProperties) {
  for (const char* key : {"enable.auto.commit", "enable.auto.offset.store"}) {
    ConsumerConfig c;
    c.bootstrap_servers = "127.0.0.1:9";
    c.group_id = "g";
    c.topics = {"t"};
    c.kafka = {{key, "true"}};
    try {
      Consumer consumer(c, open_store("sqlite://:memory:"));
      ADD_FAILURE() << key << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_EQ(e.source(), ErrorSource::Config);
    }
  }
}

TEST(ConsumerConfigTest, RejectsIncompleteConfigAndUnknownRoutes) {
  ConsumerConfig c;
  c.bootstrap_servers = "127.0.0.1:9";
  c.group_id = "g";
  EXPECT_THROW(Consumer(c, open_store("sqlite://:memory:")), Error);  // no topics
  c.topics = {"t"};
  c.batch_size = 0;
  EXPECT_THROW(Consumer(c, open_store("sqlite://:memory:")), Error);
  c.batch_size = 10;
  Consumer consumer(c, open_store("sqlite://:memory:"));
  EXPECT_THROW(consumer.on<OrderConfirmed>("other", count_handler<OrderConfirmed>()), Error);
  consumer.on<OrderConfirmed>("t", count_handler<OrderConfirmed>());
  EXPECT_THROW(consumer.on<OrderConfirmed>("t", count_handler<OrderConfirmed>()), Error);
}

TEST(ConsumerConfigTest, PipelineDepthIsOneOrTwoAndTwoNeedsASecondConnection) {
  ConsumerConfig c;
  c.bootstrap_servers = "127.0.0.1:9";
  c.group_id = "g";
  c.topics = {"t"};
  for (const std::size_t depth : {std::size_t{0}, std::size_t{3}}) {
    c.pipeline_depth = depth;
    try {
      Consumer consumer(c, open_store(test::fresh_sqlite_url()));
      ADD_FAILURE() << "pipeline_depth " << depth << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.source(), ErrorSource::Config);
      EXPECT_NE(std::string(e.what()).find("pipeline_depth"), std::string::npos) << e.what();
    }
  }
  c.pipeline_depth = 2;
  EXPECT_NO_THROW(Consumer(c, open_store(test::fresh_sqlite_url())));
  try {
    Consumer consumer(c, open_store("sqlite://:memory:"));
    ADD_FAILURE() << "depth 2 on a private in-memory database was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find(":memory:"), std::string::npos) << e.what();
  }
}

TEST(BackoffTest, GrowsExponentiallyWithJitterAndIsCapped) {
  RetryPolicy p;
  p.initial_backoff = 100ms;
  p.max_backoff = 1000ms;
  p.multiplier = 2.0;
  p.jitter = 0.2;
  Backoff b(p, 1234);
  for (int round = 0; round < 50; ++round) {
    EXPECT_GE(b.delay(1), 80ms);
    EXPECT_LE(b.delay(1), 120ms);
    EXPECT_GE(b.delay(3), 320ms);
    EXPECT_LE(b.delay(3), 480ms);
    EXPECT_LE(b.delay(10), 1000ms);
    EXPECT_GE(b.delay(1000), 800ms);
  }
  p.jitter = 1.5;
  EXPECT_THROW(Backoff{p}, Error);
}

}  // namespace consumer_test
}  // namespace idem
