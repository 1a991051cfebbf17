// Rebalances with effect calls in flight, as real processes. A consumer
// (tests/children/consumer_child.cpp --handler effect: on_effect, 20 ms per call, up to 256 in
// flight) is processing when a second member joins the group (a rebalance revokes
// partitions whose calls are still running); then the first member is SIGKILLed with
// calls in flight, and the second takes over its partitions from the committed offsets.
// Afterwards the exactly-once invariant holds: one effect_log row per valid event, every
// malformed message in the DLQ with its class, everything committed.
//
// Waits are conditions with deadlines (a child's line, committed offsets reaching the end
// offsets), never sleeps.
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "support/consumer_scenario.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/process.hpp"
#include "support/store_backends.hpp"
#include "support/wait.hpp"

namespace concurrent_effects_fault_test {

using namespace std::chrono_literals;
using idem::test::ChildProcess;

constexpr std::size_t kMessages = 6'000;
constexpr int kPartitions = 8;

enum class Db { Sqlite, Postgres };
std::string db_name(Db db) {
  return db == Db::Sqlite ? "sqlite" : "postgres";
}
void PrintTo(Db db, std::ostream* os) {
  *os << db_name(db);
}

class ConcurrentEffectsFault : public ::testing::TestWithParam<Db> {
 protected:
  void SetUp() override {
    db_url_ = GetParam() == Db::Sqlite ? idem::test::SqliteBackend::fresh_url()
                                       : idem::test::PostgresBackend::fresh_url();
    if (IsSkipped() || HasFatalFailure()) return;
    idem::migrate_reference_system(*idem::open_store(db_url_));
    broker_ = std::make_unique<idem::test::DevBrokerProcess>(IDEM_CLI_PATH);
    topic_ = idem::test::unique_name("orders");
    broker_->create_topic(topic_, kPartitions);
    broker_->create_topic(topic_ + ".dlq", 1);
    seed_ = std::random_device{}();
    workload_ = idem::test::make_workload(topic_, kMessages, 0.10, 0.01, seed_);
    RecordProperty("seed", std::to_string(seed_));
  }

  ChildProcess start(const std::string& group) {
    idem::test::ConsumerArgs a;
    a.brokers = broker_->bootstrap();
    a.topic = topic_;
    a.group = group;
    a.db = db_url_;
    a.batch = 100;
    a.seed = seed_;
    a.handler = "effect";
    return idem::test::start_consumer(idem::test::child_program("consumer_child"), a);
  }

  std::string db_url_;
  std::unique_ptr<idem::test::DevBrokerProcess> broker_;
  std::string topic_;
  std::uint64_t seed_ = 0;
  idem::test::Workload workload_;
};

TEST_P(ConcurrentEffectsFault, JoinThenKillWithCallsInFlightKeepsEveryEffectOnce) {
  if (IsSkipped() || HasFatalFailure()) return;
  SCOPED_TRACE(fmt::format("seed {}", seed_));
  const std::string group = idem::test::unique_name("effects");
  const std::string& bootstrap = broker_->bootstrap();
  idem::test::KafkaTestProducer producer(bootstrap);
  std::size_t sent = 0;
  const auto send = [&](std::size_t n) {
    for (std::size_t i = 0; i < n && sent < workload_.records.size(); ++i)
      producer.send(workload_.records[sent++]);
    producer.flush(30s);
  };

  // A works alone first: it owns every partition and has calls in flight.
  ChildProcess a = start(group);
  bool a_working = false;
  for (int round = 0; round < 300 && !a_working; ++round) {
    send(100);
    // The waits for a line pace the trickle; they synchronise nothing.
    if (auto line = a.read_line(100ms); line && *line == "first-batch") a_working = true;
  }
  ASSERT_TRUE(a_working) << "the first member never got a batch";

  // B joins: the rebalance takes partitions from A while A's calls run.
  ChildProcess b = start(group);
  bool b_working = false;
  const std::size_t trickle_limit = workload_.records.size() * 7 / 10;
  // A slow trickle: B's start (the topic-retention check, the mock's 3 s first join, the
  // rebalance) must fit before 70% of the records are out, or A has done most of the work.
  for (int round = 0; round < 1200 && !b_working && sent < trickle_limit; ++round) {
    send(10);
    if (auto line = b.read_line(100ms); line && *line == "first-batch") b_working = true;
  }
  ASSERT_TRUE(b_working) << "the joining member never got a batch within " << sent << " records";

  // A dies with calls in flight (it keeps receiving records until the kill).
  send(200);
  a.kill(SIGKILL);
  ASSERT_EQ(a.wait(30s), -SIGKILL);
  send(workload_.records.size());
  const auto malformed = idem::test::locate_malformed(bootstrap, topic_, kPartitions, workload_);
  const auto end = idem::test::end_offsets(bootstrap, topic_, kPartitions);

  ASSERT_TRUE(idem::test::eventually(
      [&] { return idem::test::group_caught_up(bootstrap, group, topic_, end); }, 240s, 500ms))
      << "the survivor did not finish the killed member's partitions";
  ASSERT_EQ(b.wait_for(0ms), std::nullopt) << "the survivor died";
  b.kill(SIGTERM);
  const auto stats = idem::test::read_stats(b, 60s);
  EXPECT_TRUE(idem::test::expect_line(b, "stopped", 30s)) << "no graceful stop";
  EXPECT_EQ(b.wait(30s), 0);
  ASSERT_FALSE(stats.empty());
  EXPECT_GT(stats.at("calls"), 0u);
  EXPECT_TRUE(idem::test::exactly_once_invariant(bootstrap, db_url_, topic_, kPartitions, group,
                                                 workload_, malformed));
}

INSTANTIATE_TEST_SUITE_P(Rebalance, ConcurrentEffectsFault,
                         ::testing::Values(Db::Sqlite, Db::Postgres),
                         [](const ::testing::TestParamInfo<Db>& param_info) {
                           return db_name(param_info.param);
                         });

}  // namespace concurrent_effects_fault_test
