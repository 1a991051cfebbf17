// The parts of an idle consumer's look at its store connections that need no server: when
// the look is due (IdleStoreCheck), and how the consumer goes back to the stored offsets
// (FetchGate::rewind). The look itself, across a real failover, is
// IdleConsumerFailover in tests/fault/consumer_failover_test.cpp.
#include <chrono>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "consumer/intake/fetch_gate.hpp"
#include "consumer/positions/idle_store_check.hpp"
#include "consumer/positions/partition_progress.hpp"
#include "idem/config.hpp"
#include "idem/error.hpp"
#include "idem/retry.hpp"

namespace idle_store_check_test {

using namespace std::chrono_literals;
using idem::Backend;
using idem::ConsumerConfig;
using idem::detail::FetchGate;
using idem::detail::IdleStoreCheck;
using idem::detail::PartitionOffset;
using idem::detail::TopicPartition;
using TimePoint = std::chrono::steady_clock::time_point;

/// A store that only says which backend it is.
class BackendOnly final : public idem::Store {
 public:
  explicit BackendOnly(Backend backend) : backend_(backend) {}
  std::unique_ptr<idem::Transaction> begin() override { throw unused(); }
  idem::MigrationReport migrate(const idem::MigrateOptions&) override { throw unused(); }
  idem::MigrationReport migrate_set(const idem::MigrationSet&) override { throw unused(); }
  int schema_version(std::string_view) override { throw unused(); }
  [[nodiscard]] Backend backend() const noexcept override { return backend_; }
  [[nodiscard]] std::unique_ptr<idem::Store> connect_again() const override { throw unused(); }

 private:
  static idem::Error unused() {
    return {idem::ErrorCode::Internal, idem::ErrorSource::Internal, "not used by the test"};
  }
  Backend backend_;
};

ConsumerConfig every(std::chrono::milliseconds interval) {
  ConsumerConfig config;
  config.idle_store_check = interval;
  return config;
}

const TimePoint kStart = TimePoint() + 1h;

TEST(IdleStoreCheck, LooksOnceNoRecordWasPolledForAWholeInterval) {
  const BackendOnly postgres(Backend::Postgres);
  IdleStoreCheck check(every(2s), postgres);
  check.records_polled(kStart);
  EXPECT_FALSE(check.take_due(kStart + 1999ms)) << "records were polled within the interval";
  check.records_polled(kStart + 1s);  // more records: the interval starts again
  EXPECT_FALSE(check.take_due(kStart + 2500ms));
  EXPECT_TRUE(check.take_due(kStart + 3s));
  // Still idle: the next look an interval after this one.
  EXPECT_FALSE(check.take_due(kStart + 4999ms));
  EXPECT_TRUE(check.take_due(kStart + 5s));
}

TEST(IdleStoreCheck, AConsumerThatPolledNothingYetLooksAtOnce) {
  const BackendOnly postgres(Backend::Postgres);
  IdleStoreCheck check(every(2s), postgres);
  EXPECT_TRUE(check.take_due(kStart));
  EXPECT_FALSE(check.take_due(kStart + 1s));
}

TEST(IdleStoreCheck, NeverLooksWhenOffOrWhenNothingCouldBeReplaced) {
  const BackendOnly postgres(Backend::Postgres);
  const BackendOnly sqlite(Backend::Sqlite);
  ConsumerConfig kafka_only = every(2s);
  kafka_only.offsets_in_store = false;
  IdleStoreCheck off(every(0ms), postgres);
  IdleStoreCheck file(every(2s), sqlite);
  IdleStoreCheck no_stored_offsets(kafka_only, postgres);
  for (IdleStoreCheck* check : {&off, &file, &no_stored_offsets}) {
    EXPECT_FALSE(check->take_due(kStart));
    EXPECT_FALSE(check->take_due(kStart + 24h));
  }
}

TEST(IdleStoreCheck, IsAConsumerSettingOfTwoSecondsByDefault) {
  EXPECT_EQ(idem::load_config({}).consumer_config().idle_store_check, 2s);
  idem::ConfigSources sources;
  sources.environment = {{"IDEM_CONSUMER_IDLE_STORE_CHECK", "500ms"}};
  EXPECT_EQ(idem::load_config(sources).consumer_config().idle_store_check, 500ms);
  sources.environment = {{"IDEM_CONSUMER_IDLE_STORE_CHECK", "0s"}};
  EXPECT_EQ(idem::load_config(sources).consumer_config().idle_store_check, 0ms);
}

/// Records what the gate asks of the fetching, in order.
class RecordedFetch final : public idem::detail::FetchControl {
 public:
  struct Call {
    bool pause = false;  ///< pause_and_seek, else seek_and_resume
    PartitionOffset at;
    bool operator==(const Call&) const = default;
  };
  void pause_and_seek(const PartitionOffset& at) override { calls.push_back({true, at}); }
  void seek_and_resume(const PartitionOffset& at) override { calls.push_back({false, at}); }
  void wake() noexcept override {}
  std::vector<Call> calls;
};

TEST(FetchGate, RewindDropsTheHoldsAndSeeksThePartitionBackAndResumesIt) {
  const TopicPartition held{"t", 0};
  const TopicPartition free{"t", 1};
  RecordedFetch fetch;
  idem::detail::PartitionProgress progress;
  FetchGate gate(fetch, progress);
  static_cast<void>(gate.retry_later(held, 40, kStart));
  ASSERT_TRUE(gate.held(held));
  fetch.calls.clear();

  const std::vector<PartitionOffset> to{{held, 25}, {free, 7}};
  gate.rewind(to);
  EXPECT_FALSE(gate.held(held));
  EXPECT_EQ(gate.next_due(), std::nullopt) << "the retry of the record at 40 was forgotten";
  const std::vector<RecordedFetch::Call> expected{
      {true, {held, 25}}, {false, {held, 25}}, {true, {free, 7}}, {false, {free, 7}}};
  EXPECT_EQ(fetch.calls, expected);
  // The retry's release no longer resumes it anywhere.
  gate.release_due(kStart + 24h);
  EXPECT_EQ(fetch.calls, expected);
}

}  // namespace idle_store_check_test
