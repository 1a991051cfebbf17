// The multi-process exactly-once proofs of idem::Consumer.
//
// Every scenario runs a REAL `idem dev-broker` process, REAL consumer processes
// (tests/children/consumer_child.cpp, and `idem consume` itself in one place) and a real
// store: SQLite, and PostgreSQL when IDEM_TEST_PG_DSN is set (skipped otherwise, a failure
// under CI=true). Crashes are real process deaths: the child raise(SIGKILL)s itself at a
// HookPoint, or the test SIGKILLs it.
//
// After each scenario the invariant holds (exactly_once_invariant in
// tests/support/consumer_scenario.hpp): every valid event has exactly one effect_log row,
// no row exists for an id that was not sent, every malformed message is in `<topic>.dlq`
// with its error class and original partition/offset, and the group committed every
// partition to its end (nothing lost).
//
// Waits are conditions with deadlines (committed offsets reaching the end offsets, a line
// from a child), never sleeps. Mock-cluster timing (docs/dev-broker.md): the first
// join waits 3 s and every later rebalance about session.timeout.ms - 1000 ms, so each
// crash/restart cycle costs ~5-9 s; that, not the event count, sets the running time.
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "idem/devtools/kafka_admin.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "support/consumer_scenario.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/mock_group.hpp"
#include "support/process.hpp"
#include "support/store_backends.hpp"
#include "support/wait.hpp"

namespace consumer_fault_test {

using idem::test::unique_name;

using namespace std::chrono_literals;
using idem::test::ChildProcess;
using idem::test::ConsumerArgs;
using idem::test::DevBrokerProcess;
using idem::test::MalformedLocations;
using idem::test::Workload;

// --- scale: the one place to turn it up or down -------------------------------------------
constexpr std::size_t kMessages = 20'000;       // per scenario: valid + duplicates + malformed
constexpr double kDuplicateRatio = 0.10;        // resends of a valid event (same id, new offset)
constexpr double kMalformedPerKind = 0.01;      // x 6 kinds
constexpr std::size_t kOutageMessages = 4'000;  // the DB-outage scenario
constexpr int kPartitions = 8;
constexpr std::size_t kBatch = 100;
constexpr int kTargetCrashes = 6;          // crashing processes started per run, at most
constexpr int kMinCrashes = 5;             // ... and the crashes that must have happened
constexpr auto kCatchUpDeadline = 180s;    // one consumer draining what is left
constexpr auto kChildLifeDeadline = 120s;  // one crashing process

enum class Db { Sqlite, Postgres };

std::string db_name(Db db) {
  return db == Db::Sqlite ? "sqlite" : "postgres";
}
void PrintTo(Db db, std::ostream* os) {
  *os << db_name(db);
}  // for GoogleTest's listings

std::uint64_t random_seed() {
  return std::random_device{}();
}

struct CrashPoint {
  const char* name;    // to_string(HookPoint)
  double probability;  // per hook call
};

// AfterHandler is called once per new event, the others once per batch (<= kBatch records):
// each process gets about five hundred records before it dies, so a run never finishes
// before its kMinCrashes crashes. A run has about 16,800 distinct events in at least 170
// batches: fewer than 5 crashes in it is a Poisson tail of about 1e-10 (at 0.001 per event
// and 0.1 per batch it was about 2e-4, and it happened once).
constexpr CrashPoint kAfterDbCommit{"after_db_commit", 0.2};
constexpr CrashPoint kAfterHandler{"after_handler", 0.002};
constexpr CrashPoint kBeforeDbCommit{"before_db_commit", 0.2};

/// A broker, a topic with its DLQ, a store and a workload; what every scenario starts from.
class ConsumerFaultBase : public ::testing::Test {
 protected:
  /// Opens a fresh store of `db` (skips for PostgreSQL without IDEM_TEST_PG_DSN), starts
  /// the broker and creates the topics. Check IsSkipped()/HasFatalFailure() after it.
  void start_world(Db db, std::size_t messages) {
    db_url_ = db == Db::Sqlite ? idem::test::SqliteBackend::fresh_url()
                               : idem::test::PostgresBackend::fresh_url();
    if (IsSkipped() || HasFatalFailure()) return;
    open_world(db_url_, messages);
  }

  void open_world(const std::string& db_url, std::size_t messages) {
    db_url_ = db_url;
    idem::migrate_reference_system(*idem::open_store(db_url_));
    broker_ = std::make_unique<DevBrokerProcess>(IDEM_CLI_PATH);
    topic_ = unique_name("orders");
    broker_->create_topic(topic_, kPartitions);
    broker_->create_topic(topic_ + ".dlq", 1);
    seed_ = random_seed();
    workload_ =
        idem::test::make_workload(topic_, messages, kDuplicateRatio, kMalformedPerKind, seed_);
    RecordProperty("seed", std::to_string(seed_));
  }

  /// Produces everything and locates the malformed messages.
  void produce_all() {
    idem::test::produce(bootstrap(), workload_, 0, workload_.records.size());
    locate();
  }
  void locate() {
    malformed_ = idem::test::locate_malformed(bootstrap(), topic_, kPartitions, workload_);
    end_ = idem::test::end_offsets(bootstrap(), topic_, kPartitions);
  }

  [[nodiscard]] const std::string& bootstrap() const { return broker_->bootstrap(); }

  ConsumerArgs args(const std::string& group) const {
    ConsumerArgs a;
    a.brokers = broker_->bootstrap();
    a.topic = topic_;
    a.group = group;
    a.db = db_url_;
    a.batch = kBatch;
    a.seed = seed_;
    a.pipeline_depth = pipeline_depth_;
    return a;
  }

  ChildProcess start(const ConsumerArgs& a) {
    return idem::test::start_consumer(idem::test::child_program("consumer_child"), a);
  }

  bool caught_up(const std::string& group) const {
    return idem::test::group_caught_up(bootstrap(), group, topic_, end_);
  }

  /// Waits until `group` committed everything (kCatchUpDeadline).
  bool wait_caught_up(const std::string& group) {
    return idem::test::eventually([&] { return caught_up(group); }, kCatchUpDeadline, 500ms);
  }

  /// SIGTERM, then expects the graceful stop: a stats line, "stopped", exit status 0.
  /// Returns the stats.
  std::map<std::string, std::uint64_t> stop_gracefully(ChildProcess& child) {
    child.kill(SIGTERM);
    auto stats = idem::test::read_stats(child, 60s);
    std::vector<std::string> seen;
    EXPECT_TRUE(idem::test::expect_line(child, "stopped", 30s, &seen)) << "no graceful stop";
    EXPECT_EQ(child.wait(30s), 0) << "a stopped consumer must exit 0";
    return stats;
  }

  /// Clean consumers, one per group, run concurrently until every group committed
  /// everything; then each stops gracefully. Returns each one's final stats.
  std::vector<std::map<std::string, std::uint64_t>> drain(const std::vector<std::string>& groups) {
    std::vector<ChildProcess> children;
    for (const auto& g : groups) children.push_back(start(args(g)));
    for (const auto& g : groups)
      EXPECT_TRUE(wait_caught_up(g)) << "group " << g << " did not catch up";
    std::vector<std::map<std::string, std::uint64_t>> stats;
    for (auto& c : children) stats.push_back(stop_gracefully(c));
    return stats;
  }
  std::map<std::string, std::uint64_t> drain(const std::string& group) {
    return drain(std::vector<std::string>{group}).front();
  }

  ::testing::AssertionResult invariant(const std::string& group) const {
    return idem::test::exactly_once_invariant(bootstrap(), db_url_, topic_, kPartitions, group,
                                              workload_, malformed_);
  }

  /// Consumers of one group started one after another, each killing itself with SIGKILL
  /// at `point` with probability `p` per hook call; the next one takes over from the
  /// committed offsets. Ends after `target` crashes, or when the group caught up (the
  /// consumer then running is stopped gracefully). step() never blocks for long, so
  /// several loops (several groups) run concurrently: the mock cluster's rebalance
  /// delays, which dominate, then overlap.
  class CrashLoop {
   public:
    CrashLoop(ConsumerFaultBase& world, std::string group, std::string point, double p, int target)
        : world_(world),
          group_(std::move(group)),
          point_(std::move(point)),
          p_(p),
          target_(target) {}

    /// Advances the loop; returns true once it is finished.
    bool step() {
      if (done_) return true;
      const auto now = std::chrono::steady_clock::now();
      if (!child_) {
        if (crashes_ >= target_) return done_ = true;
        ConsumerArgs a = world_.args(group_);
        a.crash_point = point_;
        a.crash_probability = p_;
        a.seed = world_.seed_ + static_cast<std::uint64_t>(spawned_++) * 7919 +
                 std::hash<std::string>{}(point_);
        child_.emplace(world_.start(a));
        child_deadline_ = now + kChildLifeDeadline;
        return false;
      }
      if (const auto status = child_->wait_for(0ms)) {
        EXPECT_EQ(*status, -SIGKILL)
            << group_ << ": consumer " << spawned_ << " ended without crashing";
        bool at_point = false;
        while (auto line = child_->read_line(5s)) {
          if (line->starts_with("crash " + point_ + " ")) {
            at_point = true;
            log_.push_back(*line);
          }
        }
        EXPECT_TRUE(at_point) << group_ << ": consumer " << spawned_ << " died, but not at "
                              << point_;
        ++crashes_;
        child_.reset();
        return false;
      }
      if (now > child_deadline_) {
        ADD_FAILURE() << group_ << ": a consumer crashing at " << point_ << " neither crashed nor "
                      << "finished in " << kChildLifeDeadline.count() << " s";
        child_.reset();
        return done_ = true;
      }
      if (now >= next_progress_check_) {  // a broker round trip: not on every step
        next_progress_check_ = now + 2s;
        if (world_.caught_up(group_)) {
          ++finished_;
          const auto stats = world_.stop_gracefully(*child_);
          log_.push_back(fmt::format("finished: {} delivered, {} transactions",
                                     stats.empty() ? 0 : stats.at("delivered"),
                                     stats.empty() ? 0 : stats.at("transactions")));
          child_.reset();
          return done_ = true;
        }
      }
      return false;
    }

    [[nodiscard]] int crashes() const { return crashes_; }
    [[nodiscard]] int finished() const { return finished_; }
    [[nodiscard]] const std::string& group() const { return group_; }
    [[nodiscard]] const std::string& point() const { return point_; }
    [[nodiscard]] const std::vector<std::string>& log() const { return log_; }

   private:
    ConsumerFaultBase& world_;
    std::string group_;
    std::string point_;
    double p_;
    int target_;
    std::optional<ChildProcess> child_;
    std::chrono::steady_clock::time_point child_deadline_{};
    std::chrono::steady_clock::time_point next_progress_check_{};
    std::vector<std::string> log_;  // the crash lines
    int spawned_ = 0;
    int crashes_ = 0;
    int finished_ = 0;
    bool done_ = false;
  };

  /// Steps every loop until all are finished (bounded by each loop's per-child deadline).
  static bool run_all(std::vector<CrashLoop>& loops, std::chrono::seconds deadline) {
    return idem::test::eventually(
        [&] {
          bool all = true;
          for (auto& l : loops) all = l.step() && all;
          return all;
        },
        deadline, 100ms);
  }

  /// One CrashLoop per point, each with a group of its own, run at once until all are
  /// done; each must have crashed kMinCrashes times. Returns the loops (groups, logs).
  std::vector<CrashLoop> crash_loops(std::initializer_list<CrashPoint> points) {
    std::vector<CrashLoop> loops;
    for (const CrashPoint& point : points) {
      loops.emplace_back(*this, unique_name(std::string("billing-") + point.name), point.name,
                         point.probability, kTargetCrashes);
    }
    EXPECT_TRUE(run_all(loops, 600s));
    for (const auto& l : loops) {
      EXPECT_GE(l.crashes(), kMinCrashes)
          << "too few crashes at " << l.point() << " to prove anything (the run finished first)";
    }
    return loops;
  }

  std::string db_url_;
  std::unique_ptr<DevBrokerProcess> broker_;
  std::string topic_;
  std::size_t pipeline_depth_ = 0;  // 0: the child's default (IDEM_CONSUMER_PIPELINE_DEPTH)
  std::uint64_t seed_ = 0;
  Workload workload_;
  MalformedLocations malformed_;
  std::vector<std::int64_t> end_;
};

// ---------------------------------------------------------------------------------------------
// 1 + 2: duplicates, malformed messages of every kind, and SIGKILL at a crash point many times.
// ---------------------------------------------------------------------------------------------

class ConsumerCrash : public ConsumerFaultBase, public ::testing::WithParamInterface<Db> {};

// One group per crash point, all three on the same topic and store at once (so this is
// also "several groups on one topic, with crashes"): the crash loops run concurrently.
TEST_P(ConsumerCrash, EveryValidEventHasExactlyOneEffectAcrossRepeatedKills) {
  start_world(GetParam(), kMessages);
  if (IsSkipped() || HasFatalFailure()) return;
  SCOPED_TRACE(fmt::format("seed {}", seed_));
  produce_all();
  ASSERT_EQ(malformed_.size(), workload_.malformed);

  const std::vector<CrashLoop> loops =
      crash_loops({kAfterDbCommit, kAfterHandler, kBeforeDbCommit});
  ASSERT_FALSE(HasFailure());
  std::vector<std::string> groups;
  for (const auto& l : loops) {
    groups.push_back(l.group());
    std::printf("[ crashes  ] %s: %d SIGKILLs at %s (%s)\n", db_name(GetParam()).c_str(),
                l.crashes(), l.point().c_str(),
                fmt::format("{}", fmt::join(l.log(), "; ")).c_str());
  }
  drain(groups);
  for (const auto& g : groups) EXPECT_TRUE(invariant(g));
}

INSTANTIATE_TEST_SUITE_P(Kill, ConsumerCrash, ::testing::Values(Db::Sqlite, Db::Postgres),
                         [](const ::testing::TestParamInfo<Db>& param_info) {
                           return db_name(param_info.param);
                         });

// ---------------------------------------------------------------------------------------------
// 3, 4, 5: rebalance after a SIGKILL, offset reset, two groups.
// ---------------------------------------------------------------------------------------------

class ConsumerScenario : public ConsumerFaultBase, public ::testing::WithParamInterface<Db> {};

TEST_P(ConsumerScenario, SurvivorTakesOverThePartitionsOfAKilledGroupMember) {
  start_world(GetParam(), kMessages);
  if (IsSkipped() || HasFatalFailure()) return;
  SCOPED_TRACE(fmt::format("seed {}", seed_));
  const std::string group = unique_name("billing");

  ChildProcess a = start(args(group));
  ChildProcess b = start(args(group));
  // Trickle the records in until both members have processed a batch: then both own
  // partitions (range assignment, 4 each) and the kill is mid-run.
  idem::test::KafkaTestProducer producer(bootstrap());
  bool a_working = false;
  bool b_working = false;
  std::size_t sent = 0;
  const std::size_t chunk = 100;
  const std::size_t trickle_limit = workload_.records.size() * 6 / 10;
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  while (!(a_working && b_working) && sent < trickle_limit &&
         std::chrono::steady_clock::now() < deadline) {
    for (std::size_t i = 0; i < chunk && sent < workload_.records.size(); ++i)
      producer.send(workload_.records[sent++]);
    producer.flush(30s);
    // The waits for a line pace the trickle; they synchronise nothing.
    if (auto line = a.read_line(100ms); line && *line == "first-batch") a_working = true;
    if (auto line = b.read_line(100ms); line && *line == "first-batch") b_working = true;
  }
  ASSERT_TRUE(a_working && b_working)
      << "both members never processed a batch within " << sent << " records";
  b.kill(SIGKILL);
  ASSERT_EQ(b.wait(30s), -SIGKILL);
  for (; sent < workload_.records.size(); ++sent) producer.send(workload_.records[sent]);
  producer.flush(60s);
  locate();

  // The survivor gets the dead member's partitions after session.timeout.ms and resumes
  // at its last commits; everything gets committed.
  ASSERT_TRUE(wait_caught_up(group))
      << "the survivor did not finish the killed member's partitions";
  ASSERT_EQ(a.wait_for(0ms), std::nullopt) << "the survivor died";
  const auto stats = stop_gracefully(a);
  EXPECT_GT(stats.at("processed"), 0u);
  EXPECT_TRUE(invariant(group));
}

TEST_P(ConsumerScenario, OffsetResetToEarliestAppliesNoEffectTwice) {
  start_world(GetParam(), kMessages);
  if (IsSkipped() || HasFatalFailure()) return;
  SCOPED_TRACE(fmt::format("seed {}", seed_));
  produce_all();
  const std::string group = unique_name("billing");
  drain(group);
  ASSERT_TRUE(invariant(group));
  const std::int64_t effects = idem::test::effect_rows(db_url_, group);
  ASSERT_EQ(effects, static_cast<std::int64_t>(workload_.valid_ids.size()));

  // (i) A NEW group with auto.offset.reset=earliest, run by the CLI itself (`idem consume`):
  // it applies every event once for itself and adds nothing to the first group.
  const std::string fresh_group = unique_name("audit");
  {
    ChildProcess cli = ChildProcess::spawn(
        IDEM_CLI_PATH,
        idem::test::with_mock_group({"consume", "--brokers", bootstrap(), "--topic", topic_,
                                     "--group", fresh_group, "--db", db_url_, "--batch",
                                     std::to_string(kBatch), "--auto-offset-reset", "earliest"}));
    std::vector<std::string> seen;
    ASSERT_TRUE(idem::test::expect_line(cli, fmt::format("consuming {} as {}", topic_, fresh_group),
                                        30s, &seen));
    ASSERT_TRUE(wait_caught_up(fresh_group));
    cli.kill(SIGTERM);
    EXPECT_EQ(cli.wait(60s), 0);
  }
  EXPECT_TRUE(invariant(fresh_group));
  EXPECT_EQ(idem::test::effect_rows(db_url_, group), effects) << "the first group got new effects";
  EXPECT_TRUE(invariant(group));

  // (ii) The SAME group, its committed offsets taken back to the beginning with Kafka's
  // own means only: the store's offsets win, so nothing is read again, and the consumer
  // reports by how much the two disagreed (and commits the store's to Kafka again).
  const std::string how = idem::test::rewind_group(bootstrap(), group, topic_, kPartitions);
  RecordProperty("rewind", how);
  for (const auto o : idem::test::committed_offsets(bootstrap(), group, topic_, kPartitions))
    ASSERT_LE(o, 0) << "rewind (" << how << ") left offsets " << o;
  const auto kept = drain(group);
  ASSERT_FALSE(kept.empty());
  EXPECT_EQ(kept.at("delivered"), 0u) << "a reset made in Kafka alone was followed";
  EXPECT_EQ(kept.at("offset_disagreements"), static_cast<std::uint64_t>(kPartitions));
  EXPECT_EQ(kept.at("offset_records_not_read_again"), workload_.records.size())
      << "the reset was not reported by how much";

  // (iii) The same reset in both places (Kafka's committed offsets and the store's, as
  // `idem offsets reset` does): everything is delivered again and every record is a
  // duplicate.
  {
    auto store = idem::open_store(db_url_);
    std::map<std::int32_t, std::int64_t> zero;
    for (int p = 0; p < kPartitions; ++p) zero[p] = 0;
    idem::reset_group_offsets(*store, bootstrap(), group, topic_, zero, 60s,
                              idem::test::mock_group_properties());
  }
  const auto stats = drain(group);
  ASSERT_FALSE(stats.empty());
  EXPECT_GE(stats.at("delivered"), workload_.records.size()) << "the topic was not re-consumed";
  EXPECT_EQ(stats.at("processed"), 0u) << "a re-consumed event had a new effect";
  EXPECT_EQ(idem::test::effect_rows(db_url_, group), effects);
  EXPECT_TRUE(invariant(group));
}

TEST_P(ConsumerScenario, TwoGroupsEachApplyEveryEventOnce) {
  start_world(GetParam(), kMessages);
  if (IsSkipped() || HasFatalFailure()) return;
  SCOPED_TRACE(fmt::format("seed {}", seed_));
  produce_all();
  // Two groups at the same time, one store: the dedup rows are per group (PRIMARY KEY
  // (event_id, consumer_group)), so neither group's marks hide an event from the other.
  // (ConsumerCrash runs three groups on one topic with crashes in each.)
  const std::string billing = unique_name("billing");
  const std::string analytics = unique_name("analytics");
  const auto stats = drain({billing, analytics});
  for (const auto& s : stats) {
    ASSERT_FALSE(s.empty());
    EXPECT_EQ(s.at("processed"), workload_.valid_ids.size());
  }
  EXPECT_TRUE(invariant(billing));
  EXPECT_TRUE(invariant(analytics));

  // The check itself is not vacuous: one extra effect row makes it fail.
  {
    auto store = idem::open_store(db_url_);
    auto tx = store->begin();
    tx->execute(
        "INSERT INTO effect_log(consumer_group, event_id, topic, kafka_partition, "
        "kafka_offset) VALUES ($1, $2, $3, 0, 0)",
        analytics, *idem::Uuid::parse(*workload_.valid_ids.begin()), topic_);
    tx->commit();
  }
  EXPECT_FALSE(invariant(analytics)) << "the invariant check missed a double effect";
}

INSTANTIATE_TEST_SUITE_P(Backends, ConsumerScenario, ::testing::Values(Db::Sqlite, Db::Postgres),
                         [](const ::testing::TestParamInfo<Db>& param_info) {
                           return db_name(param_info.param);
                         });

// ---------------------------------------------------------------------------------------------
// pipeline_depth 2: duplicates whose copies straddle two batches, with SIGKILLs
// between the two batches' commits.
// ---------------------------------------------------------------------------------------------

class StraddlingDuplicates : public ConsumerFaultBase, public ::testing::WithParamInterface<Db> {};

// With depth 2, batch N's AfterDbCommit runs when N is finished, which is after N+1 was
// prepared (its marks written, its transaction open) and before N+1 commits: a kill there
// is a kill between the two commits. A kill at BeforeDbCommit leaves N+1 prepared while N
// may be committed or not. Every 4th event is sent again 60 to 140 records later, so with
// batches of 100 its copies mostly sit in consecutive batches (on PostgreSQL the second
// mark waits on the first's row lock: integration/commit_overlap_test.cpp shows it).
TEST_P(StraddlingDuplicates, ResolveAsDuplicatesAcrossKillsBetweenTheTwoCommits) {
  start_world(GetParam(), 1'000);  // its workload is replaced below
  if (IsSkipped() || HasFatalFailure()) return;
  SCOPED_TRACE(fmt::format("seed {}", seed_));
  workload_ = idem::test::straddling_workload(topic_, 8'000, 4, 60, 140, seed_);
  produce_all();
  pipeline_depth_ = 2;

  // 8,000 records are at most 80 batches of kBatch, so the crash odds per batch are higher
  // than kMessages' scenarios use: at 0.1, five processes outlived all 80 batches in about
  // 1 run of 11 (CI saw it: 4 crashes, then caught up); at 0.3, in about 1 of 40 million.
  constexpr CrashPoint kAfterDbCommitOften{kAfterDbCommit.name, 0.3};
  constexpr CrashPoint kBeforeDbCommitOften{kBeforeDbCommit.name, 0.3};
  const std::vector<CrashLoop> loops = crash_loops({kAfterDbCommitOften, kBeforeDbCommitOften});
  ASSERT_FALSE(HasFailure());
  std::vector<std::string> groups;
  for (const auto& l : loops) groups.push_back(l.group());
  drain(groups);
  for (const auto& g : groups) EXPECT_TRUE(invariant(g));
}

INSTANTIATE_TEST_SUITE_P(Depth2, StraddlingDuplicates, ::testing::Values(Db::Sqlite, Db::Postgres),
                         [](const ::testing::TestParamInfo<Db>& param_info) {
                           return db_name(param_info.param);
                         });

// ---------------------------------------------------------------------------------------------
// 6: the database goes away for a while (PostgreSQL, a private cluster of this test).
// ---------------------------------------------------------------------------------------------

class ConsumerDbOutage : public ConsumerFaultBase {};

TEST_F(ConsumerDbOutage, PostgresStopAndStartLosesNothingAndTheConsumerSurvives) {
  const auto bin = idem::test::PrivatePostgres::find_bin_dir();
  if (!bin) {
    idem::test::skip_or_fail("no PostgreSQL server binaries (initdb, pg_ctl) are installed");
    return;
  }
  // Its own cluster: stopping the shared IDEM_TEST_PG_DSN server would break the tests
  // that run concurrently with this one.
  idem::test::PrivatePostgres pg(*bin);
  open_world(pg.url(), kOutageMessages);
  SCOPED_TRACE(fmt::format("seed {}", seed_));
  const std::size_t half = workload_.records.size() / 2;
  idem::test::produce(bootstrap(), workload_, 0, half);
  end_ = idem::test::end_offsets(bootstrap(), topic_, kPartitions);

  const std::string group = unique_name("billing");
  ChildProcess consumer = start(args(group));
  const pid_t pid = consumer.pid();
  ASSERT_TRUE(wait_caught_up(group)) << "the first half was not processed";

  pg.stop("fast");
  idem::test::produce(bootstrap(), workload_, half, workload_.records.size());
  locate();
  // The consumer now fails its transactions and pauses its partitions with backoff; it
  // must neither die nor commit offsets past what the database holds.
  std::uint64_t retries = 0;
  ASSERT_TRUE(idem::test::eventually(
      [&] {
        consumer.write_line("stats");
        const auto stats = idem::test::read_stats(consumer, 10s);
        retries = stats.empty() ? 0 : stats.at("retries");
        return retries >= 5;  // backoff 50 ms doubling to 1 s: the outage lasts seconds
      },
      60s, 500ms))
      << "the consumer never retried while the database was down";
  ASSERT_EQ(consumer.wait_for(0ms), std::nullopt)
      << "the consumer died while the database was down";
  EXPECT_FALSE(caught_up(group)) << "offsets were committed while the database was down";

  pg.start();
  ASSERT_TRUE(wait_caught_up(group)) << "the consumer did not resume after the database came back";
  ASSERT_EQ(consumer.wait_for(0ms), std::nullopt);
  EXPECT_EQ(consumer.pid(), pid);
  const auto stats = stop_gracefully(consumer);
  EXPECT_GE(stats.at("retries"), retries);
  EXPECT_TRUE(invariant(group));
}

}  // namespace consumer_fault_test
