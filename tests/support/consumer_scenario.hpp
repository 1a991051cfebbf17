#pragma once
// Building blocks of the multi-process exactly-once proofs (tests/fault/consumer_fault_test.cpp):
// an `idem dev-broker` process, a workload of valid, duplicate and malformed order events,
// consumer processes (tests/children/consumer_child.cpp), the invariant check, a helper
// that rewinds a group's committed offsets, and a private PostgreSQL cluster that a test
// may stop and start.
//
// Every wait takes a deadline; synchronisation is by condition, never by sleeping.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "support/kafka_test_producer.hpp"
#include "support/process.hpp"

namespace idem::test {

/// `idem dev-broker` as a child process. The destructor SIGKILLs it (ChildProcess).
class DevBrokerProcess {
 public:
  /// Starts `cli_path dev-broker` and reads its bootstrap line. Throws std::runtime_error
  /// when the broker does not answer within 30 s.
  explicit DevBrokerProcess(const std::string& cli_path);
  [[nodiscard]] const std::string& bootstrap() const noexcept { return bootstrap_; }
  /// Sends one control command and returns its answer line ("ok" or "error: ...").
  std::string control(const std::string& command);
  /// create-topic; throws std::runtime_error unless the broker answered "ok".
  void create_topic(const std::string& name, int partitions);
  /// SIGTERM, then waits; returns the exit status (0 for a clean stop).
  int stop();

 private:
  ChildProcess process_;
  std::string bootstrap_;
};

/// One malformed message and the DLQ error class it must get.
struct MalformedMessage {
  std::string payload;
  std::string expected_class;  // "validation.invalid_json", ...
};

/// What a producer sends: distinct valid events, resends of some of them (same event_id,
/// same payload, new offset) and malformed messages of every kind, shuffled.
struct Workload {
  std::vector<TestRecord> records;  // in send order
  std::set<std::string> valid_ids;  // canonical event_id text of each distinct event
  std::map<std::string, std::string> malformed_class_by_payload;
  std::size_t duplicates = 0;
  std::size_t malformed = 0;
};

/// Builds a workload of `total` messages on `topic`: `duplicate_ratio` of them resends,
/// `malformed_ratio_per_kind` of them malformed per kind (6 kinds: bad JSON, a missing
/// field, a numeric amount, a missing event_id, a non-v7 event_id, an unknown event_type),
/// the rest distinct valid events. Deterministic for a given `seed` except for the
/// event ids (UUIDv7, generated now).
[[nodiscard]] Workload make_workload(const std::string& topic, std::size_t total,
                                     double duplicate_ratio, double malformed_ratio_per_kind,
                                     std::uint64_t seed);

/// `total` messages on `topic`, no malformed ones: distinct valid events in order, every
/// `every`-th one sent again between `near` and `far` records later (for a consumer
/// taking batches of about that many records, the two copies mostly land in consecutive
/// batches: pipeline_depth 2 prepares the second while the first commits).
[[nodiscard]] Workload straddling_workload(const std::string& topic, std::size_t total,
                                           std::size_t every, std::size_t near, std::size_t far,
                                           std::uint64_t seed);

/// Sends records [begin, end) of `w` and waits for the acknowledgements.
void produce(const std::string& bootstrap, const Workload& w, std::size_t begin, std::size_t end);

/// Where each malformed message landed: (partition, offset) -> expected error class.
using MalformedLocations = std::map<std::pair<std::int32_t, std::int64_t>, std::string>;

/// Reads `topic` back (all `partitions`, up to the current end offsets) and locates the
/// malformed messages of `w`. A payload the broker stored twice is located twice.
[[nodiscard]] MalformedLocations locate_malformed(const std::string& bootstrap,
                                                  const std::string& topic, int partitions,
                                                  const Workload& w);

/// Arguments of one consumer_child process.
struct ConsumerArgs {
  std::string brokers;
  std::string topic;
  std::string group;
  std::string db;
  std::string handler = "count";  // consumer_child --handler: count or effect
  std::size_t batch = 100;
  std::string crash_point = "none";  // a to_string(HookPoint) name, or "none"
  double crash_probability = 0.0;
  std::uint64_t seed = 1;
  std::vector<std::string> kafka;  // key=value, after the mock-cluster defaults below
  std::size_t pipeline_depth = 0;  // 0: the child's default (IDEM_CONSUMER_PIPELINE_DEPTH, else 1)
};

/// Starts consumer_child (path `program`) and waits for its "ready" line (30 s). The
/// child gets mock_group_flags() (support/mock_group.hpp) and reconnect.backoff.max.ms=1000
/// before `args.kafka`.
[[nodiscard]] ChildProcess start_consumer(const std::string& program, const ConsumerArgs& args);

/// Parses a child's "stats k=v ..." line into a map; empty if `line` is not one.
[[nodiscard]] std::map<std::string, std::uint64_t> parse_stats(std::string_view line);

/// Reads lines until "stats ..." arrives (at most `timeout`) and parses it.
[[nodiscard]] std::map<std::string, std::uint64_t> read_stats(ChildProcess& child,
                                                              std::chrono::milliseconds timeout);

/// True when `group` has committed every partition of `topic` up to `end`.
[[nodiscard]] bool group_caught_up(const std::string& bootstrap, const std::string& group,
                                   const std::string& topic, const std::vector<std::int64_t>& end);

/// Sets `group`'s committed offsets for every partition of `topic` back to 0 by joining
/// the group (as its only member: call it while no consumer of the group runs) and
/// committing offset 0 for every partition. (The admin API's DeleteConsumerGroupOffsets
/// aborts the process against librdkafka 2.0.2's mock cluster; see the .cpp.) Returns how
/// it was done ("committed-zero"). Throws std::runtime_error on failure (60 s deadline).
std::string rewind_group(const std::string& bootstrap, const std::string& group,
                         const std::string& topic, int partitions);

/// effect_log rows of `group`, per event id (canonical text), read through an idem store.
[[nodiscard]] std::map<std::string, std::int64_t> effects_per_event(const std::string& db_url,
                                                                    const std::string& group);
/// effect_log row count of `group`.
[[nodiscard]] std::int64_t effect_rows(const std::string& db_url, const std::string& group);

/// The invariant every scenario ends with, for `group` after it caught up:
///  - every valid event of `w` has exactly one effect, and there is no effect of an id
///    that was never sent;
///  - every malformed message is in `topic`.dlq with its error class, original
///    partition and offset and this group's name; no valid record is there;
///  - nothing lost: the group committed every partition up to its end offset.
/// Reports every violation (up to a few examples of each) through the returned result.
[[nodiscard]] ::testing::AssertionResult exactly_once_invariant(
    const std::string& bootstrap, const std::string& db_url, const std::string& topic,
    int partitions, const std::string& group, const Workload& w,
    const MalformedLocations& malformed);

/// A PostgreSQL cluster of the test's own (initdb in a temporary directory), so that it
/// can be stopped and started without disturbing the shared IDEM_TEST_PG_DSN server.
/// Runs the server as IDEM_TEST_PG_RUN_AS / `postgres` through runuser when we are root.
class PrivatePostgres {
 public:
  /// Server binaries: IDEM_TEST_PG_BIN, else the newest /usr/lib/postgresql/*/bin.
  /// nullopt when none is installed.
  [[nodiscard]] static std::optional<std::string> find_bin_dir();

  /// initdb + start on a free loopback port + CREATE DATABASE idem_test.
  /// Throws std::runtime_error with the server log on failure.
  explicit PrivatePostgres(const std::string& bin_dir);
  /// Stops the server (immediate) and removes the directory.
  ~PrivatePostgres();
  PrivatePostgres(const PrivatePostgres&) = delete;
  PrivatePostgres& operator=(const PrivatePostgres&) = delete;

  [[nodiscard]] std::string url() const;  // postgresql://postgres@127.0.0.1:PORT/idem_test
  /// pg_ctl stop -m `mode` (fast, immediate) -w; throws on failure.
  void stop(const std::string& mode = "fast");
  /// pg_ctl start -w on the same port; throws on failure.
  void start();
  /// SIGSTOPs the postmaster and every backend: connections stay open and new ones are
  /// accepted by the kernel, but nothing answers (a server that hangs, or a network that
  /// silently drops everything). thaw() (and the destructor) SIGCONT them.
  void freeze();
  void thaw();

 private:
  int run_pg_ctl(const std::string& args) const;

  std::string bin_;
  std::filesystem::path dir_;
  std::string run_as_;
  int port_ = 0;
  bool running_ = false;
  bool frozen_ = false;
};

}  // namespace idem::test
