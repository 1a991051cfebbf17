// Non-blocking retry topics (ConsumerConfig::retry_topics), on every backend. One
// partition carries a flaky event (its handler fails transiently on its first two
// attempts), a poison event (its handler always asks for a retry) and ordinary events:
//  - the flaky event succeeds on attempt 3, from retry topic 2, with exactly one effect,
//    after passing through retry topics 1 and 2 with idem.attempts 1 and 2;
//  - the poison event ends in the DLQ of the source topic after max attempts (3), with
//    idem.attempts = 3 and its original coordinates;
//  - the ordinary events behind them on the partition are not held back: they commit in
//    the first batch, before the flaky event's retry succeeds.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "idem/consumer.hpp"
#include "idem/devtools/dev_broker.hpp"
#include "idem/error.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/count_handler.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "support/wait.hpp"
#include "support/consumer_scenario.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/store_backends.hpp"

namespace idem::test {
namespace {

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
    ConsumerConfig c = mock_consumer_config(this->broker_->bootstrap_servers(), this->group_, {this->topic_});
    c.batch_size = 1000;
    c.batch_window = 300ms;  // the whole source topic in the first batch
    c.retry_topics.delays = {50ms, 100ms};
    std::unique_ptr<Consumer> consumer = std::make_unique<Consumer>(c, open_store(this->url_));
    consumer->on<OrderConfirmed>(this->topic_, std::move(handler));
    const Consumer& observed = *consumer;
    RunningConsumer running(std::move(consumer));
    const bool reached = eventually([&] { return done(observed); }, 60s, 20ms);
    ASSERT_TRUE(running.stop());
    if (running.error()) std::rethrow_exception(running.error());
    ASSERT_TRUE(reached) << "the consumer did not get there within 60 s";
  }

  std::int64_t effects_of(std::int64_t order_id) {
    auto tx = this->observer_->begin();
    return tx->execute("SELECT count(*) FROM effect_log WHERE event_id = $1 AND consumer_group = $2",
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
    EXPECT_NE(std::string(e.what()).find("orders.retry.billing/eu.1"), std::string::npos) << e.what();
  }
  c.group_id = "billing";
  c.retry_topics.delays = {1s, 0ms};
  EXPECT_THROW(Consumer(c, open_store(SqliteBackend::fresh_url())), Error);
}

}  // namespace
}  // namespace idem::test
