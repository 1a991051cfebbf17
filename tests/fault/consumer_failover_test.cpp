// The consumer across lossy PostgreSQL failovers, with real servers and processes: a
// PostgreSQL 15 primary and an asynchronous streaming standby on loopback
// (tests/support/replicated_postgres.hpp), order events produced to the topic at a
// steady rate, and one `idem consume --handler count` process (one effect_log row per
// event, in the transaction of its dedup mark), started once, with a store URL naming
// both nodes.
//
// Each cycle holds the standby back (its walsender SIGSTOPped), lets the consumer commit
// at least one more second of effects on the primary, SIGKILLs the primary, promotes the
// standby and rebuilds the old primary as the new standby: those effects are gone. The
// consumer must reconnect to the new primary by itself and go on. Once it has committed
// the end of every partition in Kafka, the checker compares the topic with the surviving
// database: every event on the topic has exactly one effect_log row.
//
// With Kafka's committed offsets as the only position (offsets committed right after
// the database commit), the effects a failover takes back are never applied again: their
// offsets are committed, nobody reads those records again. With offsets kept in the store
// (the default), the positions go back with the effects, and the consumer, reading them
// again after its connection was replaced, applies those records again. The test prints
// what the failovers took back and what the checker found.
//
// IdleConsumerFailover stages one such failover with no record produced after it: the
// consumer, idle, must notice by itself that its connections are gone (its periodic look,
// consumer.idle_store_check) and apply again what the failover took back.
//
// Settings (environment): IDEM_TEST_FAILOVER_CYCLES (default 20), IDEM_TEST_FAILOVER_EVENTS_PER_S
// (default 200), IDEM_TEST_FAILOVER_BEHIND_MS (commits the standby misses per cycle, at
// least; default 1000).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "idem/devtools/dev_broker.hpp"
#include "idem/error.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "support/failover_test.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/process.hpp"
#include "support/replicated_postgres.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem {
namespace consumer_failover_test {

using namespace std::chrono_literals;
using test::eventually;
using Clock = std::chrono::steady_clock;

constexpr int kPartitions = 3;
constexpr int kEventsPerSend = 10;

/// Order events produced to the topic at about `per_second` a second, in sends of
/// kEventsPerSend records to one partition after another, on a thread of its own.
class EventWriter {
 public:
  EventWriter(std::string bootstrap, std::string topic, int per_second)
      : bootstrap_(std::move(bootstrap)),
        topic_(std::move(topic)),
        interval_(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(double(kEventsPerSend) / per_second))),
        thread_([this] { run(); }) {}
  ~EventWriter() { stop(); }
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  void stop() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  [[nodiscard]] std::string error() const {
    std::lock_guard lock(mutex_);
    return error_;
  }

 private:
  void run() noexcept {
    auto next_at = Clock::now();
    for (std::int32_t partition = 0;; partition = (partition + 1) % kPartitions) {
      {
        // Pacing the load (a rate, not synchronisation); a stop ends the wait at once.
        std::unique_lock lock(mutex_);
        if (wake_.wait_until(lock, next_at, [&] { return stop_; })) return;
      }
      next_at += interval_;
      try {
        static_cast<void>(
            test::produce_order_events(bootstrap_, topic_, kEventsPerSend, partition));
      } catch (const std::exception& e) {
        std::lock_guard lock(mutex_);
        error_ = e.what();
        return;
      }
    }
  }

  const std::string bootstrap_;
  const std::string topic_;
  const Clock::duration interval_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::string error_;
  std::thread thread_;  // last: starts once everything above exists
};

/// What one run of failovers left behind, as the checker sees it.
struct Outcome {
  int cycles = 0;
  std::int64_t taken_back = 0;          ///< effect rows the failovers took back (at least)
  std::size_t records = 0;              ///< on the topic
  std::size_t applied = 0;              ///< events with exactly one effect
  std::vector<std::string> lost;        ///< "partition:offset" of events without an effect
  std::vector<std::string> duplicated;  ///< "partition:offset" of events with several
  int consumer_status = 0;
};

std::int64_t effects_on_primary(const test::ReplicatedPostgres& cluster, const std::string& group) {
  return std::stoll(cluster.query(
      fmt::format("SELECT count(*) FROM effect_log WHERE consumer_group = '{}'", group))[0]);
}

class ConsumerFailover : public test::FailoverTest {
 protected:
  Outcome run(int cycles) {
    const int per_second = test::failover_setting("IDEM_TEST_FAILOVER_EVENTS_PER_S", 200);
    const int behind_ms = test::failover_setting("IDEM_TEST_FAILOVER_BEHIND_MS", 1000);
    const std::string topic = "failover-orders";
    const std::string group = "failover-count";
    test::ReplicatedPostgres cluster(*binaries_);
    migrate(cluster);
    DevBroker broker;
    broker.create_topic(topic, kPartitions);
    const std::string bootstrap = broker.bootstrap_servers();
    ChildProcess consumer = ChildProcess::spawn(
        IDEM_CLI_PATH, {"consume", "--db", cluster.url(), "--brokers", bootstrap, "--topic", topic,
                        "--group", group, "--handler", "count", "--batch", "10"});
    EXPECT_TRUE(test::read_line_starting_with(consumer, "consuming ", 60s))
        << "the consumer did not start";

    Outcome out;
    EventWriter writer(bootstrap, topic, per_second);
    for (int cycle = 1; cycle <= cycles; ++cycle) {
      // The consumer applies events on the current primary again.
      const std::int64_t before = effects_on_primary(cluster, group);
      if (!eventually([&] { return effects_on_primary(cluster, group) > before; }, 60s, 20ms)) {
        ADD_FAILURE() << "cycle " << cycle << ": the consumer applies nothing on the primary "
                      << writer.error();
        break;
      }
      cluster.hold_back_standby();
      const std::string held_at = cluster.query("SELECT clock_timestamp()::text")[0];
      // At least `behind_ms` of the consumer's commits the standby never gets: an effect
      // whose transaction began that long after the hold is committed on the primary.
      const bool behind = eventually(
          [&] {
            return cluster.query(fmt::format(
                       "SELECT count(*) > 0 FROM effect_log WHERE consumer_group = '{}' AND "
                       "applied_at > '{}'::timestamptz + interval '{} milliseconds'",
                       group, held_at, behind_ms)) == std::vector<std::string>{"t"};
          },
          60s, 20ms);
      EXPECT_TRUE(behind) << "cycle " << cycle << ": no effect committed " << behind_ms
                          << " ms after the hold";
      const std::int64_t on_old_primary = effects_on_primary(cluster, group);
      cluster.crash_primary();
      cluster.promote_standby();
      out.taken_back += on_old_primary - effects_on_primary(cluster, group);
      cluster.rebuild_standby();
      out.cycles = cycle;
    }
    writer.stop();
    EXPECT_EQ(writer.error(), "");
    // Done in the consumer's own view: it has committed the end of every partition.
    const auto end = test::end_offsets(bootstrap, topic, kPartitions);
    const bool caught_up = eventually(
        [&] {
          try {
            return test::committed_offsets(bootstrap, group, topic, kPartitions) == end;
          } catch (const Error&) {
            return false;  // the coordinator is busy: ask again
          }
        },
        120s, 100ms);
    EXPECT_TRUE(caught_up) << "the consumer did not commit the end of the topic";
    consumer.kill(SIGTERM);
    out.consumer_status = consumer.wait(60s);
    check(cluster, bootstrap, topic, group, out);
    return out;
  }

  /// Compares the topic with the surviving database's effects.
  static void check(const test::ReplicatedPostgres& cluster, const std::string& bootstrap,
                    const std::string& topic, const std::string& group, Outcome& out) {
    std::map<std::string, int> effects;  // event id -> effect rows
    for (const std::string& row : cluster.query(fmt::format(
             "SELECT event_id::text || ' ' || count(*) FROM effect_log WHERE consumer_group = "
             "'{}' GROUP BY event_id",
             group))) {
      const auto space = row.find(' ');
      effects[row.substr(0, space)] = std::stoi(row.substr(space + 1));
    }
    std::size_t total = 0;
    for (const auto o : test::end_offsets(bootstrap, topic, kPartitions))
      total += static_cast<std::size_t>(o);
    const auto records = test::read_topic(bootstrap, topic, kPartitions, total, 60s);
    EXPECT_EQ(records.size(), total);
    out.records = records.size();
    for (const auto& r : records) {
      const auto it = effects.find(r.header("event_id").value_or(""));
      const std::string where = fmt::format("{}:{}", r.partition, r.offset);
      if (it == effects.end()) {
        out.lost.push_back(where);
      } else if (it->second > 1) {
        out.duplicated.push_back(where);
      } else {
        ++out.applied;
      }
    }
  }
};

// With offsets kept only in Kafka (consumer.offsets_in_store = false) it fails: every
// effect a failover takes back is lost.
TEST_F(ConsumerFailover, EveryEventIsAppliedExactlyOnceAcrossLossyFailovers) {
  const Outcome o = run(test::failover_setting("IDEM_TEST_FAILOVER_CYCLES", 20));
  std::printf(
      "consumer failover: %d lossy failovers took back at least %lld effect rows; topic: %zu "
      "events; applied once: %zu; lost (no effect): %zu%s%s; applied more than once: %zu\n",
      o.cycles, static_cast<long long>(o.taken_back), o.records, o.applied, o.lost.size(),
      o.lost.empty() ? "" : ", first partition:offset ", test::first_of(o.lost).c_str(),
      o.duplicated.size());
  std::fflush(stdout);
  EXPECT_EQ(o.consumer_status, 0) << "the consumer did not stop cleanly after the failovers";
  EXPECT_GT(o.taken_back, 0) << "the failovers took nothing back: the test proves nothing";
  EXPECT_TRUE(o.lost.empty()) << o.lost.size()
                              << " events lost their effect: " << test::first_of(o.lost);
  EXPECT_TRUE(o.duplicated.empty()) << test::first_of(o.duplicated);
}

// The consumer is idle when the failover takes back effects it applied: no record arrives
// afterwards, so no transaction of its own would notice. Its look at the store connections
// (every consumer.idle_store_check, 2 s by default) finds them closed by the killed
// server, reconnects to the new primary and goes back to the stored offsets: every effect
// is there again within the bound docs/consumer-offsets.md gives. Without the look
// nothing is applied again until a partition gets a new record. Parameter: the
// pipeline_depth (2: two connections on the batch path, both replaced).
class IdleConsumerFailover : public test::FailoverTest,
                             public ::testing::WithParamInterface<int> {};

TEST_P(IdleConsumerFailover, AppliesAgainWhatTheFailoverTookBackWithNoNewRecord) {
  constexpr int kPerPartition = 20;  // per partition and phase
  constexpr std::int64_t kAll = 2 * kPartitions * kPerPartition;
  // The look (2 s), the reconnect, reading the stored offsets, fetching the records again
  // and applying them: seconds; the rest is room for a loaded machine.
  constexpr auto kBound = 20s;
  const std::string topic = "idle-failover-orders";
  const std::string group = "idle-failover-count";
  test::ReplicatedPostgres cluster(*binaries_);
  migrate(cluster);
  DevBroker broker;
  broker.create_topic(topic, kPartitions);
  const std::string bootstrap = broker.bootstrap_servers();
  ChildProcess consumer = ChildProcess::spawn(
      IDEM_CLI_PATH,
      {"consume", "--db", cluster.url(), "--brokers", bootstrap, "--topic", topic, "--group", group,
       "--handler", "count", "--batch", "10", "--pipeline-depth", std::to_string(GetParam())});
  ASSERT_TRUE(test::read_line_starting_with(consumer, "consuming ", 60s))
      << "the consumer did not start";
  const auto produce_all = [&] {
    for (std::int32_t p = 0; p < kPartitions; ++p)
      static_cast<void>(test::produce_order_events(bootstrap, topic, kPerPartition, p));
  };
  const auto applied = [&](std::int64_t n) {
    return eventually([&] { return effects_on_primary(cluster, group) == n; }, 60s, 20ms);
  };

  // Half the effects are applied and replayed on the standby before it is held back (the
  // stored offsets survive, behind), half after: those stay on the primary alone.
  produce_all();
  ASSERT_TRUE(applied(kAll / 2)) << "the consumer did not apply the first records";
  ASSERT_TRUE(eventually(
      [&] {
        return cluster.query(
                   "SELECT bool_and(replay_lsn >= pg_current_wal_lsn()) FROM "
                   "pg_stat_replication") == std::vector<std::string>{"t"};
      },
      60s, 20ms))
      << "the standby did not replay the first effects";
  cluster.hold_back_standby();
  produce_all();
  ASSERT_TRUE(applied(kAll)) << "the consumer did not apply the second records";
  cluster.crash_primary();
  cluster.promote_standby();
  const std::int64_t survived = effects_on_primary(cluster, group);
  ASSERT_LT(survived, kAll) << "the failover took nothing back: the test proves nothing";

  // No record is produced from here on.
  const auto since = Clock::now();
  const bool again =
      eventually([&] { return effects_on_primary(cluster, group) == kAll; }, kBound, 100ms);
  EXPECT_TRUE(again) << "the idle consumer applied "
                     << effects_on_primary(cluster, group) - survived << " of the "
                     << kAll - survived << " effects the failover took back within "
                     << std::chrono::duration_cast<std::chrono::seconds>(kBound).count() << " s";
  std::printf(
      "idle consumer failover: %lld effect(s) taken back, %s %lld ms\n",
      static_cast<long long>(kAll - survived),
      again ? "applied again after" : "not applied again within",
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count()));
  std::fflush(stdout);
  EXPECT_EQ(
      cluster.query(fmt::format(
          "SELECT count(DISTINCT event_id) FROM effect_log WHERE consumer_group = '{}'", group)),
      std::vector<std::string>{std::to_string(kAll)})
      << "an event has several effects";
  consumer.kill(SIGTERM);
  EXPECT_EQ(consumer.wait(60s), 0) << "the consumer did not stop cleanly";
}

INSTANTIATE_TEST_SUITE_P(PipelineDepth, IdleConsumerFailover, ::testing::Values(1, 2));

}  // namespace consumer_failover_test
}  // namespace idem
