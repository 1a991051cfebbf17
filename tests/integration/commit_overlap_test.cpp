// pipeline_depth 2 on PostgreSQL, one step at a time (BatchProcessor::prepare/commit on
// two connections, as BatchPipeline drives them): a duplicate whose copies straddle two
// batches. The second batch's mark of the copy waits on the primary-key lock of the first
// batch's uncommitted mark (seen in pg_stat_activity), and resolves as a duplicate when
// the first commits, or as new when the first rolls back. One effect row either way.
// The same with real processes and SIGKILLs between the two commits, on both backends:
// tests/fault/consumer_fault_test.cpp (StraddlingDuplicates).
#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "consumer/batch/batch_processor.hpp"
#include "idem/kafka/kafka_handle.hpp"
#include "idem/reference/count_handler.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/schema.hpp"
#include "support/dead_letters.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/postgres_test_db.hpp"
#include "support/wait.hpp"

namespace idem {
namespace commit_overlap_test {

using namespace std::chrono_literals;

class CommitOverlapTest : public test::DevBrokerSuite {
 protected:
  void SetUp() override {
    IDEM_FRESH_POSTGRES_URL(url);
    url_ = url;
    first_ = open_store(url_);
    migrate_reference_system(*first_);
    second_ = first_->connect_again();
    topic_ = test::unique_name("orders");
    broker_->create_topic(topic_, 1);
    // The event, then its copy (same id, next offset): one record per batch below.
    event_ = test::console_order(7);
    test::KafkaTestProducer producer(broker_->bootstrap_servers());
    for (int i = 0; i < 2; ++i)
      producer.send({topic_, "7", to_json(event_), {{"event_id", event_.event_id.to_string()}}, 0});
    producer.flush();
    fetch(2);
    config_.group_id = "billing";
    for (detail::TopicHandlers* handlers : {&handlers_a_, &handlers_b_}) {
      handlers->batch.emplace(topic_, std::make_unique<detail::TypedTopicHandler<OrderConfirmed>>(
                                          count_handler<OrderConfirmed>()));
    }
  }

  /// Reads `n` records of partition 0 from the start with a plain consumer.
  void fetch(std::size_t n) {
    detail::KafkaConf conf(rd_kafka_conf_new());
    const std::vector<detail::Property> props = {
        {"bootstrap.servers", broker_->bootstrap_servers()},
        {"group.id", test::unique_name("fetch")},
        {"enable.auto.commit", "false"}};
    detail::set_properties(conf.get(), props);
    rk_ = detail::create_handle(RD_KAFKA_CONSUMER, std::move(conf));
    detail::PartitionList list = detail::make_partition_list(1);
    rd_kafka_topic_partition_list_add(list.get(), topic_.c_str(), 0)->offset =
        RD_KAFKA_OFFSET_BEGINNING;
    ASSERT_EQ(rd_kafka_assign(rk_.get(), list.get()), RD_KAFKA_RESP_ERR_NO_ERROR);
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (records_.size() < n && std::chrono::steady_clock::now() < deadline) {
      detail::KafkaMessage m(rd_kafka_consumer_poll(rk_.get(), 100));
      if (m && m->err == RD_KAFKA_RESP_ERR_NO_ERROR) records_.push_back(std::move(m));
    }
    ASSERT_EQ(records_.size(), n);
  }

  [[nodiscard]] std::span<const detail::KafkaMessage> record(std::size_t i) const {
    return {&records_[i], 1};
  }

  /// Backends of this database waiting for a lock (seen from a third connection).
  [[nodiscard]] std::int64_t waiting_for_a_lock() const {
    auto observer = open_store(url_);
    auto tx = observer->begin();
    const Rows rows = tx->execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = "
        "current_database()");
    const std::int64_t n = rows[0].int64(0);
    tx->commit();
    return n;
  }

  [[nodiscard]] std::int64_t effects() const {
    auto reader = open_store(url_);
    auto tx = reader->begin();
    const Rows rows = tx->execute("SELECT count(*) FROM effect_log");
    const std::int64_t n = rows[0].int64(0);
    tx->commit();
    return n;
  }

  std::string url_;
  std::unique_ptr<Store> first_;
  std::unique_ptr<Store> second_;
  std::string topic_;
  OrderConfirmed event_;
  ConsumerConfig config_;
  ConsumerHooks hooks_;
  detail::RetryTopicMap retry_topics_{config_};
  detail::DedupHorizonGuard guard_{config_};
  detail::TopicHandlers handlers_a_;
  detail::TopicHandlers handlers_b_;
  const detail::LogFn log_;
  const detail::ConsumerContext context_a_{
      config_, hooks_, log_, handlers_a_, retry_topics_, guard_, detail::SteadyClock::real()};
  const detail::ConsumerContext context_b_{
      config_, hooks_, log_, handlers_b_, retry_topics_, guard_, detail::SteadyClock::real()};
  detail::RetrySchedule schedule_;
  detail::KafkaHandle rk_;  // before the records: they are destroyed first
  std::vector<detail::KafkaMessage> records_;
};

TEST_F(CommitOverlapTest, TheSecondCopyWaitsForTheFirstCommitAndIsThenADuplicate) {
  detail::BatchProcessor a(context_a_, *first_);
  detail::BatchProcessor b(context_b_, *second_);
  detail::BatchResult first = a.prepare(record(0), schedule_);
  ASSERT_TRUE(a.open());
  EXPECT_EQ(first.processed, 1U);

  auto second = std::async(std::launch::async, [&] { return b.prepare(record(1), schedule_); });
  ASSERT_TRUE(test::eventually([&] { return waiting_for_a_lock() == 1; }, 30s, 20ms))
      << "the copy's mark did not wait on the first batch's uncommitted row";
  EXPECT_EQ(second.wait_for(0s), std::future_status::timeout);

  a.commit(first);
  ASSERT_TRUE(first.committed) << first.failure;
  detail::BatchResult then = second.get();
  EXPECT_EQ(then.processed, 0U);
  EXPECT_EQ(then.duplicates, 1U);
  EXPECT_EQ(then.partitions.at(0).decided_end, 2) << "the copy's offset is done";
  b.commit(then);
  ASSERT_TRUE(then.committed) << then.failure;
  EXPECT_EQ(effects(), 1);
}

TEST_F(CommitOverlapTest, WhenTheFirstRollsBackTheSecondCopyIsTheFirstTime) {
  detail::BatchProcessor a(context_a_, *first_);
  detail::BatchProcessor b(context_b_, *second_);
  static_cast<void>(a.prepare(record(0), schedule_));
  ASSERT_TRUE(a.open());
  auto second = std::async(std::launch::async, [&] { return b.prepare(record(1), schedule_); });
  ASSERT_TRUE(test::eventually([&] { return waiting_for_a_lock() == 1; }, 30s, 20ms));

  a.rollback();
  detail::BatchResult then = second.get();
  EXPECT_EQ(then.processed, 1U);
  EXPECT_EQ(then.duplicates, 0U);
  b.commit(then);
  ASSERT_TRUE(then.committed) << then.failure;
  EXPECT_EQ(effects(), 1);
}

}  // namespace commit_overlap_test
}  // namespace idem
