// Non-blocking retry topics (ConsumerConfig::retry_topics), on every backend. One
// partition carries a flaky event (its handler fails transiently on its first two
// attempts), a poison event (its handler always asks for a retry) and ordinary events:
//  - the flaky event succeeds on attempt 3, from retry topic 2, with exactly one effect,
//    after passing through retry topics 1 and 2 with idem.attempts 1 and 2;
//  - the poison event ends in the DLQ of the source topic after max attempts (3), with
//    idem.attempts = 3 and its original coordinates;
//  - the ordinary events behind them on the partition are not held back: they commit in
//    the first batch, before the flaky event's retry succeeds.
// Then the idem.* headers of retry-topic records: what check_retry_headers accepts, and,
// with the consumer as a child process, records with impossible headers written straight
// to a retry topic (RetryHeadersAcrossProcesses).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "consumer/letters/retry_topics.hpp"
#include "idem/consumer.hpp"
#include "idem/devtools/dev_broker.hpp"
#include "idem/error.hpp"
#include "idem/reference/count_handler.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "support/consumer_scenario.hpp"
#include "support/delayed_calls.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/mock_group.hpp"
#include "support/process.hpp"
#include "support/store_backends.hpp"
#include "support/wait.hpp"

namespace idem::test {
namespace retry_topics_test {

using namespace std::chrono_literals;

constexpr std::int64_t kFlaky = 1;   // fails transiently on attempts 1 and 2
constexpr std::int64_t kPoison = 2;  // always asks for a retry
constexpr int kEvents = 10;

template <class Backend>
class RetryTopicsTest : public OrderEventsSuite<Backend> {
 protected:
  void SetUp() override {
    if (!this->set_up_orders(kEvents)) return;
    // Explicitly: the mock cluster would auto-create them with 4 partitions.
    for (int level = 1; level <= 2; ++level) this->broker_->create_topic(retry_topic(level), 1);
  }

  std::string retry_topic(int level) const {
    return this->topic_ + ".retry." + this->group_ + "." + std::to_string(level);
  }

  void consume(Handler<OrderConfirmed> handler, const std::function<bool(const Consumer&)>& done) {
    consume_with([&](Consumer& c) { c.on<OrderConfirmed>(this->topic_, std::move(handler)); },
                 done);
  }

  void consume_with(const std::function<void(Consumer&)>& register_handler,
                    const std::function<bool(const Consumer&)>& done) {
    ConsumerConfig c =
        mock_consumer_config(this->broker_->bootstrap_servers(), this->group_, {this->topic_});
    c.batch_size = 1000;
    c.batch_window = 300ms;  // the whole source topic in the first batch
    c.retry_topics.delays = {50ms, 100ms};
    std::unique_ptr<Consumer> consumer = std::make_unique<Consumer>(c, open_store(this->url_));
    register_handler(*consumer);
    const Consumer& observed = *consumer;
    RunningConsumer running(std::move(consumer));
    const bool reached = eventually([&] { return done(observed); }, 60s, 20ms);
    ASSERT_TRUE(running.stop());
    if (running.error()) std::rethrow_exception(running.error());
    ASSERT_TRUE(reached) << "the consumer did not get there within 60 s";
  }

  std::int64_t effects_of(std::int64_t order_id) {
    auto tx = this->observer_->begin();
    return tx
        ->execute("SELECT count(*) FROM effect_log WHERE event_id = $1 AND consumer_group = $2",
                  this->ids_.at(order_id), this->group_)[0]
        .int64(0);
  }
};

TYPED_TEST_SUITE(RetryTopicsTest, AllBackends, BackendName);

TYPED_TEST(RetryTopicsTest, TransientFailuresRetryThroughTopicsAndPoisonEndsInDlq) {
  const std::string level2 = this->retry_topic(2);
  std::mutex mu;
  std::vector<std::int64_t> committed_order;  // order ids in the order their effects ran
  std::string flaky_success_topic;
  this->consume(
      [&](const OrderConfirmed& e, const RecordInfo& r, Transaction& tx) {
        if (e.order_id == kPoison) return Outcome::Retry;
        if (e.order_id == kFlaky && r.topic != level2) {
          throw Error(ErrorCode::Timeout, ErrorSource::Http, "payment provider timed out");
        }
        record_effect(tx, e.event_id, r);
        const std::lock_guard lock(mu);
        // A handler may run twice for one delivery (optimistic, then isolated pass).
        if (std::find(committed_order.begin(), committed_order.end(), e.order_id) ==
            committed_order.end())
          committed_order.push_back(e.order_id);
        if (e.order_id == kFlaky) flaky_success_topic = std::string(r.topic);
        return Outcome::Done;
      },
      [&](const Consumer& c) {
        const ConsumerStats s = c.stats();
        return s.processed >= kEvents - 1 && s.dead_lettered >= 1;
      });

  // Exactly one effect per succeeding event; none for the poison event.
  EXPECT_EQ(count_effects(*this->observer_, this->group_), kEvents - 1);
  EXPECT_EQ(max_effects_per_event(*this->observer_, this->group_), 1);
  EXPECT_EQ(this->effects_of(kFlaky), 1);
  EXPECT_EQ(this->effects_of(kPoison), 0);
  {
    const std::lock_guard lock(mu);
    EXPECT_EQ(flaky_success_topic, level2) << "the flaky event did not succeed on attempt 3";
    // Not blocked: every ordinary event committed before the flaky event's retry did.
    ASSERT_EQ(committed_order.size(), static_cast<std::size_t>(kEvents - 1));
    EXPECT_EQ(committed_order.back(), kFlaky);
  }

  const std::string bootstrap = this->broker_->bootstrap_servers();
  for (int level = 1; level <= 2; ++level) {
    const auto records = read_topic(bootstrap, this->retry_topic(level), 1, 2, 20s);
    ASSERT_EQ(records.size(), 2u) << "retry topic " << level;
    std::vector<std::string> keys;
    for (const auto& rec : records) {
      keys.push_back(rec.key);
      EXPECT_EQ(rec.header("idem.attempts"), std::to_string(level));
      EXPECT_TRUE(rec.header("idem.retry.not_before").has_value());
      EXPECT_EQ(rec.header("idem.original.topic"), this->topic_);
      EXPECT_EQ(rec.header("event_id"), this->ids_.at(std::stoll(rec.key)).to_string())
          << "the retry record lost its own headers";
    }
    std::sort(keys.begin(), keys.end());
    EXPECT_EQ(keys, (std::vector<std::string>{std::to_string(kFlaky), std::to_string(kPoison)}));
  }

  const auto dlq = read_topic(bootstrap, this->topic_ + ".dlq", 1, 1, 20s);
  ASSERT_EQ(dlq.size(), 1u);
  EXPECT_EQ(dlq[0].key, std::to_string(kPoison));
  EXPECT_EQ(dlq[0].header("idem.attempts"), "3");
  EXPECT_EQ(dlq[0].header("idem.error.class"), "handler.retry");
  EXPECT_EQ(dlq[0].header("idem.original.topic"), this->topic_);
  EXPECT_EQ(dlq[0].header("idem.original.offset"), std::to_string(kPoison - 1));
  EXPECT_EQ(committed_offsets(bootstrap, this->group_, this->topic_, 1),
            std::vector<std::int64_t>{kEvents});
}

// A database error is the store failing, not the event: with retry topics on it still
// pauses the partition (blocking retry) and nothing goes to a retry topic.
TYPED_TEST(RetryTopicsTest, DatabaseErrorsStayBlocking) {
  std::atomic<int> flaky_failures{0};
  ConsumerStats last;
  this->consume(
      [&](const OrderConfirmed& e, const RecordInfo& r, Transaction& tx) {
        if (e.order_id == kFlaky && flaky_failures.fetch_add(1) < 2) {
          throw Error(ErrorCode::Connection, TypeParam::source, "connection to the store lost");
        }
        record_effect(tx, e.event_id, r);
        return Outcome::Done;
      },
      [&](const Consumer& c) {
        last = c.stats();
        return last.processed >= kEvents;
      });
  EXPECT_GE(last.retries, 1u) << "the partition was not paused for a blocking retry";
  EXPECT_EQ(last.retry_topic_sends, 0u);
  EXPECT_EQ(count_effects(*this->observer_, this->group_), kEvents);
  EXPECT_EQ(max_effects_per_event(*this->observer_, this->group_), 1);
  EXPECT_GE(flaky_failures.load(), 3);
  const std::string bootstrap = this->broker_->bootstrap_servers();
  for (int level = 1; level <= 2; ++level) {
    EXPECT_EQ(end_offsets(bootstrap, this->retry_topic(level), 1), std::vector<std::int64_t>{0})
        << "a database error was moved to retry topic " << level;
  }
}

// An effect handler (on_effect) with retry topics: a call that asks for a retry is not
// retried in place; its record goes through the retry topics (taking the concurrent call
// path there too) and its key moves on. The flaky event's call succeeds on attempt 3
// with one effect; the poison event's calls always ask for a retry, so it ends in the DLQ
// with the call's reason; every call carries the same event (the idempotency key).
TYPED_TEST(RetryTopicsTest, EffectCallsRetryThroughTopicsAndPoisonEndsInDlq) {
  const std::string level2 = this->retry_topic(2);
  DelayedCalls client;
  std::mutex mu;
  std::map<std::int64_t, std::vector<std::string>> call_topics;  // order id -> topic per call
  std::vector<std::int64_t> applied_order;
  this->consume_with(
      [&](Consumer& c) {
        c.on_effect(this->topic_,
                    EffectHandler<OrderConfirmed, std::string>{
                        .call =
                            [&](const OrderConfirmed& e, const RecordInfo& r,
                                CallCompletion<std::string> done) {
                              const std::string topic(r.topic);
                              {
                                const std::lock_guard lock(mu);
                                call_topics[e.order_id].push_back(topic);
                              }
                              const bool fail = e.order_id == kPoison ||
                                                (e.order_id == kFlaky && topic != level2);
                              client.after(1ms, [done, fail, topic] {
                                if (fail) return done.retry("provider answered 503 (test)");
                                done.done(topic);
                              });
                            },
                        .apply =
                            [&](const OrderConfirmed& e, const RecordInfo& r,
                                const std::string& topic, Transaction& tx) {
                              EXPECT_EQ(topic, r.topic)
                                  << "the apply phase got another call's result";
                              record_effect(tx, e.event_id, r);
                              const std::lock_guard lock(mu);
                              if (std::find(applied_order.begin(), applied_order.end(),
                                            e.order_id) == applied_order.end())
                                applied_order.push_back(e.order_id);
                              return Outcome::Done;
                            },
                        .ordering_key = {}});
      },
      [&](const Consumer& c) {
        const ConsumerStats s = c.stats();
        return s.processed >= kEvents - 1 && s.dead_lettered >= 1;
      });

  EXPECT_EQ(count_effects(*this->observer_, this->group_), kEvents - 1);
  EXPECT_EQ(max_effects_per_event(*this->observer_, this->group_), 1);
  EXPECT_EQ(this->effects_of(kFlaky), 1);
  EXPECT_EQ(this->effects_of(kPoison), 0);
  {
    const std::lock_guard lock(mu);
    const std::vector<std::string> path = {this->topic_, this->retry_topic(1), level2};
    EXPECT_EQ(call_topics[kFlaky], path) << "one call per attempt, one attempt per topic";
    EXPECT_EQ(call_topics[kPoison], path);
    for (std::int64_t id = 3; id <= kEvents; ++id)
      EXPECT_EQ(call_topics[id], std::vector<std::string>{this->topic_}) << "order " << id;
    // Not blocked: the flaky event's success came after every ordinary event.
    ASSERT_EQ(applied_order.size(), static_cast<std::size_t>(kEvents - 1));
    EXPECT_EQ(applied_order.back(), kFlaky);
  }
  const std::string bootstrap = this->broker_->bootstrap_servers();
  for (int level = 1; level <= 2; ++level) {
    const auto records = read_topic(bootstrap, this->retry_topic(level), 1, 2, 20s);
    ASSERT_EQ(records.size(), 2u) << "retry topic " << level;
    for (const auto& rec : records) {
      EXPECT_EQ(rec.header("idem.attempts"), std::to_string(level));
      EXPECT_EQ(rec.header("idem.error.message"), "provider answered 503 (test)");
    }
  }
  const auto dlq = read_topic(bootstrap, this->topic_ + ".dlq", 1, 1, 20s);
  ASSERT_EQ(dlq.size(), 1u);
  EXPECT_EQ(dlq[0].key, std::to_string(kPoison));
  EXPECT_EQ(dlq[0].header("idem.attempts"), "3");
  EXPECT_EQ(dlq[0].header("idem.error.class"), "handler.retry");
  EXPECT_EQ(dlq[0].header("idem.original.offset"), std::to_string(kPoison - 1));
  EXPECT_EQ(committed_offsets(bootstrap, this->group_, this->topic_, 1),
            std::vector<std::int64_t>{kEvents});
}

TEST(RetryTopicsConfig, RejectsIllegalRetryTopicNamesAndDelays) {
  ConsumerConfig c;
  c.bootstrap_servers = "127.0.0.1:9";
  c.group_id = "billing/eu";  // '/' cannot be part of a topic name
  c.topics = {"orders"};
  c.retry_topics.delays = {1s};
  try {
    Consumer consumer(c, open_store(SqliteBackend::fresh_url()));
    FAIL() << "an illegal retry topic name was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("orders.retry.billing/eu.1"), std::string::npos)
        << e.what();
  }
  c.group_id = "billing";
  c.retry_topics.delays = {1s, 0ms};
  EXPECT_THROW(Consumer(c, open_store(SqliteBackend::fresh_url())), Error);
  // Delays are added to clock times: beyond a year they are a mistake, not a plan.
  c.retry_topics.delays = {1s, detail::kMaxRetryTopicDelay + 1ms};
  EXPECT_THROW(Consumer(c, open_store(SqliteBackend::fresh_url())), Error);
  c.retry_topics.delays = {1s, detail::kMaxRetryTopicDelay};
  EXPECT_NO_THROW(Consumer(c, open_store(SqliteBackend::fresh_url())));
}

// The idem.* headers of a retry-topic record, which anyone can write (the
// consumer-level proofs are tests/fault/retry_headers_test.cpp). Two retry
// topics, so attempts 1 and 2 exist there; topic 1's delay is 1 s.
namespace headers {

constexpr std::int64_t kNow = 1'764'547'200'000;
constexpr auto kDelay = 1000ms;
const std::int64_t kLatest = kNow + kDelay.count() + detail::kRetryClockSkewAllowance.count();

detail::RetryHeaderCheck check(std::optional<std::string_view> attempts,
                               std::optional<std::string_view> not_before, std::uint32_t level = 1,
                               std::int64_t now = kNow) {
  return detail::check_retry_headers(attempts, not_before, level, 2, kDelay, now);
}

void expect_problem(const detail::RetryHeaderCheck& c, std::string_view header,
                    std::string_view words) {
  EXPECT_FALSE(c.headers.has_value());
  EXPECT_EQ(c.problem.rfind(header, 0), 0u) << c.problem;
  EXPECT_NE(c.problem.find(words), std::string::npos) << c.problem;
}

TEST(RetryHeaderCheck, AcceptsWhatIdemWrites) {
  const auto past = check("1", std::to_string(kNow - 3'600'000));
  ASSERT_TRUE(past.headers) << past.problem;
  EXPECT_EQ(past.headers->attempts, 1u);
  EXPECT_EQ(past.headers->not_before_ms, kNow - 3'600'000);
  const auto level2 = check("2", std::to_string(kNow + 1000), 2);
  ASSERT_TRUE(level2.headers) << level2.problem;
  EXPECT_EQ(level2.headers->attempts, 2u);
  // Any time in the past is due, however long ago.
  EXPECT_TRUE(check("1", "-9223372036854775808").headers);
  EXPECT_TRUE(check("1", "0").headers);
}

TEST(RetryHeaderCheck, AttemptsMustBeTheTopicsLevel) {
  expect_problem(check(std::nullopt, "0"), "idem.attempts", "missing");
  expect_problem(check("", "0"), "idem.attempts", "not a decimal");
  expect_problem(check("1x", "0"), "idem.attempts", "not a decimal");
  expect_problem(check(" 1", "0"), "idem.attempts", "not a decimal");
  expect_problem(check("18446744073709551616", "0"), "idem.attempts", "not a decimal");
  // The value that wrapped to 0 and indexed delays[-1].
  expect_problem(check("4294967295", "0"), "idem.attempts", "out of range");
  expect_problem(check("0", "0"), "idem.attempts", "out of range");
  expect_problem(check("-1", "0"), "idem.attempts", "out of range");
  expect_problem(check("3", "0"), "idem.attempts",
                 "out of range");  // max attempts: DLQ, never a retry topic
  expect_problem(check("2", "0", 1), "idem.attempts", "level 1");
  expect_problem(check("1", "0", 2), "idem.attempts", "level 2");
}

TEST(RetryHeaderCheck, NotBeforeAtMostTheTopicsDelayPlusTheSkewAllowanceAhead) {
  ASSERT_TRUE(check("1", std::to_string(kLatest)).headers);
  expect_problem(check("1", std::to_string(kLatest + 1)), "idem.retry.not_before",
                 "delay (1000 ms)");
  const std::int64_t ten_years = std::int64_t{10} * 365 * 24 * 3'600'000;
  expect_problem(check("1", std::to_string(kNow + ten_years)), "idem.retry.not_before",
                 "later than now");
  expect_problem(check("1", "9223372036854775807"), "idem.retry.not_before", "later than now");
  expect_problem(check("1", std::nullopt), "idem.retry.not_before", "missing");
  expect_problem(check("1", "soon"), "idem.retry.not_before", "not a time");
  expect_problem(check("1", "9223372036854775808"), "idem.retry.not_before", "not a time");
  // The window saturates instead of overflowing at the end of time.
  EXPECT_TRUE(check("1", "9223372036854775807", 1, INT64_MAX).headers);
  EXPECT_TRUE(check("1", "9223372036854775807", 1, INT64_MAX - 1).headers);
  expect_problem(check("1", "1", 1, INT64_MIN), "idem.retry.not_before", "later than now");
}

TEST(RetryHeaderCheck, ProblemsShowHeaderBytesSafely) {
  const auto c = check(std::string_view("1\n'\x01\xff"
                                        "0123456789012345678901234567890123456789"),
                       "0");
  ASSERT_FALSE(c.headers);
  EXPECT_EQ(c.problem.find('\n'), std::string::npos) << c.problem;
  EXPECT_NE(c.problem.find("\\x0a\\x27\\x01\\xff"), std::string::npos) << c.problem;
  EXPECT_NE(c.problem.find("..."), std::string::npos) << c.problem;
  for (const char ch : c.problem) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << c.problem;
}

}  // namespace headers

// Retry-topic records whose idem.* headers idem would never have written. A
// retry topic is an ordinary topic: anyone with produce rights can write to
// it, and a bug elsewhere can too. The consumer runs as a REAL child process
// (tests/children/consumer_child.cpp with --retry-delays-ms, retry topics on with delays 1 s and 1
// s, so max attempts 3); this test process hosts the broker and is the outside producer that writes
// the bad records straight to retry topic 1 with librdkafka.
//
// What must hold: the consumer stays up (a crash would be a crash loop, since the record
// is redelivered), the bad record goes to the DLQ of the source topic with error class
// `retry.bad_header` and a message naming the header, nothing of it is applied (no effect
// row, nothing sent on to the next retry topic), and the records around it, on the source
// topic and on the retry topic behind it, are processed. Waits are conditions with
// deadlines (committed offsets reaching the end offsets), never sleeps.
namespace across_processes {

constexpr int kSourceEvents = 3;  // ordinary events on the source topic, order ids 1..3
constexpr auto kDeadline = 60s;

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Parameter: the child's handler, `count` (Consumer::on) or `effect` (on_effect, whose
// bad retry records must not even make a call).
class RetryHeadersAcrossProcesses : public DevBrokerSuite,
                                    public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    db_url_ = SqliteBackend::fresh_url();
    migrate_reference_system(*open_store(db_url_));
    topic_ = unique_name("orders");
    group_ = unique_name("billing");
    // Explicitly, with one partition each: the mock cluster would auto-create 4.
    broker_->create_topic(topic_, 1);
    for (int level = 1; level <= 2; ++level) broker_->create_topic(retry_topic(level), 1);
    broker_->create_topic(dlq_topic(), 1);
    static_cast<void>(produce_order_events(bootstrap(), topic_, kSourceEvents));
  }

  [[nodiscard]] const std::string& bootstrap() const { return broker_->bootstrap_servers(); }
  [[nodiscard]] std::string retry_topic(int level) const {
    return topic_ + ".retry." + group_ + "." + std::to_string(level);
  }
  [[nodiscard]] std::string dlq_topic() const { return topic_ + ".dlq"; }

  /// A record on retry topic `level` for a new order.confirmed.v1 event of `order_id`,
  /// carrying its own `event_id` header plus `idem_headers`.
  [[nodiscard]] TestRecord retry_record(int level, std::int64_t order_id,
                                        const Headers& idem_headers) {
    OrderConfirmed e;
    e.event_id = new_uuid_v7();
    e.occurred_at =
        std::chrono::time_point_cast<std::chrono::microseconds>(std::chrono::system_clock::now());
    e.order_id = order_id;
    e.customer_id = 42;
    e.total_amount = Amount::from_hundredths(1999);
    Headers headers = {{"event_id", e.event_id.to_string()},
                       {"idem.original.topic", topic_},
                       {"idem.original.partition", "0"},
                       {"idem.original.offset", "0"}};
    headers.insert(headers.end(), idem_headers.begin(), idem_headers.end());
    return {retry_topic(level), std::to_string(order_id), to_json(e), headers, 0};
  }

  void produce(const std::vector<TestRecord>& records) {
    KafkaTestProducer producer(bootstrap());
    for (const auto& r : records) producer.send(r);
    producer.flush();
  }

  /// The consumer child, retry delays 1 s and 1 s; `always_retry` order ids ask for a
  /// retry on every attempt.
  ChildProcess start_consumer(const std::vector<std::int64_t>& always_retry = {}) {
    std::vector<std::string> argv = {"--brokers",         bootstrap(), "--topic",   topic_,
                                     "--group",           group_,      "--db",      db_url_,
                                     "--retry-delays-ms", "1000,1000", "--handler", GetParam()};
    for (const auto id : always_retry) {
      argv.emplace_back("--always-retry");
      argv.push_back(std::to_string(id));
    }
    argv = with_mock_group(std::move(argv));
    argv.insert(argv.end(), {"--kafka", "reconnect.backoff.max.ms=1000"});
    ChildProcess child = ChildProcess::spawn(child_program("consumer_child"), argv);
    std::vector<std::string> seen;
    if (!expect_line(child, "ready", 30s, &seen)) {
      ADD_FAILURE() << "consumer_child did not say ready (said: "
                    << (seen.empty() ? "nothing" : seen.back()) << ")";
    }
    return child;
  }

  /// Waits until the group committed the source topic and retry topic 1 to their current
  /// ends, or the consumer died, or kDeadline passed. True when caught up with the
  /// consumer alive.
  ::testing::AssertionResult caught_up_and_alive(ChildProcess& consumer) {
    const auto source_end = end_offsets(bootstrap(), topic_, 1);
    const auto retry_end = end_offsets(bootstrap(), retry_topic(1), 1);
    std::optional<int> died;
    const bool caught_up = eventually(
        [&] {
          died = consumer.wait_for(0ms);
          return died.has_value() ||
                 (group_caught_up(bootstrap(), group_, topic_, source_end) &&
                  group_caught_up(bootstrap(), group_, retry_topic(1), retry_end));
        },
        kDeadline, 200ms);
    if (died) {
      return ::testing::AssertionFailure()
             << "the consumer died (status " << *died << "; a negative status is the signal)";
    }
    if (!caught_up) {
      return ::testing::AssertionFailure()
             << "the consumer did not commit the source topic and retry topic 1 to their ends "
             << "within " << kDeadline.count() << " s (a paused retry partition?)";
    }
    return ::testing::AssertionSuccess();
  }

  /// SIGTERM, then the graceful stop: the final stats line, "stopped", exit status 0.
  std::map<std::string, std::uint64_t> stop_gracefully(ChildProcess& consumer) {
    consumer.kill(SIGTERM);
    auto stats = read_stats(consumer, 60s);
    EXPECT_TRUE(expect_line(consumer, "stopped", 30s)) << "no graceful stop";
    EXPECT_EQ(consumer.wait(30s), 0) << "a stopped consumer must exit 0";
    return stats;
  }

  /// The DLQ's records (expecting `count`), by key.
  std::map<std::string, ReadRecord> dead_letters(std::size_t count) {
    std::map<std::string, ReadRecord> by_key;
    for (auto& r : read_topic(bootstrap(), dlq_topic(), 1, count, 20s)) by_key.emplace(r.key, r);
    return by_key;
  }

  /// Checks a dead letter of a bad retry header: its class, a message naming `header`,
  /// and that it stands for the source topic.
  static void expect_bad_header(const std::map<std::string, ReadRecord>& dlq, std::int64_t order_id,
                                const std::string& header) {
    SCOPED_TRACE("order " + std::to_string(order_id));
    const auto it = dlq.find(std::to_string(order_id));
    ASSERT_NE(it, dlq.end()) << "not in the DLQ";
    EXPECT_EQ(it->second.header("idem.error.class"), "retry.bad_header");
    const std::string message = it->second.header("idem.error.message").value_or("");
    EXPECT_NE(message.find(header), std::string::npos)
        << "the message does not name " << header << ": " << message;
  }

  std::string db_url_;
  std::string topic_;
  std::string group_;
};

// idem.attempts 4294967295 used to wrap to 0 on the next attempt and index
// delays[-1] (SIGSEGV, then the same again on every restart). An attempt count that is
// in range but not this retry topic's number is just as impossible for idem to write.
TEST_P(RetryHeadersAcrossProcesses,
       AttemptsOutOfRangeOrNotTheTopicsLevelGoToTheDlqAndTheConsumerStaysUp) {
  constexpr std::int64_t kWrapping = 100;  // its handler asks for a retry: the old crash
  constexpr std::int64_t kMismatched = 101;
  constexpr std::int64_t kGarbage = 102;
  constexpr std::int64_t kGood = 103;  // behind them on the same retry partition
  const std::string past = std::to_string(wall_ms() - 1000);
  produce({retry_record(1, kWrapping,
                        {{"idem.attempts", "4294967295"}, {"idem.retry.not_before", past}}),
           retry_record(1, kMismatched, {{"idem.attempts", "3"}, {"idem.retry.not_before", past}}),
           retry_record(1, kGarbage, {{"idem.attempts", "1x"}, {"idem.retry.not_before", past}}),
           retry_record(1, kGood, {{"idem.attempts", "1"}, {"idem.retry.not_before", past}})});

  ChildProcess consumer = start_consumer({kWrapping});
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(caught_up_and_alive(consumer));
  const auto stats = stop_gracefully(consumer);

  const auto dlq = dead_letters(3);
  ASSERT_EQ(dlq.size(), 3u);
  expect_bad_header(dlq, kWrapping, "idem.attempts");
  expect_bad_header(dlq, kMismatched, "idem.attempts");
  expect_bad_header(dlq, kGarbage, "idem.attempts");
  EXPECT_EQ(end_offsets(bootstrap(), dlq_topic(), 1), std::vector<std::int64_t>{3});
  // Nothing half-applied: no effect of a bad record, nothing passed on to retry topic 2.
  EXPECT_EQ(effect_rows(db_url_, group_), kSourceEvents + 1);
  EXPECT_EQ(end_offsets(bootstrap(), retry_topic(2), 1), std::vector<std::int64_t>{0});
  ASSERT_FALSE(stats.empty());
  EXPECT_EQ(stats.at("processed"), static_cast<std::uint64_t>(kSourceEvents + 1));
  EXPECT_EQ(stats.at("dead_lettered"), 3u);
  // The effect path calls only the good records (the wrapping one is never called).
  if (GetParam() == "effect") {
    EXPECT_EQ(stats.at("calls"), kSourceEvents + 1u);
  }
}

// idem.retry.not_before far in the future used to pause the retry partition until
// then (ten years here), and past ~292 years overflowed the steady clock. A retry is never
// due later than its topic's delay (plus a clock-skew allowance) from now.
TEST_P(RetryHeadersAcrossProcesses,
       NotBeforeBeyondTheTopicsDelayGoesToTheDlqAndDoesNotPauseThePartition) {
  constexpr std::int64_t kTenYears = 200;
  constexpr std::int64_t kInt64Max = 201;
  constexpr std::int64_t kGarbage = 202;
  constexpr std::int64_t kSoon = 203;  // within the delay: deferred, then processed
  constexpr std::int64_t kDue = 204;
  const std::int64_t now = wall_ms();
  const std::int64_t ten_years_ms = std::int64_t{10} * 365 * 24 * 3600 * 1000;
  const Headers first_attempt = {{"idem.attempts", "1"}};
  const auto with_not_before = [&](const std::string& value) {
    Headers h = first_attempt;
    h.emplace_back("idem.retry.not_before", value);
    return h;
  };
  produce({retry_record(1, kTenYears, with_not_before(std::to_string(now + ten_years_ms))),
           retry_record(1, kInt64Max, with_not_before("9223372036854775807")),
           retry_record(1, kGarbage, with_not_before("soon")),
           retry_record(1, kSoon, with_not_before(std::to_string(now + 500))),
           retry_record(1, kDue, with_not_before(std::to_string(now - 1000)))});

  ChildProcess consumer = start_consumer();
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(caught_up_and_alive(consumer));
  const auto stats = stop_gracefully(consumer);

  const auto dlq = dead_letters(3);
  ASSERT_EQ(dlq.size(), 3u);
  expect_bad_header(dlq, kTenYears, "idem.retry.not_before");
  expect_bad_header(dlq, kInt64Max, "idem.retry.not_before");
  expect_bad_header(dlq, kGarbage, "idem.retry.not_before");
  EXPECT_EQ(end_offsets(bootstrap(), dlq_topic(), 1), std::vector<std::int64_t>{3});
  EXPECT_EQ(effect_rows(db_url_, group_), kSourceEvents + 2);
  ASSERT_FALSE(stats.empty());
  EXPECT_EQ(stats.at("processed"), static_cast<std::uint64_t>(kSourceEvents + 2));
  EXPECT_EQ(stats.at("dead_lettered"), 3u);
  if (GetParam() == "effect") {
    EXPECT_EQ(stats.at("calls"), kSourceEvents + 2u);
  }
}

INSTANTIATE_TEST_SUITE_P(Handlers, RetryHeadersAcrossProcesses,
                         ::testing::Values(std::string("count"), std::string("effect")),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return param_info.param;
                         });

}  // namespace across_processes

}  // namespace retry_topics_test
}  // namespace idem::test
