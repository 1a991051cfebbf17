// The consumer's dedup-horizon guard with an injected clock: an event born past
// retention - safety margin is quarantined to the DLQ with reason `stale` and never
// executed (or skipped, or processed, as configured); a fresh one is executed once; the
// stats show the oldest event age next to the horizon; the start-up check reports the
// topics' retention against the dedup retention.
#include <chrono>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "idem/consumer.hpp"
#include "idem/devtools/dev_broker.hpp"
#include "idem/error.hpp"
#include "idem/reference/count_handler.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "support/consumer_scenario.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/manual_clock.hpp"
#include "support/store_backends.hpp"
#include "support/wait.hpp"

namespace idem {
namespace dedup_horizon_test {

using namespace std::chrono_literals;

class DedupHorizonGuardTest : public test::DevBrokerSuite {
 protected:
  void SetUp() override {
    topic_ = test::unique_name("horizon");
    group_ = test::unique_name("billing");
    broker_->create_topic(topic_, 1);
    broker_->create_topic(topic_ + ".dlq", 1);
    db_url_ = test::fresh_sqlite_url();
    idem::migrate_reference_system(*open_store(db_url_));
    observer_ = open_store(db_url_);
  }

  OrderConfirmed event_born_at(std::int64_t order_id, std::chrono::system_clock::time_point t) {
    OrderConfirmed e;
    e.event_id = test::uuid_v7_born_at(t);
    e.occurred_at = std::chrono::time_point_cast<std::chrono::microseconds>(t);
    e.order_id = order_id;
    e.customer_id = 1;
    e.total_amount = Amount::from_hundredths(500);
    return e;
  }

  void produce(const std::vector<OrderConfirmed>& events) {
    test::KafkaTestProducer producer(broker_->bootstrap_servers());
    for (const auto& e : events) {
      producer.send({topic_,
                     std::to_string(e.order_id),
                     to_json(e),
                     {{"event_id", e.event_id.to_string()}},
                     -1});
    }
    producer.flush();
  }

  /// Runs a counting consumer until `done` holds; returns its final stats.
  /// Runs a counting consumer until `done` holds; returns its final stats. The start-up
  /// check of the topic retention runs only when `retention_check_timeout` is given.
  ConsumerStats consume_until(
      StaleEventPolicy policy, const std::function<bool(const ConsumerStats&)>& done,
      std::vector<std::string>* log_lines = nullptr, std::mutex* log_mutex = nullptr,
      std::optional<std::chrono::milliseconds> retention_check_timeout = std::nullopt) {
    ConsumerConfig c = test::mock_consumer_config(broker_->bootstrap_servers(), group_, {topic_});
    c.check_topic_retention = retention_check_timeout.has_value();
    c.topic_retention_timeout = retention_check_timeout.value_or(c.topic_retention_timeout);
    c.dedup_horizon = DedupHorizon{7 * 24h, 1h};
    c.stale_events = policy;
    c.clock = &clock_;
    ConsumerHooks hooks;
    std::mutex own_mutex;
    std::mutex& mutex = log_mutex != nullptr ? *log_mutex : own_mutex;
    hooks.log = [&](std::string_view line) {
      std::lock_guard lock(mutex);
      if (log_lines != nullptr) log_lines->emplace_back(line);
    };
    auto consumer = std::make_unique<Consumer>(c, open_store(db_url_), hooks);
    consumer->on<OrderConfirmed>(topic_, count_handler<OrderConfirmed>());
    test::RunningConsumer running(std::move(consumer));
    const bool reached = test::eventually([&] { return done(running->stats()); }, 60s, 20ms);
    EXPECT_TRUE(running.stop());
    EXPECT_FALSE(running.error());
    EXPECT_TRUE(reached);
    return running->stats();
  }

  std::int64_t count(const std::string& sql, const Uuid& id) {
    auto tx = observer_->begin();
    return tx->execute(sql, id)[0].int64(0);
  }
  std::int64_t effects_of(const Uuid& id) {
    return count("SELECT count(*) FROM effect_log WHERE event_id = $1", id);
  }
  std::int64_t marks_of(const Uuid& id) {
    return count("SELECT count(*) FROM processed_event WHERE event_id = $1", id);
  }

  test::ManualClock clock_{std::chrono::system_clock::now()};
  std::string topic_;
  std::string group_;
  std::string db_url_;
  std::unique_ptr<Store> observer_;
};

TEST_F(DedupHorizonGuardTest, StaleEventIsQuarantinedAndNotExecutedFreshOneIsExecuted) {
  const auto now = clock_.now();
  const OrderConfirmed stale = event_born_at(1, now - 7 * 24h + 30min);  // inside the 1 h margin
  const OrderConfirmed fresh = event_born_at(2, now - 7 * 24h + 90min);  // just inside the horizon
  produce({stale, fresh});

  const ConsumerStats stats = consume_until(
      StaleEventPolicy::Quarantine,
      [](const ConsumerStats& s) { return s.dead_lettered == 1 && s.processed == 1; });
  EXPECT_EQ(effects_of(stale.event_id), 0);
  EXPECT_EQ(marks_of(stale.event_id), 0);
  EXPECT_EQ(effects_of(fresh.event_id), 1);
  EXPECT_EQ(stats.stale, 1u);
  EXPECT_EQ(stats.dead_lettered_by_reason.at("stale"), 1u);
  EXPECT_GE(stats.oldest_event_age, 7 * 24h - 30min);
  EXPECT_EQ(stats.dedup_horizon, 7 * 24h - 1h);

  const auto dlq = test::read_topic(broker_->bootstrap_servers(), topic_ + ".dlq", 1, 1, 20s);
  ASSERT_EQ(dlq.size(), 1u);
  EXPECT_EQ(dlq[0].header("idem.error.class"), "stale");
  EXPECT_NE(dlq[0].header("idem.error.message").value_or("").find("past the dedup horizon"),
            std::string::npos);
  EXPECT_EQ(dlq[0].payload, to_json(stale));
}

TEST_F(DedupHorizonGuardTest, SkipPolicyNeitherExecutesNorDeadLetters) {
  const OrderConfirmed stale = event_born_at(1, clock_.now() - 30 * 24h);
  const OrderConfirmed fresh = event_born_at(2, clock_.now());
  produce({stale, fresh});
  const ConsumerStats stats = consume_until(StaleEventPolicy::Skip, [](const ConsumerStats& s) {
    return s.stale == 1 && s.processed == 1;
  });
  EXPECT_EQ(effects_of(stale.event_id), 0);
  EXPECT_EQ(stats.dead_lettered, 0u);
  EXPECT_EQ(test::committed_offsets(broker_->bootstrap_servers(), group_, topic_, 1),
            std::vector<std::int64_t>{2});
}

TEST_F(DedupHorizonGuardTest, ProcessPolicyExecutesStaleEventsOnceAndCountsThem) {
  const OrderConfirmed stale = event_born_at(1, clock_.now() - 30 * 24h);
  produce({stale, stale});  // a duplicate while its row still exists is still skipped
  const ConsumerStats stats = consume_until(StaleEventPolicy::Process, [](const ConsumerStats& s) {
    return s.processed == 1 && s.duplicates == 1;
  });
  EXPECT_EQ(effects_of(stale.event_id), 1);
  EXPECT_EQ(stats.stale, 2u);
  EXPECT_EQ(stats.dead_lettered, 0u);
}

TEST_F(DedupHorizonGuardTest, StartUpCheckReportsTheTopicRetentionItCannotRead) {
  // librdkafka 2.0.2's mock cluster does not answer DescribeConfigs, so this shows the
  // "cannot tell" path: a warning naming the topic and the dedup retention, after the
  // check's own deadline (half a second here, 5 s by default), while consuming goes on
  // meanwhile (a real broker answers with retention.ms, compared in
  // topic_retention_check.cpp).
  std::vector<std::string> log;
  std::mutex mutex;
  const auto reported = [&] {
    std::lock_guard lock(mutex);
    for (const auto& line : log) {
      if (line.find(topic_) != std::string::npos && line.find("168.0 h") != std::string::npos)
        return true;
    }
    return false;
  };
  produce({event_born_at(1, clock_.now())});
  const ConsumerStats stats = consume_until(
      StaleEventPolicy::Quarantine,
      [&](const ConsumerStats& s) { return s.processed == 1 && reported(); }, &log, &mutex, 500ms);
  EXPECT_EQ(stats.processed, 1u);
}

TEST_F(DedupHorizonGuardTest, StartUpCheckDelaysNeitherTheFirstRecordNorTheStop) {
  // The check waits for an answer the mock cluster never gives (here up to a minute, far
  // longer than the test). It runs beside the consumer (a restarted consumer must start at
  // once): the first record is processed, and a stop returns, while the check is still
  // waiting (it has not warned yet). Were it on the path to the first poll, the record
  // would come after the warning; were the stop to wait for it, the stop would take the
  // rest of its minute.
  std::mutex mutex;
  bool warned = false;
  ConsumerConfig c = test::mock_consumer_config(broker_->bootstrap_servers(), group_, {topic_});
  c.check_topic_retention = true;
  c.topic_retention_timeout = 60s;
  c.clock = &clock_;
  ConsumerHooks hooks;
  hooks.log = [&](std::string_view line) {
    std::lock_guard lock(mutex);
    if (line.find("retention of " + topic_) != std::string_view::npos) warned = true;
  };
  produce({event_born_at(1, clock_.now())});
  const auto started = std::chrono::steady_clock::now();
  auto consumer = std::make_unique<Consumer>(c, open_store(db_url_), hooks);
  consumer->on<OrderConfirmed>(topic_, count_handler<OrderConfirmed>());
  test::RunningConsumer running(std::move(consumer));
  ASSERT_TRUE(test::eventually([&] { return running->stats().processed == 1; }, 60s, 10ms));
  const auto first = std::chrono::steady_clock::now() - started;
  {
    std::lock_guard lock(mutex);
    EXPECT_FALSE(warned) << "the first record waited for the retention check";
  }
  const auto stopping = std::chrono::steady_clock::now();
  EXPECT_TRUE(running.stop());
  const auto stop = std::chrono::steady_clock::now() - stopping;
  const auto ms = [](auto d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  };
  std::cout << fmt::format(
      "start to first record {} ms (the mock's first join waits 3 s), "
      "stop {} ms, with the retention check still waiting\n",
      ms(first), ms(stop));
  EXPECT_LT(stop, 2s) << "the stop waited for the retention check";
  std::lock_guard lock(mutex);
  EXPECT_FALSE(warned) << "an abandoned check must not warn";
}

TEST(DedupHorizonConfigTest, RejectsAMarginAsLongAsTheRetention) {
  ConsumerConfig c;
  c.bootstrap_servers = "127.0.0.1:1";
  c.group_id = "g";
  c.topics = {"t"};
  c.dedup_horizon = DedupHorizon{24h, 24h};
  EXPECT_THROW(Consumer(c, open_store("sqlite://:memory:")), Error);
}

}  // namespace dedup_horizon_test
}  // namespace idem
