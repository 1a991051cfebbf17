// The stop of a consumer with effect handlers whose calls do not end: the drain of calls
// in flight gets a share of ConsumerConfig::stop_timeout, never all of it, so the final
// offset commit and the group leave still get theirs; and no record polled while
// draining is admitted (it is the next owner's). The dev broker the tests share, SQLite store.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/consumer.hpp"
#include "idem/reference/count_handler.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/schema.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/store_backends.hpp"
#include "support/wait.hpp"

namespace idem::test {
namespace effect_stop_test {

using namespace std::chrono_literals;

class EffectPathStop : public DevBrokerSuite {};

/// Produces orders `from`..`to` (inclusive) to partition 0 of `topic`, each keyed
/// `key_of(order id)`.
void produce_orders(const std::string& bootstrap, const std::string& topic, std::int64_t from,
                    std::int64_t to, const std::function<std::string(std::int64_t)>& key_of) {
  KafkaTestProducer producer(bootstrap);
  for (std::int64_t id = from; id <= to; ++id) {
    OrderConfirmed e;
    e.event_id = new_uuid_v7();
    e.occurred_at =
        std::chrono::time_point_cast<std::chrono::microseconds>(std::chrono::system_clock::now());
    e.order_id = id;
    e.customer_id = 7;
    e.total_amount = Amount::from_hundredths(500);
    producer.send({topic, key_of(id), to_json(e), {}, 0});
  }
  producer.flush();
}

TEST_F(EffectPathStop, StopBudgetLeavesTheFinalCommitAndTheLeaveTheirShare) {
  const std::string url = SqliteBackend::fresh_url();
  migrate_reference_system(*open_store(url));
  const std::string topic = unique_name("orders");
  broker_->create_topic(topic, 1);
  broker_->create_topic(topic + ".dlq", 1);
  // Order 1 (key a) is applied; order 2 (key b) is called and never answers; orders 3-5
  // (key c) are applied. The committed position stops at 1, behind order 2.
  produce_orders(broker_->bootstrap_servers(), topic, 1, 5, [](std::int64_t id) {
    return id == 1 ? std::string("a") : id == 2 ? std::string("b") : std::string("c");
  });

  ConsumerConfig c = mock_consumer_config(broker_->bootstrap_servers(), unique_name("g"), {topic});
  c.stop_timeout = 4s;
  c.call_drain_timeout = 30s;  // longer than the stop timeout: the stop budget must split it
  auto consumer = std::make_unique<Consumer>(c, open_store(url));
  std::mutex mutex;
  std::vector<CallCompletion<bool>> unanswered;  // kept until the end: never completed
  consumer->on_effect(
      topic,
      EffectHandler<OrderConfirmed, bool>{
          .call =
              [&](const OrderConfirmed& e, const RecordInfo&, CallCompletion<bool> done) {
                if (e.order_id != 2) return done.done(true);
                std::lock_guard lock(mutex);
                unanswered.push_back(std::move(done));
              },
          .apply =
              [](const OrderConfirmed& e, const RecordInfo& r, const bool&, Transaction& tx) {
                record_effect(tx, e.event_id, r);
                return Outcome::Done;
              },
          .ordering_key = {}});
  Consumer& observed = *consumer;
  RunningConsumer running(std::move(consumer));
  ASSERT_TRUE(eventually([&] { return observed.stats().processed >= 4; }, 60s, 20ms))
      << "orders 1, 3, 4 and 5 were not applied";
  ASSERT_EQ(observed.stats().delivered, 5u);

  observed.stop();
  // Records that arrive while the calls drain are not taken: the next owner has them.
  produce_orders(broker_->bootstrap_servers(), topic, 6, 10, [](std::int64_t) { return "d"; });
  ASSERT_TRUE(eventually([&] { return running.finished(); }, 20s, 20ms)) << "run() did not return";
  running.stop();
  std::string error;
  if (running.error()) {
    try {
      std::rethrow_exception(running.error());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  EXPECT_EQ(error, "") << "the stop ran out of time for the final commit or the group leave";
  const ConsumerStats s = observed.stats();
  EXPECT_EQ(s.delivered, 5u) << "records polled while draining were admitted";
  EXPECT_EQ(s.calls, 5u);
  const std::vector<std::int64_t> committed =
      committed_offsets(broker_->bootstrap_servers(), c.group_id, topic, 1);
  EXPECT_EQ(committed.at(0), 1) << "the final commit of order 1 was not made";
}

}  // namespace effect_stop_test
}  // namespace idem::test
