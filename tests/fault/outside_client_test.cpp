// A client nobody on this project wrote
// produces, and idem's consumer survives random SIGKILLs while consuming it.
//
// The outside client is python3 with confluent-kafka (tests/fault/outside_producer.py).
// It sends to a topic of a real `idem dev-broker` process: valid order.confirmed.v1
// events, resends of some of them (same event_id, new offset), one record of every
// malformed kind the consumer must dead-letter (EVT-4), a 2 MiB and a 999,900-byte
// record with valid fields, and a record with too many headers; then it tells us where
// each record landed. Consumers (tests/children/consumer_child.cpp, the count handler
// writing effect_log rows) are SIGKILLed several times at random points (by themselves
// at a randomly chosen HookPoint, and once by this test from outside) and restarted,
// until everything is consumed. Then, from the outside:
//  - every valid event has exactly one effect_log row, and no other id has one;
//  - every malformed record is in `<topic>.dlq` with its error class (read with
//    idem::read_dead_letters); the big ones as truncated letters carrying
//    idem.original.size and the SHA-256 the producer computed;
//  - `idem dlq list` (the CLI, its output parsed) lists no original offset twice, and
//    DeadLetterRecord::copies accounts for every letter a kill made the consumer send
//    again;
//  - the group committed every partition to its end (nothing lost).
//
// python3 (the first on PATH, or IDEM_TEST_PYTHON, that can import confluent_kafka) is
// found at run time: without one the test skips, and fails under CI=true.
// Waits are conditions with deadlines, never sleeps.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "idem/dlq.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "support/cli_run.hpp"
#include "support/consumer_scenario.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/outside_python.hpp"
#include "support/process.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace outside_client_test {

using namespace std::chrono_literals;
using idem::test::ChildProcess;
using idem::test::ConsumerArgs;
using idem::test::DevBrokerProcess;
using idem::test::unique_name;

constexpr int kPartitions = 4;
constexpr int kValidEvents = 300;
constexpr int kResends = 30;
constexpr std::size_t kBatch = 10;  // small batches: many hook calls, kills mid-run
constexpr int kCrashes = 5;         // consumer processes that die before the clean one
constexpr auto kChildLifeDeadline = 120s;
constexpr auto kCatchUpDeadline = 180s;

enum class Db { Sqlite, Postgres };
std::string db_name(Db db) {
  return db == Db::Sqlite ? "sqlite" : "postgres";
}
void PrintTo(Db db, std::ostream* os) {
  *os << db_name(db);
}

using Location = std::pair<std::int32_t, std::int64_t>;  // original partition, offset

/// One record the outside producer sent, as it reported it.
struct SentRecord {
  std::string kind;            // "valid", "duplicate", or a malformed kind
  std::string expected_class;  // empty for valid events and resends
  std::string event_id;        // may be empty
  Location at;
  std::size_t size = 0;
  std::string sha256;
};

/// Skips (fails under CI=true) without the outside client. Check IsSkipped() after it.
void require_outside_client(std::string& python, std::filesystem::path& script) {
  const auto py = idem::test::find_python_with_confluent_kafka();
  if (!py) {
    idem::test::skip_or_fail(
        "no python3 that can import confluent_kafka (apt-get install python3-confluent-kafka)");
    return;
  }
  const auto s = idem::test::fault_test_script("outside_producer.py", "IDEM_TEST_OUTSIDE_PRODUCER");
  if (!s) {
    idem::test::skip_or_fail(
        "tests/fault/outside_producer.py not found (set IDEM_TEST_OUTSIDE_PRODUCER)");
    return;
  }
  python = *py;
  script = *s;
}

/// Runs the outside producer to completion and parses its report.
std::vector<SentRecord> run_outside_producer(const std::string& python,
                                             const std::filesystem::path& script,
                                             const std::string& bootstrap, const std::string& topic,
                                             std::uint64_t seed) {
  ChildProcess producer = ChildProcess::spawn(
      python, {script.string(), "--bootstrap", bootstrap, "--topic", topic, "--partitions",
               std::to_string(kPartitions), "--seed", std::to_string(seed % 1'000'000'007ULL),
               "--valid", std::to_string(kValidEvents), "--duplicates", std::to_string(kResends)});
  std::vector<SentRecord> sent;
  std::optional<std::size_t> done;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    const auto line = producer.read_line(5s);
    if (!line) {
      if (producer.stdout_closed()) break;
      continue;
    }
    const auto j = nlohmann::json::parse(*line);
    if (j.contains("done")) {
      done = j.at("done").get<std::size_t>();
      break;
    }
    SentRecord r;
    r.kind = j.at("kind").get<std::string>();
    if (!j.at("expected_class").is_null())
      r.expected_class = j.at("expected_class").get<std::string>();
    if (!j.at("event_id").is_null()) r.event_id = j.at("event_id").get<std::string>();
    r.at = {j.at("partition").get<std::int32_t>(), j.at("offset").get<std::int64_t>()};
    r.size = j.at("size").get<std::size_t>();
    r.sha256 = j.at("sha256").get<std::string>();
    sent.push_back(std::move(r));
  }
  const int status = producer.wait(60s);
  if (status != 0 || !done || *done != sent.size()) {
    throw std::runtime_error(
        fmt::format("outside_producer.py: exit status {}, reported {} of {} records", status,
                    sent.size(), done ? std::to_string(*done) : "?"));
  }
  return sent;
}

/// The original (partition, offset) of every line of `idem dlq list` output, in order.
std::vector<Location> listed_origins(const std::string& output, const std::string& topic,
                                     std::size_t& lines) {
  // "<p>/<o>  age=..  reason=..  ...  from=<topic>[<p>]@<o>  attempts=.. <message>"
  const std::regex from(R"(  from=(\S+)\[(-?\d+)\]@(-?\d+)  )");
  std::vector<Location> out;
  lines = 0;
  std::stringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, from)) continue;
    ++lines;
    if (m[1].str() != topic) continue;
    out.emplace_back(std::stoi(m[2].str()), std::stoll(m[3].str()));
  }
  return out;
}

class OutsideClient : public ::testing::TestWithParam<Db> {
 protected:
  void SetUp() override {
    IDEM_REQUIRE_CLI();
    require_outside_client(python_, script_);
    if (IsSkipped() || HasFatalFailure()) return;
    db_url_ = GetParam() == Db::Sqlite ? idem::test::SqliteBackend::fresh_url()
                                       : idem::test::PostgresBackend::fresh_url();
    if (IsSkipped() || HasFatalFailure()) return;
    idem::migrate_reference_system(*idem::open_store(db_url_));
    broker_ = std::make_unique<DevBrokerProcess>(IDEM_CLI_PATH);
    topic_ = unique_name("outside-orders");
    broker_->create_topic(topic_, kPartitions);
    broker_->create_topic(dlq(), 1);
    group_ = unique_name("billing-outside");
    seed_ = std::random_device{}();
    RecordProperty("seed", std::to_string(seed_));
  }

  [[nodiscard]] std::string dlq() const { return topic_ + ".dlq"; }
  [[nodiscard]] const std::string& bootstrap() const { return broker_->bootstrap(); }

  ChildProcess start(const std::string& crash_point, double probability, std::uint64_t seed) {
    ConsumerArgs a;
    a.brokers = bootstrap();
    a.topic = topic_;
    a.group = group_;
    a.db = db_url_;
    a.batch = kBatch;
    a.crash_point = crash_point;
    a.crash_probability = probability;
    a.seed = seed;
    return idem::test::start_consumer(idem::test::child_program("consumer_child"), a);
  }

  /// Every valid event has an effect and every malformed record has a letter: the
  /// work is done (whether its offsets are committed is checked separately).
  bool all_consumed() {
    try {
      if (idem::test::effects_per_event(db_url_, group_).size() < valid_ids_.size()) return false;
      return malformed_missing_from_dlq() == 0;
    } catch (const std::exception&) {
      return false;  // the database or the broker is busy: ask again later
    }
  }

  /// Every letter of the DLQ as written (not collapsed), read without a group.
  std::vector<idem::KafkaRecord> raw_letters() {
    const auto end = idem::test::end_offsets(bootstrap(), dlq(), 1);
    return idem::test::read_topic(bootstrap(), dlq(), 1, static_cast<std::size_t>(end[0]), 60s);
  }

  std::size_t malformed_missing_from_dlq() {
    std::set<Location> lettered;
    for (const auto& r : raw_letters()) {
      if (r.header("idem.original.topic") != topic_) continue;
      lettered.insert({std::stoi(r.header("idem.original.partition").value_or("-1")),
                       std::stoll(r.header("idem.original.offset").value_or("-1"))});
    }
    std::size_t missing = 0;
    for (const auto& [at, record] : malformed_) missing += lettered.contains(at) ? 0 : 1;
    return missing;
  }

  /// Waits for a child to die by SIGKILL and returns its crash line ("killed from
  /// outside" when the test killed it).
  std::string expect_killed(ChildProcess& child, bool self_inflicted) {
    const auto status = child.wait_for(kChildLifeDeadline);
    EXPECT_EQ(status, std::optional<int>(-SIGKILL))
        << "a consumer meant to be killed ended otherwise";
    if (!status) child.kill(SIGKILL);
    std::string crash_line = self_inflicted ? "" : "killed from outside";
    while (auto line = child.read_line(5s)) {
      if (line->starts_with("crash ")) crash_line = *line;
    }
    EXPECT_FALSE(crash_line.empty()) << "a consumer died, but not at its crash point";
    return crash_line;
  }

  std::string python_;
  std::filesystem::path script_;
  std::string db_url_;
  std::unique_ptr<DevBrokerProcess> broker_;
  std::string topic_;
  std::string group_;
  std::uint64_t seed_ = 0;
  std::set<std::string> valid_ids_;
  std::map<Location, SentRecord> malformed_;
  std::set<Location> valid_locations_;
};

TEST_P(OutsideClient, PythonProducedEventsHaveOneEffectEachAndEveryBadRecordOneListedLetter) {
  if (IsSkipped() || HasFatalFailure()) return;
  SCOPED_TRACE(fmt::format("seed {}", seed_));

  // 1. The outside client produces everything.
  const std::vector<SentRecord> sent =
      run_outside_producer(python_, script_, bootstrap(), topic_, seed_);
  std::set<std::string> kinds;
  for (const SentRecord& r : sent) {
    if (r.expected_class.empty()) {
      valid_ids_.insert(r.event_id);
      valid_locations_.insert(r.at);
    } else {
      malformed_.emplace(r.at, r);
      kinds.insert(r.kind);
    }
  }
  ASSERT_EQ(valid_ids_.size(), static_cast<std::size_t>(kValidEvents));
  ASSERT_TRUE(kinds.contains("too_large_2mib") && kinds.contains("too_large_999900"));
  // The broker holds exactly what the producer says it acknowledged (the mock cluster can
  // write a batch twice when a response is lost; the locations would then be wrong).
  std::int64_t stored = 0;
  const auto end = idem::test::end_offsets(bootstrap(), topic_, kPartitions);
  for (const auto o : end) stored += o;
  ASSERT_EQ(stored, static_cast<std::int64_t>(sent.size()));

  // 2. Consumers killed at random points, each taking over from the committed offsets.
  //    The first one's first offset commit is refused by the broker (an injected
  //    OffsetCommit error, 12 = OFFSET_METADATA_TOO_LARGE, which librdkafka does not
  //    retry) and it dies right after handing that commit over: its first batch, which
  //    dead-lettered the record at each partition's head, is delivered again, so the
  //    DLQ surely holds letters twice for the collapse to be checked on.
  std::mt19937_64 rng(seed_);
  const std::vector<std::pair<std::string, double>> points = {{"after_db_commit", 0.15},
                                                              {"before_db_commit", 0.15},
                                                              {"after_handler", 0.02},
                                                              {"batch_polled", 0.15},
                                                              {"after_offset_commit", 0.15}};
  std::vector<std::string> crash_log;
  bool finished_early = false;
  for (int k = 0; k < kCrashes && !finished_early; ++k) {
    const std::uint64_t child_seed = seed_ + static_cast<std::uint64_t>(k) * 7919;
    if (k == 0) {
      ASSERT_EQ(broker_->control("request-errors 8 12"), "ok");
      ChildProcess child = start("after_offset_commit", 1.0, child_seed);
      crash_log.push_back(expect_killed(child, true));
    } else if (k == 2) {
      // Killed from outside, at a random amount of progress.
      ChildProcess child = start("none", 0.0, child_seed);
      const std::int64_t before = idem::test::effect_rows(db_url_, group_);
      const std::int64_t target = std::min<std::int64_t>(
          before + std::uniform_int_distribution<std::int64_t>(5, 60)(rng), kValidEvents);
      const bool progressed =
          idem::test::eventually([&] { return idem::test::effect_rows(db_url_, group_) >= target; },
                                 kChildLifeDeadline, 50ms);
      ASSERT_TRUE(progressed) << "the consumer made no progress";
      child.kill(SIGKILL);
      crash_log.push_back(expect_killed(child, false));
    } else {
      const auto& [point, p] =
          points[std::uniform_int_distribution<std::size_t>(0, points.size() - 1)(rng)];
      ChildProcess child = start(point, p, child_seed);
      // It dies at its point, or finishes the work first (then it is stopped).
      const bool ended =
          idem::test::eventually([&] { return child.wait_for(0ms).has_value() || all_consumed(); },
                                 kChildLifeDeadline, 200ms);
      ASSERT_TRUE(ended) << "a consumer crashing at " << point << " neither crashed nor finished";
      if (const auto status = child.wait_for(0ms)) {
        EXPECT_EQ(*status, -SIGKILL);
        std::string crash_line;
        while (auto line = child.read_line(5s)) {
          if (line->starts_with("crash ")) crash_line = *line;
        }
        EXPECT_TRUE(crash_line.starts_with("crash " + point)) << "died, but not at " << point;
        crash_log.push_back(crash_line);
      } else {
        finished_early = true;
        child.kill(SIGTERM);
        EXPECT_EQ(child.wait(60s), 0);
      }
    }
  }
  ASSERT_FALSE(HasFailure());
  std::printf("[ crashes  ] %s: %s\n", db_name(GetParam()).c_str(),
              fmt::format("{}", fmt::join(crash_log, "; ")).c_str());

  // 3. A clean consumer finishes what is left, then stops gracefully (its last commit
  //    is synchronous): after that the group must have committed everything.
  const auto caught_up = [&] {
    return idem::test::group_caught_up(bootstrap(), group_, topic_, end);
  };
  {
    ChildProcess child = start("none", 0.0, seed_ + 1);
    ASSERT_TRUE(idem::test::eventually([&] { return all_consumed(); }, kCatchUpDeadline, 500ms))
        << "the last consumer did not finish the topic";
    // Resends at a partition's tail add no effect or letter, so the work can be done
    // before this consumer read them: let it reach the end before stopping it. (Not
    // asserted here: if its only commit met the injected error, which happens when the
    // first consumer died before sending its commit, the graceful stop commits.)
    static_cast<void>(idem::test::eventually(caught_up, 30s, 200ms));
    child.kill(SIGTERM);
    ASSERT_EQ(child.wait(60s), 0) << "a stopped consumer must exit 0";
  }
  ASSERT_TRUE(idem::test::eventually(caught_up, 60s, 500ms))
      << "nothing lost: the group must have committed every partition to its end";

  // 4a. Exactly one effect per valid event; none for anything else.
  const auto effects = idem::test::effects_per_event(db_url_, group_);
  for (const auto& id : valid_ids_) {
    const auto it = effects.find(id);
    EXPECT_TRUE(it != effects.end() && it->second == 1)
        << "event " << id << ": " << (it == effects.end() ? 0 : it->second) << " effects";
  }
  for (const auto& [id, n] : effects) EXPECT_TRUE(valid_ids_.contains(id)) << "effect for " << id;

  // 4b. Every malformed record dead-lettered with its class, once after collapsing, and
  //     `copies` equal to the letters actually written for it.
  std::map<Location, std::size_t> written;
  for (const auto& r : raw_letters()) {
    if (r.header("idem.original.topic") != topic_) continue;
    const Location at{std::stoi(r.header("idem.original.partition").value_or("-1")),
                      std::stoll(r.header("idem.original.offset").value_or("-1"))};
    EXPECT_FALSE(valid_locations_.contains(at)) << "a valid event was dead-lettered: " << at.second;
    ++written[at];
  }
  const idem::DlqConnection connection{bootstrap(), {}, 30s};
  const auto letters = idem::read_dead_letters(connection, dlq());
  std::map<Location, const idem::DeadLetterRecord*> by_origin;
  std::size_t collapsed = 0;
  for (const auto& l : letters) {
    ASSERT_TRUE(l.original_partition && l.original_offset);
    const Location at{*l.original_partition, *l.original_offset};
    EXPECT_TRUE(by_origin.emplace(at, &l).second)
        << "read_dead_letters returned [" << at.first << "]@" << at.second << " twice";
    EXPECT_EQ(l.copies, written[at]) << "copies of [" << at.first << "]@" << at.second;
    collapsed += l.copies - 1;
  }
  for (const auto& [at, sent_record] : malformed_) {
    SCOPED_TRACE(fmt::format("{} at [{}]@{}", sent_record.kind, at.first, at.second));
    const auto it = by_origin.find(at);
    ASSERT_NE(it, by_origin.end()) << "not in the DLQ";
    const idem::DeadLetterRecord& l = *it->second;
    EXPECT_EQ(l.error_class, sent_record.expected_class) << l.error_message;
    EXPECT_EQ(l.consumer_group, group_);
    if (sent_record.size > 512 * 1024) {  // kDeadLetterMaxPayload: cut to a 4 KiB prefix
      EXPECT_EQ(l.header("idem.payload.truncated"), std::optional<std::string_view>("true"));
      EXPECT_EQ(l.header("idem.original.size"),
                std::optional<std::string_view>(std::to_string(sent_record.size)));
      const auto sha = l.header("idem.original.sha256");
      ASSERT_TRUE(sha.has_value());
      EXPECT_TRUE(std::regex_match(std::string(*sha), std::regex("[0-9a-f]{64}"))) << *sha;
      EXPECT_EQ(*sha, sent_record.sha256) << "the digest is not the one of the original payload";
      EXPECT_EQ(l.payload.size(), 4096u);
    } else {
      EXPECT_EQ(l.payload.size(), sent_record.size) << "a small letter must carry its record whole";
      EXPECT_FALSE(l.header("idem.payload.truncated").has_value());
    }
  }
  EXPECT_EQ(by_origin.size(), malformed_.size()) << "the DLQ holds letters for other records";
  std::size_t duplicates_written = 0;
  for (const auto& [at, n] : written) duplicates_written += n - 1;
  EXPECT_GE(duplicates_written, 1u)
      << "no kill left a letter written twice (the injected commit failure should have)";
  EXPECT_EQ(collapsed, duplicates_written);
  std::printf("[ dlq      ] %s: %zu malformed records, %zu letters written, %zu collapsed copies\n",
              db_name(GetParam()).c_str(), malformed_.size(),
              malformed_.size() + duplicates_written, collapsed);

  // 4c. The CLI lists each original offset once.
  const auto listed = idem::test::run_to_completion(
      IDEM_CLI_PATH, {"dlq", "list", "--brokers", bootstrap(), "--topic", dlq()}, {}, 120s);
  ASSERT_EQ(listed.status, 0) << listed.output;
  std::size_t lines = 0;
  const std::vector<Location> origins = listed_origins(listed.output, topic_, lines);
  EXPECT_EQ(lines, malformed_.size()) << listed.output;
  std::set<Location> seen;
  for (const auto& at : origins) {
    EXPECT_TRUE(seen.insert(at).second)
        << "idem dlq list shows [" << at.first << "]@" << at.second << " twice";
  }
  for (const auto& [at, record] : malformed_) {
    EXPECT_TRUE(seen.contains(at)) << "idem dlq list misses " << record.kind;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, OutsideClient, ::testing::Values(Db::Sqlite, Db::Postgres),
                         [](const ::testing::TestParamInfo<Db>& param_info) {
                           return db_name(param_info.param);
                         });

}  // namespace outside_client_test
