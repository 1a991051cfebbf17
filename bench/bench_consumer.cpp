// End-to-end consumer throughput: N order.confirmed.v1 events,
// pre-produced into an in-process DevBroker topic, consumed by
//   (a) a plain librdkafka consumer: poll, parse_order_confirmed, async commit every
//       `batch` messages (the baseline);
//   (b) idem::Consumer with a SQLite file store (WAL, synchronous=FULL: the default);
//   (c) idem::Consumer with PostgreSQL (skipped without a DSN);
//   (d) a raw loop issuing the SQL statements idem issues for the same batches
//       (BEGIN; batch mark; per new event the handler's SQL; COMMIT) through sqlite3 /
//       libpq directly, with no Kafka: the database's own limit. On libpq it pipelines
//       what idem pipelines, and more: BEGIN with the mark, then every handler INSERT
//       and the COMMIT behind one sync. On libpq the count handler's INSERTs go two ways:
//       one statement per event ("raw libpq"), and merged into multi-row INSERTs cut
//       into the chunks idem sends ("raw libpq multi-row");
//   (p) at batch 1 on PostgreSQL: pgbench (one client, prepared statements, a custom
//       script) running one transaction per event with the same statements: the batch
//       mark of one id and, for `count`, the effect_log INSERT (the yardstick of the merged
//       statements);
// each with batch sizes 1, 100 and 1000 and two handlers: `dedup` (no SQL of its own,
// so it measures idem's overhead) and `count` (one INSERT into effect_log per event).
// Two more handlers are sinks declared in a configuration file (idem::sinks,
// docs/configured-sinks.md), for idem rows only: `configured` does what `count` does (the
// same INSERT, its values read from the event and the record by the route), and
// `balance` is the account-balance sink (UPDATE account SET balance = balance + $amount,
// one movement row per event); the table gives each idem row's ratio to the compiled
// `count` row of the same backend, batch and depth ("vs count").
//
//   idem_bench_consumer [--events N] [--batch1-events N] [--batches 1,100,1000]
//                       [--partitions P] [--dup-ratio 0.1] [--only a,b,c,d]
//                       [--handlers dedup,count] [--sqlite-dir DIR] [--repeat N]
//                       [--backends sqlite,postgres] [--depths 1,2]
//                       [--offsets-in-store on,off]
//   --depths: the ConsumerConfig::pipeline_depth of every idem row ("idem postgres depth 2":
//   the next batch prepared while one commits).
//   --offsets-in-store: ConsumerConfig::offsets_in_store of every idem row ("offsets off":
//   Kafka's committed offsets only), so both run in the same rounds.
//   IDEM_BENCH_PG_DSN / IDEM_TEST_PG_DSN enables PostgreSQL (fresh database per run). The
//   server is switched to fsync=on, full_page_writes=on first (postgres_durable.hpp:
//   scripts/with-postgres.sh starts it with both off), and the settings in force, the
//   build type and the load average are printed with the table.
//
// Every configuration runs --repeat times (default 3), the rounds interleaved (round 1 of
// every configuration, then round 2, ...) so that load changing on a shared machine hits
// every row alike, each round starting at the next handler; the table shows the best
// round of each and the load when it started. On a shared machine rounds of about a
// second differed by up to 35% (100,000 events at batch 1000): compare rows of 300,000
// events or more. For idem rows the table also gives the CPU time of the consumer's run()
// thread per event (the lowest round): its own work, without the waits for fsync, the
// broker or a CPU other processes hold (it still moves with the load: up to 60% between
// rounds of one row on the shared machine, through shared caches and the hypervisor).
//
// A plain main() with its own timing: one run is one pass over a fixed number of
// events, which Google Benchmark's iteration model does not fit. Timing starts when the
// first batch arrives (group join and produce are excluded) and stops when the run's
// last transaction and offset commit are done. RSS (VmRSS) is sampled at 25/50/75/100%
// of each run; VmHWM is reset before each run (/proc/self/clear_refs) so it is per run.
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "idem/consumer.hpp"
#include "idem/devtools/dev_broker.hpp"
#include "idem/reference/count_handler.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/schema.hpp"
#include "idem/sinks/configured_sinks.hpp"
#include "idem/sinks/sink_config.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"

#include "bench_settings.hpp"
#include "bench_support.hpp"

namespace {

using idem::bench::Memory;
using idem::bench::read_memory;

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// ---- options ------------------------------------------------------------------

struct Options {
  std::size_t events = 1'000'000;
  std::size_t batch1_events = 20'000;
  std::vector<std::size_t> batches{1, 100, 1000};
  int partitions = 0;  // 0: computed from the event count and the mock's retention
  double dup_ratio = 0.10;
  std::string only = "a,b,c,d,p";
  std::string handlers = "dedup,count";
  std::string sqlite_dir;
  std::string pg_dsn;
  int repeat = 3;
  std::string backends = "sqlite,postgres";
  std::vector<std::size_t> depths{1, 2};
  std::vector<bool> offsets_in_store{true};
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(
      stderr,
      "%s\nusage: idem_bench_consumer [--events N] [--batch1-events N] "
      "[--batches 1,100,1000] [--partitions P] [--dup-ratio R] [--only a,b,c,d] "
      "[--handlers dedup,count] [--sqlite-dir DIR] [--repeat N] [--backends sqlite,postgres] "
      "[--depths 1,2] [--offsets-in-store on,off]\n",
      why);
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= s.size()) {
    const std::size_t comma = s.find(',', at);
    const std::size_t end = comma == std::string::npos ? s.size() : comma;
    if (end > at) out.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

bool listed(const std::string& list, std::string_view item) {
  for (const auto& s : split(list)) {
    if (s == item) return true;
  }
  return false;
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + arg).c_str());
      return argv[++i];
    };
    if (arg == "--events") {
      o.events = std::stoull(value());
    } else if (arg == "--batch1-events") {
      o.batch1_events = std::stoull(value());
    } else if (arg == "--batches") {
      o.batches.clear();
      for (const auto& b : split(value())) o.batches.push_back(std::stoull(b));
    } else if (arg == "--partitions") {
      o.partitions = std::stoi(value());
    } else if (arg == "--dup-ratio") {
      o.dup_ratio = std::stod(value());
    } else if (arg == "--only") {
      o.only = value();
    } else if (arg == "--handlers") {
      o.handlers = value();
    } else if (arg == "--sqlite-dir") {
      o.sqlite_dir = value();
    } else if (arg == "--repeat") {
      o.repeat = std::max(1, std::stoi(value()));
    } else if (arg == "--backends") {
      o.backends = value();
    } else if (arg == "--offsets-in-store") {
      o.offsets_in_store.clear();
      for (const auto& v : split(value())) {
        if (v != "on" && v != "off") usage("--offsets-in-store takes on and/or off");
        o.offsets_in_store.push_back(v == "on");
      }
    } else if (arg == "--depths") {
      o.depths.clear();
      for (const auto& d : split(value())) o.depths.push_back(std::stoull(d));
    } else if (arg == "--help" || arg == "-h") {
      usage("");
    } else {
      usage(("unknown argument " + arg).c_str());
    }
  }
  if (o.events == 0 || o.batches.empty()) usage("--events and --batches must be non-empty");
  const char* dsn = std::getenv("IDEM_BENCH_PG_DSN");
  if (dsn == nullptr || *dsn == '\0') dsn = std::getenv("IDEM_TEST_PG_DSN");
  if (dsn != nullptr && listed(o.backends, "postgres")) o.pg_dsn = dsn;
  return o;
}

// ---- memory -------------------------------------------------------------------

void reset_hwm() {
  // "5" resets the peak RSS (Linux >= 4.0); harmless if not permitted.
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
}

/// RSS samples at 25/50/75/100% of a run.
class RssProbe {
 public:
  explicit RssProbe(std::size_t target) : target_(target) { reset_hwm(); }
  void at(std::size_t done) {
    while (next_ < 4 && done * 4 >= target_ * (next_ + 1))
      samples_[next_++] = read_memory().rss_mib;
  }
  [[nodiscard]] const std::array<double, 4>& samples() const { return samples_; }

 private:
  std::size_t target_;
  std::size_t next_ = 0;
  std::array<double, 4> samples_{};
};

/// CPU time the calling thread has used (user and system).
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// ---- results ------------------------------------------------------------------

struct Result {
  std::string config;   // "a plain", "b idem sqlite", ...
  std::string backend;  // "", "sqlite", "postgres"
  std::string handler;  // "-", "dedup", "count"
  bool idem = false;
  bool raw = false;
  std::size_t batch = 0;
  std::size_t events = 0;
  double seconds = 0;
  std::array<double, 4> rss{};
  double hwm = 0;
  std::string note;
  double load = -1;            // 1-minute load average when the run started
  std::vector<double> rounds;  // every round's events/s (the table keeps the best)
  // CPU time of the consumer's run() thread per event (idem rows; 0 otherwise): its own
  // work, without the waits (fsync, the broker, the CPU held by other processes).
  double cpu_us_per_event = 0;
  double min_cpu_us_per_event = 0;  // the lowest of every round (the table's)
  [[nodiscard]] double rate() const {
    return seconds > 0 ? static_cast<double>(events) / seconds : 0;
  }
};

std::vector<Result> g_results;  // the best round of each configuration, in first-run order

/// `items` in the order round `round` runs them: each round starts at the next, so that
/// whatever one run leaves behind (a PostgreSQL server still writing, dirty pages of
/// another file to flush) does not always fall on the same next configuration.
template <typename T>
std::vector<T> in_turn(const std::vector<T>& items, int round) {
  std::vector<T> out;
  for (std::size_t k = 0; k < items.size(); ++k) {
    out.push_back(items[(k + static_cast<std::size_t>(round)) % items.size()]);
  }
  return out;
}

/// Keeps `r` if it beats the configuration's best round so far.
void keep_best(Result r) {
  for (Result& best : g_results) {
    if (best.config != r.config || best.handler != r.handler || best.batch != r.batch) continue;
    std::vector<double> rounds = std::move(best.rounds);
    rounds.push_back(r.rate());
    const double cpu = r.cpu_us_per_event > 0 && r.cpu_us_per_event < best.min_cpu_us_per_event
                           ? r.cpu_us_per_event
                           : best.min_cpu_us_per_event;
    if (r.rate() > best.rate()) best = std::move(r);
    best.rounds = std::move(rounds);
    best.min_cpu_us_per_event = cpu;
    return;
  }
  r.rounds = {r.rate()};
  r.min_cpu_us_per_event = r.cpu_us_per_event;
  g_results.push_back(std::move(r));
}

void print_result(const Result& r) {
  std::printf(
      "  %-24s %-6s %5zu  %9zu ev  %7.2f s  %10.0f ev/s  load %.2f  rss %.0f/%.0f/%.0f/%.0f MiB  "
      "hwm %.0f MiB  %s\n",
      r.config.c_str(), r.handler.c_str(), r.batch, r.events, r.seconds, r.rate(), r.load, r.rss[0],
      r.rss[1], r.rss[2], r.rss[3], r.hwm, r.note.c_str());
  std::fflush(stdout);
}

// ---- the events -----------------------------------------------------------------

struct Event {  // what the raw loop needs to replay the topic
  idem::Uuid id;
  std::int32_t partition = 0;
  std::int64_t offset = 0;
};

struct Origin {  // enough to rebuild an original's payload for its duplicate
  idem::Uuid id;
  std::int64_t order_id;
  std::int64_t occurred_us;
  std::int64_t cents;
};

idem::OrderConfirmed make_event(const Origin& o) {
  idem::OrderConfirmed e;
  e.event_id = o.id;
  e.occurred_at = idem::Timestamp(std::chrono::microseconds(o.occurred_us));
  e.order_id = o.order_id;
  e.customer_id = 1000 + o.order_id % 9000;
  e.total_amount = idem::Amount::from_hundredths(o.cents);
  return e;
}

rd_kafka_t* make_client(rd_kafka_type_t type,
                        const std::vector<std::pair<std::string, std::string>>& props) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[512];
  for (const auto& [k, v] : props) {
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      throw std::runtime_error(fmt::format("{}={}: {}", k, v, err));
    }
  }
  rd_kafka_t* rk = rd_kafka_new(type, conf, err, sizeof err);
  if (rk == nullptr) {
    rd_kafka_conf_destroy(conf);
    throw std::runtime_error(err);
  }
  return rk;
}

std::atomic<std::size_t> g_delivery_failures{0};

void on_delivery(rd_kafka_t*, const rd_kafka_message_t* m, void*) {
  if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) g_delivery_failures.fetch_add(1);
}

/// Produces `n` events (a fraction of them re-sent with an earlier event's id and
/// payload, like a producer resend) into `topic`, partition = order_id % partitions,
/// and returns them in produce order with their offsets.
std::vector<Event> produce(const std::string& bootstrap, const std::string& topic, int partitions,
                           std::size_t n, double dup_ratio, std::size_t& bytes) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[512];
  for (const auto& [k, v] :
       std::vector<std::pair<const char*, const char*>>{{"bootstrap.servers", bootstrap.c_str()},
                                                        {"enable.idempotence", "true"},
                                                        {"linger.ms", "20"},
                                                        {"batch.num.messages", "10000"},
                                                        {"queue.buffering.max.messages", "500000"},
                                                        {"log_level", "3"}}) {
    if (rd_kafka_conf_set(conf, k, v, err, sizeof err) != RD_KAFKA_CONF_OK)
      throw std::runtime_error(err);
  }
  rd_kafka_conf_set_dr_msg_cb(conf, &on_delivery);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  if (rk == nullptr) throw std::runtime_error(err);

  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> coin(0, 1);
  std::vector<Origin> origins;
  origins.reserve(n);
  std::vector<Event> events;
  events.reserve(n);
  std::vector<std::int64_t> next_offset(static_cast<std::size_t>(partitions), 0);
  idem::UuidV7Generator gen;
  const auto now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  bytes = 0;
  for (std::size_t i = 0; i < n; ++i) {
    Origin o{};
    if (!origins.empty() && coin(rng) < dup_ratio) {
      o = origins[rng() % origins.size()];  // a resend: same id, same payload, new offset
    } else {
      o = {gen.next(), static_cast<std::int64_t>(1'000'000 + i),
           now_us + static_cast<std::int64_t>(i),
           static_cast<std::int64_t>(100 + rng() % 1'000'000)};
      origins.push_back(o);
    }
    const std::string payload = idem::to_json(make_event(o));
    const std::string key = std::to_string(o.order_id);
    const std::string id = o.id.to_string();
    const auto partition = static_cast<std::int32_t>(o.order_id % partitions);
    bytes += payload.size() + key.size() + id.size() + 8;
    for (;;) {
      // librdkafka's RD_KAFKA_V_* macros use C casts.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
      const rd_kafka_resp_err_t e = rd_kafka_producev(
          rk, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(partition),
          RD_KAFKA_V_KEY(key.data(), key.size()),
          RD_KAFKA_V_VALUE(const_cast<char*>(payload.data()), payload.size()),
          RD_KAFKA_V_HEADER("event_id", id.data(), static_cast<ssize_t>(id.size())),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
#pragma GCC diagnostic pop
      if (e == RD_KAFKA_RESP_ERR_NO_ERROR) break;
      if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) throw std::runtime_error(rd_kafka_err2str(e));
      rd_kafka_poll(rk, 10);
    }
    rd_kafka_poll(rk, 0);
    events.push_back({o.id, partition, next_offset[static_cast<std::size_t>(partition)]++});
  }
  if (rd_kafka_flush(rk, 120'000) != RD_KAFKA_RESP_ERR_NO_ERROR ||
      g_delivery_failures.load() != 0) {
    throw std::runtime_error(
        fmt::format("produce: {} delivery failures", g_delivery_failures.load()));
  }
  // Retention check: the mock drops the oldest data beyond ~5 MiB per partition.
  for (int p = 0; p < partitions; ++p) {
    std::int64_t low = 0;
    std::int64_t high = 0;
    if (rd_kafka_query_watermark_offsets(rk, topic.c_str(), p, &low, &high, 10'000) !=
        RD_KAFKA_RESP_ERR_NO_ERROR) {
      throw std::runtime_error("watermarks");
    }
    if (low != 0 || high != next_offset[static_cast<std::size_t>(p)]) {
      throw std::runtime_error(fmt::format(
          "partition {} holds [{}, {}) but {} records were produced: retention dropped data; "
          "use more partitions",
          p, low, high, next_offset[static_cast<std::size_t>(p)]));
    }
  }
  rd_kafka_destroy(rk);
  return events;
}

std::string unique(std::string_view prefix) {
  static int n = 0;
  return fmt::format("{}-{}-{}", prefix, getpid(), ++n);
}

const std::vector<std::pair<std::string, std::string>> kGroupProps = {
    {"session.timeout.ms", "6000"}, {"heartbeat.interval.ms", "1000"}, {"log_level", "3"}};

// ---- (a) plain librdkafka consumer ------------------------------------------------

Result run_plain(const std::string& bootstrap, const std::string& topic, std::size_t batch,
                 std::size_t target) {
  std::vector<std::pair<std::string, std::string>> props = {{"bootstrap.servers", bootstrap},
                                                            {"group.id", unique("plain")},
                                                            {"auto.offset.reset", "earliest"},
                                                            {"enable.auto.commit", "false"}};
  props.insert(props.end(), kGroupProps.begin(), kGroupProps.end());
  rd_kafka_t* rk = make_client(RD_KAFKA_CONSUMER, props);
  rd_kafka_poll_set_consumer(rk);
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(list, topic.c_str(), RD_KAFKA_PARTITION_UA);
  rd_kafka_subscribe(rk, list);
  rd_kafka_topic_partition_list_destroy(list);

  RssProbe probe(target);
  std::size_t n = 0;
  std::size_t valid = 0;
  std::size_t since_commit = 0;
  Clock::time_point t0;
  while (n < target) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
    if (m == nullptr) continue;
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      rd_kafka_message_destroy(m);
      continue;
    }
    if (n == 0) t0 = Clock::now();
    const auto parsed =
        idem::parse_order_confirmed(std::string_view(static_cast<const char*>(m->payload), m->len));
    valid += parsed.ok() ? 1 : 0;
    rd_kafka_message_destroy(m);  // stores the offset (enable.auto.offset.store=true)
    ++n;
    if (++since_commit == batch || n == target) {
      rd_kafka_commit(rk, nullptr, 1);  // async, like idem's per-batch commit
      since_commit = 0;
    }
    probe.at(n);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const Memory mem = read_memory();
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  Result r;
  r.config = "a plain librdkafka";
  r.handler = "parse";
  r.batch = batch;
  r.events = n;
  r.seconds = seconds;
  r.rss = probe.samples();
  r.hwm = mem.hwm_mib;
  if (valid != n) r.note = fmt::format("{} invalid!", n - valid);
  return r;
}

/// The events in the order a group consumer receives them (untimed). The raw loops
/// replay this order: a consumer batch holds runs of one partition's records, whose ids
/// are spread over the whole produce time, so it touches far more B-tree pages than the
/// same number of events in produce order (measured: raw SQLite at 231k events/s in
/// produce order against ~80k in consumption order, batches of 1000). Replaying produce
/// order would flatter the raw loop.
std::vector<Event> consumption_order(const std::string& bootstrap, const std::string& topic,
                                     std::size_t target) {
  std::vector<std::pair<std::string, std::string>> props = {{"bootstrap.servers", bootstrap},
                                                            {"group.id", unique("order")},
                                                            {"auto.offset.reset", "earliest"},
                                                            {"enable.auto.commit", "false"}};
  props.insert(props.end(), kGroupProps.begin(), kGroupProps.end());
  rd_kafka_t* rk = make_client(RD_KAFKA_CONSUMER, props);
  rd_kafka_poll_set_consumer(rk);
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(list, topic.c_str(), RD_KAFKA_PARTITION_UA);
  rd_kafka_subscribe(rk, list);
  rd_kafka_topic_partition_list_destroy(list);
  std::vector<Event> out;
  out.reserve(target);
  while (out.size() < target) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
    if (m == nullptr) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      const auto parsed = idem::parse_order_confirmed(
          std::string_view(static_cast<const char*>(m->payload), m->len));
      if (!parsed.ok()) throw std::runtime_error("invalid event in the topic");
      out.push_back({parsed.value().event_id, m->partition, m->offset});
    }
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return out;
}

// ---- (b)/(c) idem::Consumer ---------------------------------------------------------

// The sinks of the `configured` and `balance` handlers, declared as a user would, checked
// against the store (the balance sink's tables created first: one account per customer).
std::unique_ptr<idem::sinks::ConfiguredSinks> configured_sinks(const std::string& handler,
                                                               const std::string& topic,
                                                               idem::Store& store) {
  const bool sqlite = store.backend() == idem::Backend::Sqlite;
  std::string routes =
      fmt::format("[routes.r]\ntopic = \"{}\"\ntype = \"order.confirmed.v1\"\n", topic);
  if (handler == "configured") {
    routes +=
        "sql = \"INSERT INTO effect_log(consumer_group, event_id, topic, kafka_partition, "
        "kafka_offset) VALUES ($consumer_group, $event_id, $kafka_topic, $kafka_partition, "
        "$kafka_offset)\"\n";
  } else {
    auto tx = store.begin();
    tx->execute(sqlite ? "CREATE TABLE IF NOT EXISTS account (id INTEGER PRIMARY KEY, balance "
                         "INTEGER NOT NULL)"
                       : "CREATE TABLE IF NOT EXISTS account (id bigint PRIMARY KEY, balance "
                         "numeric(18,2) NOT NULL)");
    tx->execute(sqlite ? "CREATE TABLE IF NOT EXISTS movement (event_id BLOB NOT NULL, account "
                         "INTEGER NOT NULL, amount INTEGER NOT NULL)"
                       : "CREATE TABLE IF NOT EXISTS movement (event_id uuid NOT NULL, account "
                         "bigint NOT NULL, amount numeric(18,2) NOT NULL)");
    tx->execute(sqlite ? "WITH RECURSIVE n(v) AS (SELECT 1000 UNION ALL SELECT v + 1 FROM n "
                         "WHERE v < 9999) INSERT OR IGNORE INTO account SELECT v, 0 FROM n"
                       : "INSERT INTO account SELECT g, 0 FROM generate_series(1000, 9999) g "
                         "ON CONFLICT DO NOTHING");
    tx->commit();
    routes +=
        "sql = [\"UPDATE account SET balance = balance + $amount WHERE id = $account\",\n"
        "  \"INSERT INTO movement (event_id, account, amount) VALUES ($event_id, $account, "
        "$amount)\"]\n"
        "[routes.r.params]\naccount = { from = \"/customer_id\", type = \"integer\" }\n"
        "amount = { from = \"/total_amount\", type = \"numeric\", precision = 18, scale = 2 }\n";
  }
  const auto path = std::filesystem::temp_directory_path() / fmt::format("{}.toml", unique("sink"));
  std::ofstream(path) << routes;
  auto config = idem::sinks::load_sink_config(path.string(), {});
  std::filesystem::remove(path);
  auto sinks = std::make_unique<idem::sinks::ConfiguredSinks>(std::move(*config), store.backend());
  sinks->check(store);
  return sinks;
}

Result run_idem(const std::string& bootstrap, const std::string& topic, const std::string& url,
                const std::string& backend, const std::string& handler, std::size_t batch,
                std::size_t target, std::size_t depth, bool offsets_in_store) {
  {
    auto s = idem::open_store(url);
    idem::migrate_reference_system(*s);
  }
  idem::ConsumerConfig c;
  c.bootstrap_servers = bootstrap;
  c.group_id = unique("idem");
  c.topics = {topic};
  c.batch_size = batch;
  c.batch_window = 50ms;
  c.kafka = kGroupProps;
  c.pipeline_depth = depth;
  c.offsets_in_store = offsets_in_store;

  RssProbe probe(target);
  idem::Consumer* self = nullptr;
  Clock::time_point t0;
  Clock::time_point t1;
  bool started = false;
  bool done = false;
  std::size_t log_lines = 0;
  idem::ConsumerHooks hooks;
  double cpu0 = 0;
  double cpu1 = 0;
  hooks.at = [&](idem::HookPoint p) {
    if (p == idem::HookPoint::BatchPolled && !started) {
      started = true;
      t0 = Clock::now();
      cpu0 = thread_cpu_seconds();
    }
    if (p == idem::HookPoint::AfterOffsetCommit && !done) {
      const std::size_t delivered = self->stats().delivered;
      probe.at(delivered);
      if (delivered >= target) {
        t1 = Clock::now();
        cpu1 = thread_cpu_seconds();
        done = true;
        self->stop();
      }
    }
  };
  hooks.log = [&](std::string_view line) {
    if (++log_lines <= 5)
      std::fprintf(stderr, "    log: %.*s\n", static_cast<int>(line.size()), line.data());
  };
  idem::Consumer consumer(c, idem::open_store(url), hooks);
  self = &consumer;
  std::unique_ptr<idem::sinks::ConfiguredSinks> sinks;
  if (handler == "configured" || handler == "balance") {
    auto store = idem::open_store(url);
    sinks = configured_sinks(handler, topic, *store);
    sinks->install(consumer);
  } else if (handler == "count") {
    consumer.on<idem::OrderConfirmed>(topic, idem::count_handler<idem::OrderConfirmed>());
  } else {
    consumer.on<idem::OrderConfirmed>(
        topic, [](const idem::OrderConfirmed&, const idem::RecordInfo&, idem::Transaction&) {
          return idem::Outcome::Done;
        });
  }
  consumer.run();
  const Memory mem = read_memory();
  const idem::ConsumerStats s = consumer.stats();
  Result r;
  r.config = depth == 1 ? "idem " + backend : fmt::format("idem {} depth {}", backend, depth);
  if (!offsets_in_store) r.config += " offsets off";
  r.backend = backend;
  r.handler = handler;
  r.idem = true;
  r.batch = batch;
  r.events = s.delivered;
  r.seconds = std::chrono::duration<double>(t1 - t0).count();
  r.rss = probe.samples();
  r.hwm = mem.hwm_mib;
  r.cpu_us_per_event =
      1e6 * (cpu1 - cpu0) / static_cast<double>(std::max<std::size_t>(1, s.delivered));
  r.note = fmt::format("new {} dup {} tx {} cpu {:.1f} us/ev", s.processed, s.duplicates,
                       s.transactions, r.cpu_us_per_event);
  if (s.processed + s.duplicates != s.delivered || s.retries != 0 || s.dead_lettered != 0) {
    r.note += fmt::format(" MISMATCH retries {} dlq {}", s.retries, s.dead_lettered);
  }
  if (handler == "count" || handler == "configured") {
    auto check = idem::open_store(url);
    const std::int64_t effects = idem::count_effects(*check, c.group_id);
    if (effects != static_cast<std::int64_t>(s.processed)) {
      r.note += fmt::format(" EFFECTS {} != processed", effects);
    }
  }
  return r;
}

// ---- (d) raw loops --------------------------------------------------------------------
// The statements idem issues for one batch when its optimistic pass commits (every batch
// here): BEGIN; the batch mark; for each new event (in partition order) the handler's
// SQL, with no savepoint; COMMIT.
// Batches are cut from the order a consumer receives the events (consumption_order())
// and then grouped by partition, as idem does.

constexpr const char* kGroup = "bench-raw";

/// The batch in idem's processing order (stable by partition) and each event's first-
/// occurrence position in that order.
void order_batch(std::span<const Event> in, std::vector<Event>& out) {
  out.assign(in.begin(), in.end());
  std::stable_sort(out.begin(), out.end(),
                   [](const Event& a, const Event& b) { return a.partition < b.partition; });
}

void sq_check(sqlite3* db, int rc, const char* what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
    throw std::runtime_error(fmt::format("{}: {}", what, sqlite3_errmsg(db)));
  }
}

void sq_exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err != nullptr ? err : "?";
    sqlite3_free(err);
    throw std::runtime_error(sql + ": " + msg);
  }
}

Result run_raw_sqlite(const std::string& path, const std::string& topic, const std::string& handler,
                      std::size_t batch, std::span<const Event> events) {
  { idem::migrate_reference_system(*idem::open_store("sqlite://" + path)); }
  sqlite3* db = nullptr;
  sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  sq_exec(db,
          "PRAGMA foreign_keys=ON; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; "
          "PRAGMA temp_store=MEMORY; PRAGMA busy_timeout=5000");
  sqlite3_stmt* begin = nullptr;
  sqlite3_stmt* commit = nullptr;
  sqlite3_stmt* effect = nullptr;
  sqlite3_prepare_v3(db, "BEGIN IMMEDIATE", -1, SQLITE_PREPARE_PERSISTENT, &begin, nullptr);
  sqlite3_prepare_v3(db, "COMMIT", -1, SQLITE_PREPARE_PERSISTENT, &commit, nullptr);
  sqlite3_prepare_v3(db,
                     "INSERT INTO effect_log(consumer_group, event_id, topic, kafka_partition, "
                     "kafka_offset) VALUES (?1, ?2, ?3, ?4, ?5)",
                     -1, SQLITE_PREPARE_PERSISTENT, &effect, nullptr);
  std::map<std::size_t, sqlite3_stmt*> marks;  // by row count, like idem's cache
  const auto mark_stmt = [&](std::size_t rows) {
    auto& st = marks[rows];
    if (st == nullptr) {
      std::string sql = "INSERT INTO processed_event(event_id, consumer_group) VALUES (?2,?1)";
      for (std::size_t i = 1; i < rows; ++i) sql += ",(?,?1)";
      sql += " ON CONFLICT DO NOTHING RETURNING event_id";
      sq_check(db, sqlite3_prepare_v3(db, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &st, nullptr),
               "prepare mark");
    }
    return st;
  };

  RssProbe probe(events.size());
  std::vector<Event> ordered;
  std::vector<const Event*> unique_sorted;
  std::unordered_map<std::string, bool> fresh;  // raw-bytes key -> new
  std::size_t done = 0;
  std::size_t fresh_total = 0;
  const auto t0 = Clock::now();
  for (std::size_t at = 0; at < events.size(); at += batch) {
    order_batch(events.subspan(at, std::min(batch, events.size() - at)), ordered);
    // Distinct ids sorted (what idem binds), then the RETURNING rows say which are new.
    unique_sorted.clear();
    for (const auto& e : ordered) unique_sorted.push_back(&e);
    std::stable_sort(unique_sorted.begin(), unique_sorted.end(),
                     [](const Event* a, const Event* b) { return a->id < b->id; });
    unique_sorted.erase(std::unique(unique_sorted.begin(), unique_sorted.end(),
                                    [](const Event* a, const Event* b) { return a->id == b->id; }),
                        unique_sorted.end());
    sq_check(db, sqlite3_step(begin), "begin");
    sqlite3_reset(begin);
    // Same statement sizes as idem: rounded up, extra rows repeat the last id.
    const std::size_t rows = unique_sorted.size();
    std::size_t padded = 1;
    while (padded < rows && padded < 32) padded *= 2;
    if (rows > 32) padded = (rows + 31) / 32 * 32;
    padded = std::min<std::size_t>(padded, 1000);
    sqlite3_stmt* mark = mark_stmt(padded);
    sqlite3_bind_text(mark, 1, kGroup, -1, SQLITE_STATIC);
    for (std::size_t i = 0; i < padded; ++i) {
      sqlite3_bind_blob(mark, static_cast<int>(i + 2),
                        unique_sorted[std::min(i, rows - 1)]->id.bytes().data(), 16, SQLITE_STATIC);
    }
    fresh.clear();
    int rc;
    while ((rc = sqlite3_step(mark)) == SQLITE_ROW) {
      fresh.emplace(std::string(static_cast<const char*>(sqlite3_column_blob(mark, 0)), 16), true);
    }
    sq_check(db, rc, "mark");
    sqlite3_reset(mark);
    for (const auto& e : ordered) {
      auto it = fresh.find(std::string(reinterpret_cast<const char*>(e.id.bytes().data()), 16));
      if (it == fresh.end() || !it->second) continue;  // duplicate: no handler
      it->second = false;                              // a repeat inside the batch is a duplicate
      ++fresh_total;
      if (handler == "count") {
        sqlite3_bind_text(effect, 1, kGroup, -1, SQLITE_STATIC);
        sqlite3_bind_blob(effect, 2, e.id.bytes().data(), 16, SQLITE_STATIC);
        sqlite3_bind_text(effect, 3, topic.c_str(), -1, SQLITE_STATIC);
        sqlite3_bind_int64(effect, 4, e.partition);
        sqlite3_bind_int64(effect, 5, e.offset);
        sq_check(db, sqlite3_step(effect), "effect");
        sqlite3_reset(effect);
      }
    }
    sq_check(db, sqlite3_step(commit), "commit");
    sqlite3_reset(commit);
    done += ordered.size();
    probe.at(done);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  for (auto& [n, st] : marks) sqlite3_finalize(st);
  sqlite3_finalize(begin);
  sqlite3_finalize(commit);
  sqlite3_finalize(effect);
  sqlite3_close(db);
  Result r;
  r.config = "raw sqlite3";
  r.backend = "sqlite";
  r.handler = handler;
  r.raw = true;
  r.batch = batch;
  r.events = done;
  r.seconds = seconds;
  r.rss = probe.samples();
  r.hwm = read_memory().hwm_mib;
  r.note = fmt::format("new {}", fresh_total);
  return r;
}

struct PgResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, PgResultDeleter>;

PGconn* pg_connect(const std::string& conninfo) {
  PGconn* c = PQconnectdb(conninfo.c_str());
  if (PQstatus(c) != CONNECTION_OK) {
    std::string msg = PQerrorMessage(c);
    PQfinish(c);
    throw std::runtime_error("connect: " + msg);
  }
  return c;
}

PgResult pg_ok(PGconn* c, PGresult* r, std::string_view what) {
  PgResult res(r);
  const auto st = PQresultStatus(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    throw std::runtime_error(fmt::format("{}: {}", what, PQerrorMessage(c)));
  }
  return res;
}

/// A fresh database; returns a URL for it (the DSN with its dbname replaced).
std::string fresh_pg_url(const std::string& dsn) {
  static int n = 0;
  const std::string name = fmt::format("idem_bench_c_{}_{}", getpid(), n++);
  PGconn* c = pg_connect(dsn);
  pg_ok(c, PQexec(c, fmt::format("DROP DATABASE IF EXISTS {}", name).c_str()), "drop");
  pg_ok(c, PQexec(c, fmt::format("CREATE DATABASE {}", name).c_str()), "create");
  PQfinish(c);
  const auto q = dsn.find('?');
  const std::string base = dsn.substr(0, q);
  const auto slash = base.rfind('/');
  return base.substr(0, slash + 1) + name + (q == std::string::npos ? "" : dsn.substr(q));
}

void put_be32(std::string& out, std::uint32_t v) {
  const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
  out.append(b, 4);
}

/// Reads the results of `commands` pipelined commands and the sync that follows them;
/// throws on the first failure. `on_result(i, r)` sees each command's result.
template <class F>
void pg_read_pipeline(PGconn* c, std::size_t commands, F&& on_result) {
  for (std::size_t i = 0; i < commands; ++i) {
    PgResult r(PQgetResult(c));
    const auto st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
      throw std::runtime_error(fmt::format("pipeline command {}: {}", i, PQerrorMessage(c)));
    }
    on_result(i, r.get());
    PgResult end(PQgetResult(c));  // each command's results end with a null
  }
  PgResult sync(PQgetResult(c));
  if (!sync || PQresultStatus(sync.get()) != PGRES_PIPELINE_SYNC)
    throw std::runtime_error("no sync");
}

/// The rows of each multi-row INSERT a run of `rows` is sent as: powers of two, largest
/// first, at most 7,000 parameters each (as src/stores/postgres/pg_insert_merge.cpp cuts
/// them).
std::vector<std::size_t> chunks_of(std::size_t rows, std::size_t params_per_row) {
  std::size_t largest = 1;
  while (largest * 2 * params_per_row <= 7000) largest *= 2;
  std::vector<std::size_t> out;
  while (rows > 0) {
    std::size_t c = largest;
    while (c > rows) c /= 2;
    out.push_back(c);
    rows -= c;
  }
  return out;
}

constexpr const char* kEffectSql =
    "INSERT INTO effect_log(consumer_group, event_id, topic, kafka_partition, kafka_offset) "
    "VALUES ";

/// (p): pgbench with one client for `seconds`, one transaction per event: BEGIN, the
/// batch mark of one id, for `count` the effect_log INSERT, COMMIT. Ids are
/// gen_random_uuid() (v4: random positions in the primary key, where idem's v7 ids
/// append; at these table sizes every page is in the buffer pool either way).
Result run_pgbench(const std::string& url, const std::string& handler, int seconds) {
  { idem::migrate_reference_system(*idem::open_store(url)); }
  const std::filesystem::path script =
      std::filesystem::temp_directory_path() / fmt::format("idem-pgbench-{}.sql", getpid());
  {
    std::ofstream out(script);
    out << "BEGIN;\n"
           "INSERT INTO processed_event (event_id, consumer_group) SELECT "
           "unnest(ARRAY[gen_random_uuid()]), 'pgbench' ON CONFLICT DO NOTHING RETURNING "
           "event_id;\n";
    if (handler == "count") {
      out << "INSERT INTO effect_log(consumer_group, event_id, topic, kafka_partition, "
             "kafka_offset) VALUES ('pgbench', gen_random_uuid(), 'orders', 0, 0);\n";
    }
    out << "COMMIT;\n";
  }
  const char* bin_dir = std::getenv("IDEM_TEST_PG_BIN");
  const std::string pgbench =
      bin_dir != nullptr && std::filesystem::exists(std::filesystem::path(bin_dir) / "pgbench")
          ? (std::filesystem::path(bin_dir) / "pgbench").string()
          : "pgbench";
  const std::string command = fmt::format("{} -n -c 1 -j 1 -M prepared -T {} -f {} '{}' 2>&1",
                                          pgbench, seconds, script.string(), url);
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run " + pgbench);
  std::string output;
  char line[512];
  while (std::fgets(line, sizeof line, pipe) != nullptr) output += line;
  const int status = pclose(pipe);
  std::filesystem::remove(script);
  double tps = 0;
  std::size_t transactions = 0;
  const auto tps_at = output.find("tps = ");
  const auto tx_at = output.find("number of transactions actually processed: ");
  if (status != 0 || tps_at == std::string::npos || tx_at == std::string::npos)
    throw std::runtime_error("pgbench failed: " + output);
  tps = std::stod(output.substr(tps_at + 6));
  transactions = std::stoull(output.substr(tx_at + 44));
  Result r;
  r.config = "pgbench (p)";
  r.backend = "postgres";
  r.handler = handler;
  r.raw = true;
  r.batch = 1;
  r.events = transactions;
  r.seconds = tps > 0 ? static_cast<double>(transactions) / tps : 0;
  r.note = "1 client, -M prepared, one transaction per event";
  return r;
}

Result run_raw_pg(const std::string& url, const std::string& topic, const std::string& handler,
                  std::size_t batch, std::span<const Event> events, bool multi) {
  { idem::migrate_reference_system(*idem::open_store(url)); }
  PGconn* c = pg_connect(url);
  pg_ok(c,
        PQprepare(c, "mark",
                  "INSERT INTO processed_event (event_id, consumer_group) "
                  "SELECT unnest($1::uuid[]), $2 ON CONFLICT DO NOTHING RETURNING event_id",
                  0, nullptr),
        "prepare mark");
  pg_ok(c,
        PQprepare(c, "effect",
                  "INSERT INTO effect_log(consumer_group, event_id, topic, kafka_partition, "
                  "kafka_offset) VALUES ($1, $2, $3, $4, $5)",
                  0, nullptr),
        "prepare effect");
  if (multi) {  // effect_<rows> for every power of two the chunks can take
    for (std::size_t rows = 2; rows * 5 <= 7000; rows *= 2) {
      std::string sql = kEffectSql;
      for (std::size_t k = 0; k < rows; ++k) {
        const std::size_t p = k * 5;
        sql += fmt::format("{}(${}, ${}, ${}, ${}, ${})", k == 0 ? "" : ", ", p + 1, p + 2, p + 3,
                           p + 4, p + 5);
      }
      pg_ok(c, PQprepare(c, fmt::format("effect_{}", rows).c_str(), sql.c_str(), 0, nullptr),
            "prepare multi-row effect");
    }
  }
  // Pipeline mode for the whole run: a batch is two round trips, [BEGIN + mark] (the
  // mark's answer decides which handlers run) and [every INSERT + COMMIT].
  if (PQenterPipelineMode(c) != 1) throw std::runtime_error("pipeline mode");

  RssProbe probe(events.size());
  std::vector<Event> ordered;
  std::vector<const Event*> unique_sorted;
  std::unordered_map<std::string, bool> fresh;
  std::string array;
  std::vector<std::array<std::string, 3>> texts;  // per INSERT: id, partition, offset
  std::vector<const char*> params;                // multi: the rows' parameters, in order
  std::size_t done = 0;
  std::size_t fresh_total = 0;
  const auto t0 = Clock::now();
  for (std::size_t at = 0; at < events.size(); at += batch) {
    order_batch(events.subspan(at, std::min(batch, events.size() - at)), ordered);
    unique_sorted.clear();
    for (const auto& e : ordered) unique_sorted.push_back(&e);
    std::stable_sort(unique_sorted.begin(), unique_sorted.end(),
                     [](const Event* a, const Event* b) { return a->id < b->id; });
    unique_sorted.erase(std::unique(unique_sorted.begin(), unique_sorted.end(),
                                    [](const Event* a, const Event* b) { return a->id == b->id; }),
                        unique_sorted.end());
    array.clear();
    put_be32(array, 1);
    put_be32(array, 0);
    put_be32(array, 2950);  // uuid
    put_be32(array, static_cast<std::uint32_t>(unique_sorted.size()));
    put_be32(array, 1);
    for (const Event* e : unique_sorted) {
      put_be32(array, 16);
      array.append(reinterpret_cast<const char*>(e->id.bytes().data()), 16);
    }
    const char* values[2] = {array.data(), kGroup};
    const int lengths[2] = {static_cast<int>(array.size()), static_cast<int>(std::strlen(kGroup))};
    const int formats[2] = {1, 1};
    if (PQsendQueryParams(c, "BEGIN", 0, nullptr, nullptr, nullptr, nullptr, 0) != 1 ||
        PQsendQueryPrepared(c, "mark", 2, values, lengths, formats, 1) != 1 ||
        PQpipelineSync(c) != 1) {
      throw std::runtime_error(PQerrorMessage(c));
    }
    fresh.clear();
    pg_read_pipeline(c, 2, [&](std::size_t i, PGresult* r) {
      if (i != 1) return;
      for (int k = 0; k < PQntuples(r); ++k)
        fresh.emplace(std::string(PQgetvalue(r, k, 0), 16), true);
    });
    texts.clear();
    for (const auto& e : ordered) {
      auto it = fresh.find(std::string(reinterpret_cast<const char*>(e.id.bytes().data()), 16));
      if (it == fresh.end() || !it->second) continue;
      it->second = false;
      ++fresh_total;
      if (handler == "count") {
        texts.push_back({e.id.to_string(), std::to_string(e.partition), std::to_string(e.offset)});
        const auto& t = texts.back();
        const char* p[5] = {kGroup, t[0].c_str(), topic.c_str(), t[1].c_str(), t[2].c_str()};
        if (!multi && PQsendQueryPrepared(c, "effect", 5, p, nullptr, nullptr, 0) != 1) {
          throw std::runtime_error(PQerrorMessage(c));
        }
      }
    }
    std::size_t statements = texts.size();
    if (multi && !texts.empty()) {
      params.clear();  // texts no longer grows: its strings stay put
      for (const auto& t : texts) {
        params.insert(params.end(),
                      {kGroup, t[0].c_str(), topic.c_str(), t[1].c_str(), t[2].c_str()});
      }
      const std::vector<std::size_t> chunks = chunks_of(texts.size(), 5);
      std::size_t row = 0;
      for (const std::size_t rows : chunks) {
        const std::string name = rows == 1 ? "effect" : fmt::format("effect_{}", rows);
        if (PQsendQueryPrepared(c, name.c_str(), static_cast<int>(rows * 5),
                                params.data() + row * 5, nullptr, nullptr, 0) != 1) {
          throw std::runtime_error(PQerrorMessage(c));
        }
        row += rows;
      }
      statements = chunks.size();
    }
    if (PQsendQueryParams(c, "COMMIT", 0, nullptr, nullptr, nullptr, nullptr, 0) != 1 ||
        PQpipelineSync(c) != 1) {
      throw std::runtime_error(PQerrorMessage(c));
    }
    pg_read_pipeline(c, statements + 1, [](std::size_t, PGresult*) {});
    done += ordered.size();
    probe.at(done);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  PQfinish(c);
  Result r;
  r.config = multi ? "raw libpq multi-row" : "raw libpq";
  r.backend = "postgres";
  r.handler = handler;
  r.raw = true;
  r.batch = batch;
  r.events = done;
  r.seconds = seconds;
  r.rss = probe.samples();
  r.hwm = read_memory().hwm_mib;
  r.note = fmt::format("new {}", fresh_total);
  return r;
}

// ---- the table -------------------------------------------------------------------------

void print_table() {
  std::printf(
      "\n| config | handler | batch | events | events/s (best) | every round | load at best | vs "
      "(a) "
      "| vs (d) | vs count | cpu us/ev | cpu vs count | RSS MiB 25/50/75/100%% | peak RSS MiB "
      "|\n");
  std::printf("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---:|\n");
  for (const Result& r : g_results) {
    const Result* plain = nullptr;
    const Result* raw = nullptr;
    for (const Result& o : g_results) {
      if (o.batch != r.batch) continue;
      if (o.config.rfind("a ", 0) == 0) plain = &o;
      // (d) for idem on PostgreSQL with the count handler is the multi-row raw loop: the
      // statements idem sends.
      const bool multi_wanted = r.backend == "postgres" && r.handler == "count";
      const bool multi = o.config == "raw libpq multi-row";
      if (r.idem && o.raw && o.backend == r.backend && o.handler == r.handler &&
          (multi == multi_wanted || raw == nullptr)) {
        raw = &o;
      }
    }
    const std::string vs_a = plain != nullptr && &r != plain
                                 ? fmt::format("{:.1f}%", 100.0 * r.rate() / plain->rate())
                                 : "";
    const std::string vs_d =
        raw != nullptr ? fmt::format("{:.0f}%", 100.0 * r.rate() / raw->rate()) : "";
    const Result* count = nullptr;
    for (const Result& o : g_results) {
      if (o.idem && o.handler == "count" && o.backend == r.backend && o.batch == r.batch &&
          o.config == r.config)
        count = &o;
    }
    const std::string vs_count = count != nullptr && count != &r && r.idem
                                     ? fmt::format("{:.0f}%", 100.0 * r.rate() / count->rate())
                                     : "";
    const std::string cpu =
        r.min_cpu_us_per_event > 0 ? fmt::format("{:.2f}", r.min_cpu_us_per_event) : "";
    const std::string cpu_vs_count =
        count != nullptr && count != &r && r.idem && count->min_cpu_us_per_event > 0
            ? fmt::format("{:.0f}%", 100.0 * r.min_cpu_us_per_event / count->min_cpu_us_per_event)
            : "";
    std::string rounds;
    for (const double x : r.rounds)
      rounds += fmt::format("{}{:.0f}", rounds.empty() ? "" : " / ", x);
    std::printf(
        "| %s | %s | %zu | %zu | %.0f | %s | %.2f | %s | %s | %s | %s | %s | %.0f / %.0f / %.0f / "
        "%.0f | %.0f |\n",
        r.config.c_str(), r.handler.c_str(), r.batch, r.events, r.rate(), rounds.c_str(), r.load,
        vs_a.c_str(), vs_d.c_str(), vs_count.c_str(), cpu.c_str(), cpu_vs_count.c_str(), r.rss[0],
        r.rss[1], r.rss[2], r.rss[3], r.hwm);
  }
  // Offsets in the store, on against off: each round's pair ran side by side (taking turns
  // at going first), so their ratio is free of the machine's round-to-round swing.
  for (const Result& off : g_results) {
    constexpr std::string_view kOff = " offsets off";
    if (!off.config.ends_with(kOff)) continue;
    const std::string on_config = off.config.substr(0, off.config.size() - kOff.size());
    for (const Result& on : g_results) {
      if (on.config != on_config || on.handler != off.handler || on.batch != off.batch) continue;
      std::vector<double> ratios;
      for (std::size_t i = 0; i < std::min(on.rounds.size(), off.rounds.size()); ++i) {
        ratios.push_back(100.0 * on.rounds[i] / off.rounds[i]);
      }
      if (ratios.empty()) continue;
      std::sort(ratios.begin(), ratios.end());
      std::printf(
          "offsets in store on / off, %s %s batch %zu, per round (sorted): %s; median %.0f%%\n",
          on_config.c_str(), on.handler.c_str(), on.batch,
          fmt::format("{:.0f}%", fmt::join(ratios, "% / ")).c_str(), ratios[ratios.size() / 2]);
    }
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse_options(argc, argv);
    const std::vector<std::string> handlers = split(o.handlers);
    // ~200 B payload + key + event_id header + record overhead is about 330 B on the
    // mock's log; keep each partition under ~3 MiB of its ~5 MiB retention.
    const int partitions =
        o.partitions > 0 ? o.partitions
                         : std::max(32, static_cast<int>(std::ceil(static_cast<double>(o.events) *
                                                                   330.0 / (3.0 * 1024 * 1024))));
    const std::filesystem::path dir = o.sqlite_dir.empty()
                                          ? std::filesystem::temp_directory_path() /
                                                fmt::format("idem-bench-consumer-{}", getpid())
                                          : std::filesystem::path(o.sqlite_dir);
    std::filesystem::create_directories(dir);

    std::printf("build %s; %s at start; sqlite: WAL, synchronous=FULL (the store's default)\n",
                idem::bench::build_type(), idem::bench::load_line().c_str());
    if (!o.pg_dsn.empty()) {
      idem::bench::postgres_durable(o.pg_dsn);
      std::printf("postgres: %s\n", idem::bench::postgres_settings(o.pg_dsn).c_str());
    }
    idem::DevBroker broker;
    const std::string topic = "orders.bench";
    broker.create_topic(topic, partitions);
    broker.create_topic(topic + ".dlq", 1);
    std::printf(
        "idem_bench_consumer: %zu events (batch 1: %zu), %.0f%% duplicates, topic with %d "
        "partitions, sqlite in %s, postgres %s\n",
        o.events, std::min(o.batch1_events, o.events), o.dup_ratio * 100, partitions, dir.c_str(),
        o.pg_dsn.empty() ? "SKIPPED (set IDEM_TEST_PG_DSN)" : "enabled");
    std::size_t bytes = 0;
    const auto p0 = Clock::now();
    const std::vector<Event> events =
        produce(broker.bootstrap_servers(), topic, partitions, o.events, o.dup_ratio, bytes);
    std::printf(
        "produced %zu records (%.1f MiB of key+value+header, max %.2f MiB per partition) "
        "in %.1f s (not measured); retention check passed\n",
        events.size(), static_cast<double>(bytes) / (1 << 20),
        static_cast<double>(bytes) / partitions / (1 << 20),
        std::chrono::duration<double>(Clock::now() - p0).count());

    int sq = 0;
    const bool sqlite = listed(o.backends, "sqlite");
    for (const std::size_t batch : o.batches) {
      const std::size_t target = batch == 1 ? std::min(o.batch1_events, o.events) : o.events;
      std::printf("batch %zu, %zu events:\n", batch, target);
      std::vector<Event> order;
      if (listed(o.only, "d")) order = consumption_order(broker.bootstrap_servers(), topic, target);
      const std::span<const Event> slice(order.data(), order.size());
      const auto keep = [&](const auto& run) {
        const double load = idem::bench::load_1min();
        Result r = run();
        r.load = load;
        print_result(r);
        keep_best(std::move(r));
      };
      for (int round = 0; round < o.repeat; ++round) {
        if (listed(o.only, "a"))
          keep([&] { return run_plain(broker.bootstrap_servers(), topic, batch, target); });
        for (const std::string& h : in_turn(handlers, round)) {
          // The raw loops and pgbench know the compiled handlers only.
          const bool compiled = h == "dedup" || h == "count";
          if (sqlite && compiled && listed(o.only, "d")) {
            keep([&] {
              return run_raw_sqlite((dir / fmt::format("raw-{}.db", sq++)).string(), topic, h,
                                    batch, slice);
            });
          }
          if (sqlite && listed(o.only, "b")) {
            for (const std::size_t depth : o.depths) {
              for (const bool in_store : in_turn(o.offsets_in_store, round)) {
                keep([&] {
                  return run_idem(broker.bootstrap_servers(), topic,
                                  "sqlite://" + (dir / fmt::format("idem-{}.db", sq++)).string(),
                                  "sqlite", h, batch, target, depth, in_store);
                });
              }
            }
          }
          if (o.pg_dsn.empty()) continue;
          if (batch == 1 && compiled && listed(o.only, "p"))
            keep([&] { return run_pgbench(fresh_pg_url(o.pg_dsn), h, 10); });
          if (compiled && listed(o.only, "d")) {
            keep([&] { return run_raw_pg(fresh_pg_url(o.pg_dsn), topic, h, batch, slice, false); });
            if (h == "count") {
              keep(
                  [&] { return run_raw_pg(fresh_pg_url(o.pg_dsn), topic, h, batch, slice, true); });
            }
          }
          if (listed(o.only, "c")) {
            for (const std::size_t depth : o.depths) {
              for (const bool in_store : in_turn(o.offsets_in_store, round)) {
                keep([&] {
                  return run_idem(broker.bootstrap_servers(), topic, fresh_pg_url(o.pg_dsn),
                                  "postgres", h, batch, target, depth, in_store);
                });
              }
            }
          }
        }
      }
    }
    print_table();
    std::filesystem::remove_all(dir);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "idem_bench_consumer: %s\n", e.what());
    return 1;
  }
}
