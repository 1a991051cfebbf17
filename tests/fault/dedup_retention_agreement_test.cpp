// One dedup retention per store, from the outside, with real processes (`idem dev-broker`, `idem
// consume`, `idem maintain`, `idem retention`) on both backends: events born 3 days ago
// are consumed once, `idem maintain --retention 48h` runs, the same events are
// produced again, and the consumer applies each event exactly once.
//
//  - The consumer group declared its 168 h retention in the store, so the 48 h pass keeps
//    its marks (and says why) and the resends are recognised as duplicates.
//  - A group whose declaration was removed (`idem retention forget --force`) loses its
//    marks to the 48 h pass; the store records what was dropped, and the consumer started
//    after that quarantines the resends as stale instead of executing them again.
//
// "3 days old" is the UUIDv7 timestamp of each event_id (event time, the clock both
// maintenance and the horizon guard use); the processes run on the real clock.
#include <chrono>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "idem/reference/order_confirmed.hpp"
#include "idem/store.hpp"
#include "support/cli_run.hpp"
#include "support/consumer_scenario.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/manual_clock.hpp"
#include "support/mock_group.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem {
namespace dedup_retention_agreement_test {

using namespace std::chrono_literals;

constexpr int kEvents = 50;
constexpr int kPartitions = 3;

template <class Backend>
class DedupRetentionAgreementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    IDEM_REQUIRE_CLI();
    db_ = Backend::fresh_url();
    if (db_.empty()) GTEST_SKIP();
    broker_ = std::make_unique<test::DevBrokerProcess>(IDEM_CLI_PATH);
    topic_ = test::unique_name("orders");
    group_ = test::unique_name("billing");
    broker_->create_topic(topic_, kPartitions);
    broker_->create_topic(topic_ + ".dlq", 1);
    const auto born = std::chrono::system_clock::now() - 72h;
    for (int i = 0; i < kEvents; ++i) {
      OrderConfirmed e;
      e.event_id = test::uuid_v7_born_at(born + std::chrono::milliseconds(i));
      e.occurred_at = std::chrono::time_point_cast<std::chrono::microseconds>(born);
      e.order_id = i + 1;
      e.customer_id = 7;
      e.total_amount = Amount::from_hundredths(1999);
      events_.push_back(e);
    }
  }

  /// A producer resend: the same events, the same ids, new offsets.
  void produce_events() {
    test::KafkaTestProducer producer(broker_->bootstrap());
    for (const auto& e : events_) {
      producer.send(
          {topic_, std::to_string(e.order_id), to_json(e), {{"event_id", e.event_id.to_string()}}});
    }
    producer.flush();
  }

  std::int64_t scalar(const std::string& sql) {
    auto store = open_store(db_);
    return Backend::read_scalar(*store, sql);
  }
  std::int64_t committed_total() {
    const auto offsets = test::committed_offsets(broker_->bootstrap(), group_, topic_, kPartitions);
    return std::accumulate(
        offsets.begin(), offsets.end(), std::int64_t{0},
        [](std::int64_t sum, std::int64_t o) { return sum + std::max<std::int64_t>(o, 0); });
  }

  /// Runs `idem consume` (count handler, 168 h dedup retention by default) until the
  /// group has committed `offsets` records, then stops it with SIGTERM. Returns its stderr.
  std::string consume_until_committed(std::int64_t offsets) {
    const std::string log =
        (test::scratch_dir() / (test::unique_name("consume") + ".log")).string();
    auto consumer = test::ChildProcess::spawn(
        IDEM_CLI_PATH,
        test::with_mock_group({"consume", "--brokers", broker_->bootstrap(), "--topic", topic_,
                               "--group", group_, "--db", db_, "--batch", "10"}),
        {}, log);
    const bool done = test::eventually(
        [&] {
          try {
            return committed_total() >= offsets;
          } catch (const std::exception&) {
            return false;  // the coordinator is busy with the join
          }
        },
        90s);
    EXPECT_TRUE(done) << "the consumer did not commit " << offsets << " offsets in time";
    consumer.kill(SIGTERM);
    EXPECT_EQ(consumer.wait(60s), 0);
    std::ifstream in(log);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  test::CliResult idem(const std::vector<std::string>& args) {
    return test::run_to_completion(IDEM_CLI_PATH, args);
  }

  std::int64_t effects() { return scalar("SELECT count(*) FROM effect_log"); }
  std::int64_t max_effects_per_event() {
    return scalar(
        "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM effect_log GROUP BY "
        "event_id) AS t");
  }
  std::int64_t marks() { return scalar("SELECT count(*) FROM processed_event"); }

  std::string db_;
  std::unique_ptr<test::DevBrokerProcess> broker_;
  std::string topic_;
  std::string group_;
  std::vector<OrderConfirmed> events_;
};

TYPED_TEST_SUITE(DedupRetentionAgreementTest, test::AllBackends, test::BackendName);

TYPED_TEST(DedupRetentionAgreementTest, MaintenanceKeepsTheMarksAConsumerDeclared) {
  this->produce_events();
  this->consume_until_committed(kEvents);
  ASSERT_EQ(this->effects(), kEvents);

  const test::CliResult maintain =
      this->idem({"maintain", "--db", this->db_, "--retention", "48h"});
  ASSERT_EQ(maintain.status, 0) << maintain.output;
  EXPECT_NE(maintain.output.find("dedup_rows_deleted=0"), std::string::npos) << maintain.output;
  EXPECT_NE(maintain.output.find("kept dedup marks for 168 h instead of the configured 48 h"),
            std::string::npos)
      << maintain.output;
  EXPECT_NE(maintain.output.find("consumer group '" + this->group_ + "' declared 168 h"),
            std::string::npos)
      << maintain.output;
  EXPECT_EQ(this->marks(), kEvents);

  this->produce_events();
  this->consume_until_committed(2 * kEvents);
  EXPECT_EQ(this->effects(), kEvents) << "a resend after maintenance was applied again";
  EXPECT_EQ(this->max_effects_per_event(), 1);
}

TYPED_TEST(DedupRetentionAgreementTest, AConsumerStartedAfterMarksWereDroppedQuarantinesThem) {
  this->produce_events();
  this->consume_until_committed(kEvents);
  ASSERT_EQ(this->effects(), kEvents);

  // The group renewed its declaration a moment ago: forget refuses without --force.
  const test::CliResult refused =
      this->idem({"retention", "forget", "--db", this->db_, "--group", this->group_});
  EXPECT_EQ(refused.status, 3) << refused.output;
  EXPECT_NE(refused.output.find("it still runs"), std::string::npos) << refused.output;
  const test::CliResult forgot =
      this->idem({"retention", "forget", "--db", this->db_, "--group", this->group_, "--force"});
  ASSERT_EQ(forgot.status, 0) << forgot.output;
  EXPECT_NE(forgot.output.find("declarations=1"), std::string::npos) << forgot.output;

  const test::CliResult maintain =
      this->idem({"maintain", "--db", this->db_, "--retention", "48h"});
  ASSERT_EQ(maintain.status, 0) << maintain.output;
  EXPECT_NE(maintain.output.find("dedup_rows_deleted=" + std::to_string(kEvents)),
            std::string::npos)
      << maintain.output;
  ASSERT_EQ(this->marks(), 0);
  const test::CliResult list = this->idem({"retention", "list", "--db", this->db_});
  EXPECT_NE(list.output.find("dropped: marks of events born before"), std::string::npos)
      << list.output;

  this->produce_events();
  const std::string log = this->consume_until_committed(2 * kEvents);
  EXPECT_EQ(this->effects(), kEvents) << "an event whose mark was dropped was applied again";
  EXPECT_NE(log.find("kept dedup marks for 48 h only"), std::string::npos) << log;
  const auto dlq =
      test::read_topic(this->broker_->bootstrap(), this->topic_ + ".dlq", 1, kEvents, 30s);
  ASSERT_EQ(dlq.size(), static_cast<std::size_t>(kEvents));
  EXPECT_EQ(dlq[0].header("idem.error.class"), "stale");
  EXPECT_NE(dlq[0].header("idem.error.message").value_or("").find("may have dropped its dedup row"),
            std::string::npos);
}

}  // namespace dedup_retention_agreement_test
}  // namespace idem
