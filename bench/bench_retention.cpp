// Retention on PostgreSQL, two comparisons, each with its baseline in the same run:
//
//  A. Removing one day of 1M expired dedup rows: DROP of the partition holding them
//     (partitioned table, run_maintenance) vs the batched DELETE of the same 1M rows
//     (unpartitioned table, run_maintenance, batches of 5000), plus the VACUUM the
//     DELETE leaves behind. While each runs, a second connection runs the consumer's
//     dedup transaction (one committed batch of 1000 UUIDv7 marks, no Kafka) in a loop:
//     its throughput and its slowest transaction are reported against the same loop
//     with no cleanup running.
//  B. Dedup insert throughput (idem's mark_processed_batch, 1000 marks per transaction)
//     on a table pre-filled with N rows (default 10M) keyed by UUIDv7 vs random UUIDv4,
//     the new marks of the same kind as the pre-fill.
//
//   IDEM_BENCH_PG_DSN (or IDEM_TEST_PG_DSN) = postgresql://...   (required)
//   idem_bench_retention [--rows-a N] [--prefill-b N] [--marks-b N] [--repeat R]
//
// A plain main(): each figure is one long operation; repeated R times (A: fresh tables
// each time), best and spread reported. Databases are created and dropped here.
#include <libpq-fe.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "idem/clock.hpp"
#include "idem/reference/schema.hpp"
#include "idem/retention.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"

#include "bench_settings.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using namespace std::chrono_literals;

constexpr const char* kGroup = "billing-order-confirmed";

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

// ---- databases ----------------------------------------------------------------

struct PgConnDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};
using PgConn = std::unique_ptr<PGconn, PgConnDeleter>;

PgConn connect(const std::string& conninfo) {
  PgConn c(PQconnectdb(conninfo.c_str()));
  if (PQstatus(c.get()) != CONNECTION_OK) throw std::runtime_error(PQerrorMessage(c.get()));
  return c;
}

void exec(PGconn* c, const std::string& sql) {
  PGresult* r = PQexec(c, sql.c_str());
  const auto status = PQresultStatus(r);
  const std::string err = PQresultErrorMessage(r);
  PQclear(r);
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK)
    throw std::runtime_error(sql + ": " + err);
}

std::string with_dbname(const std::string& dsn, const std::string& db) {
  // URI form only (what with-postgres.sh exports): replace the path.
  const auto scheme = dsn.find("://");
  if (scheme == std::string::npos)
    throw std::runtime_error("IDEM_BENCH_PG_DSN must be a postgresql:// URI");
  const auto slash = dsn.find('/', scheme + 3);
  const auto query = dsn.find('?', scheme + 3);
  const std::string base = dsn.substr(0, slash == std::string::npos ? query : slash);
  const std::string params = query == std::string::npos ? "" : dsn.substr(query);
  return base + "/" + db + params;
}

/// A database created for one measurement and dropped afterwards.
class Database {
 public:
  Database(const std::string& dsn, const std::string& name) : admin_(connect(dsn)), name_(name) {
    exec(admin_.get(), "DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
    exec(admin_.get(), "CREATE DATABASE " + name_);
    url_ = with_dbname(dsn, name_);
  }
  ~Database() {
    try {
      exec(admin_.get(), "DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
    } catch (...) {
    }
  }
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
  [[nodiscard]] const std::string& url() const { return url_; }

 private:
  PgConn admin_;
  std::string name_;
  std::string url_;
};

/// SQL for `n` UUIDv7 ids born in [from_ms, from_ms + span_ms), spread evenly, built on
/// the server (a client loop would measure the network, not the table).
std::string v7_rows_sql(std::int64_t n, std::int64_t from_ms, std::int64_t span_ms) {
  return fmt::format(
      "INSERT INTO processed_event (event_id, consumer_group) "
      "SELECT (lpad(to_hex({} + (i * {}::bigint) / {}), 12, '0') || '7' || substr(h, 1, 3) || "
      "'8' || substr(h, 4, 15))::uuid, '{}' "
      "FROM (SELECT i, md5(i::text || random()::text) AS h FROM generate_series(0, {} - 1) i) s",
      from_ms, span_ms, n, kGroup, n);
}

std::string v4_rows_sql(std::int64_t n) {
  return fmt::format(
      "INSERT INTO processed_event (event_id, consumer_group) "
      "SELECT gen_random_uuid(), '{}' FROM generate_series(1, {})",
      kGroup, n);
}

std::int64_t ms_of(std::chrono::system_clock::time_point t) {
  return std::chrono::floor<milliseconds>(t).time_since_epoch().count();
}

/// A fixed clock: the benchmark decides what "now" is for the retention pass.
class FixedClock final : public idem::Clock {
 public:
  explicit FixedClock(std::chrono::system_clock::time_point t) : t_(t) {}
  [[nodiscard]] std::chrono::system_clock::time_point now() const override { return t_; }

 private:
  std::chrono::system_clock::time_point t_;
};

// ---- the consumer-side load -------------------------------------------------------

struct LoadFigures {
  double marks_per_s = 0;
  milliseconds slowest_tx{0};
};

/// Commits batches of 1000 fresh UUIDv7 marks in a loop on its own connection while
/// `running` holds. Counters are readable from another thread, so a window of the run
/// (exactly the cleanup's duration) can be measured.
class MarkLoad {
 public:
  explicit MarkLoad(const std::string& url) : store_(idem::open_store(url)) {}

  void run_while(const std::atomic<bool>& running) {
    std::vector<idem::Uuid> ids(1000);
    do {
      for (auto& id : ids) id = idem::new_uuid_v7();
      const auto t0 = Clock::now();
      auto tx = store_->begin();
      static_cast<void>(tx->mark_processed_batch(ids, kGroup));
      tx->commit();
      const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
      if (measuring_.load() && took > slowest_ms_.load()) slowest_ms_.store(took);
      marks_.fetch_add(ids.size());
    } while (running.load());
  }

  /// Starts a window: from now on the slowest transaction counts.
  void open_window() {
    window_marks_ = marks_.load();
    window_start_ = Clock::now();
    measuring_.store(true);
  }
  /// Ends the window: marks/s within it (transactions that finished in it) and the
  /// slowest transaction that finished in it.
  LoadFigures close_window() {
    measuring_.store(false);
    LoadFigures f;
    const double secs = std::chrono::duration<double>(Clock::now() - window_start_).count();
    f.marks_per_s = static_cast<double>(marks_.load() - window_marks_) / secs;
    f.slowest_tx = milliseconds(slowest_ms_.load());
    return f;
  }

 private:
  std::unique_ptr<idem::Store> store_;
  std::atomic<std::uint64_t> marks_{0};
  std::atomic<std::int64_t> slowest_ms_{0};
  std::atomic<bool> measuring_{false};
  std::uint64_t window_marks_ = 0;
  Clock::time_point window_start_{};
};

/// Runs `op` while a MarkLoad runs; returns op's wall time and the load's figures during op.
/// The window is at least `min_window` long (a 100 ms DROP would otherwise be measured
/// by one or two transactions): it stays open that long after op started.
template <class Op>
std::pair<milliseconds, LoadFigures> under_load(const std::string& url, Op op,
                                                milliseconds min_window = milliseconds(1000)) {
  MarkLoad load(url);
  std::atomic<bool> running{true};
  std::thread t([&] { load.run_while(running); });
  std::this_thread::sleep_for(500ms);  // let the load reach its steady state first
  load.open_window();
  const auto t0 = Clock::now();
  op();
  const auto wall = std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
  if (wall < min_window) std::this_thread::sleep_for(min_window - wall);
  const LoadFigures figures = load.close_window();
  running.store(false);
  t.join();
  return {wall, figures};
}

LoadFigures baseline_load(const std::string& url, milliseconds duration) {
  return under_load(
             url, [] {}, duration)
      .second;
}

struct Spread {
  std::vector<double> values;
  void add(double v) { values.push_back(v); }
  [[nodiscard]] double best_low() const { return *std::min_element(values.begin(), values.end()); }
  [[nodiscard]] double best_high() const { return *std::max_element(values.begin(), values.end()); }
  [[nodiscard]] std::string range(const char* fmtspec = "{:.0f}") const {
    return fmt::format("{}..{}", fmt::format(fmt::runtime(fmtspec), best_low()),
                       fmt::format(fmt::runtime(fmtspec), best_high()));
  }
};

// ---- A: DROP vs batched DELETE --------------------------------------------------

void bench_drop_vs_delete(const std::string& dsn, std::int64_t rows, int repeat) {
  std::printf("A. remove %lld expired dedup rows (one day), %d repetitions\n",
              static_cast<long long>(rows), repeat);
  const auto day = std::chrono::floor<std::chrono::days>(std::chrono::system_clock::now());
  // "Now" is noon of `day`: the retention horizon is day - 6.5 days, so the partition of
  // day - 8 (upper bound day - 7) is the one and only partition past it.
  const auto expired_day = day - std::chrono::days(8);
  const FixedClock clock(day + 12h);
  idem::RetentionPolicy policy;
  policy.clock = &clock;
  policy.outbox_retention = 0ms;
  policy.batch_size = 5000;

  Spread drop_ms, delete_ms, vacuum_ms, drop_load, delete_load, base_load, drop_stall, delete_stall,
      base_stall;
  for (int r = 0; r < repeat; ++r) {
    // DROP: partitioned, the expired day's partition holds the rows.
    {
      Database db(dsn, "idem_bench_ret_drop");
      {
        auto store = idem::open_store(db.url());
        idem::MigrateOptions m;
        m.partitioned = true;
        m.partitions_behind = 8;  // day - 8 .. day + 3: the pass creates nothing
        m.partitions_ahead = 3;
        m.clock = &clock;
        idem::migrate_reference_system(*store, m);
      }
      auto c = connect(db.url());
      exec(c.get(), v7_rows_sql(rows, ms_of(expired_day), 86'400'000));
      exec(c.get(), "VACUUM ANALYZE processed_event");
      const auto base = baseline_load(db.url(), 2s);
      base_load.add(base.marks_per_s);
      base_stall.add(static_cast<double>(base.slowest_tx.count()));
      auto store = idem::open_store(db.url());
      idem::MaintenanceReport report;
      const auto [wall, load] =
          under_load(db.url(), [&] { report = idem::run_maintenance(*store, policy); });
      if (report.partitions_dropped.size() != 1 || !report.partitions_created.empty()) {
        throw std::runtime_error("expected exactly one partition dropped: " + report.summary());
      }
      drop_ms.add(static_cast<double>(wall.count()));
      drop_load.add(load.marks_per_s);
      drop_stall.add(static_cast<double>(load.slowest_tx.count()));
    }
    // Batched DELETE: the same rows in the unpartitioned table.
    {
      Database db(dsn, "idem_bench_ret_delete");
      idem::migrate_reference_system(*idem::open_store(db.url()));
      auto c = connect(db.url());
      exec(c.get(), v7_rows_sql(rows, ms_of(expired_day), 86'400'000));
      exec(c.get(), "VACUUM ANALYZE processed_event");
      auto store = idem::open_store(db.url());
      idem::MaintenanceReport report;
      const auto [wall, load] =
          under_load(db.url(), [&] { report = idem::run_maintenance(*store, policy); });
      if (report.dedup_rows_deleted != rows) throw std::runtime_error("the DELETE missed rows");
      delete_ms.add(static_cast<double>(wall.count()));
      delete_load.add(load.marks_per_s);
      delete_stall.add(static_cast<double>(load.slowest_tx.count()));
      const auto v0 = Clock::now();
      exec(c.get(), "VACUUM processed_event");
      vacuum_ms.add(
          static_cast<double>(std::chrono::duration_cast<milliseconds>(Clock::now() - v0).count()));
    }
    std::printf("  run %d: drop %.0f ms, delete %.0f ms + vacuum %.0f ms\n", r + 1,
                drop_ms.values.back(), delete_ms.values.back(), vacuum_ms.values.back());
  }
  std::printf("  %-44s %10s %12s\n", "", "best", "range");
  std::printf("  %-44s %7.0f ms %12s\n", "DROP partition (run_maintenance)", drop_ms.best_low(),
              drop_ms.range().c_str());
  std::printf("  %-44s %7.0f ms %12s\n", "batched DELETE, 5000/tx (run_maintenance)",
              delete_ms.best_low(), delete_ms.range().c_str());
  std::printf("  %-44s %7.0f ms %12s\n", "VACUUM after the DELETE", vacuum_ms.best_low(),
              vacuum_ms.range().c_str());
  std::printf("  DELETE / DROP: %.0fx (best vs best)\n",
              delete_ms.best_low() / std::max(1.0, drop_ms.best_low()));
  std::printf(
      "  consumer mark loop (1000 marks/tx; DROP window: 1 s from its start), marks/s: no cleanup "
      "%s, "
      "during DROP %s, during DELETE %s\n",
      base_load.range().c_str(), drop_load.range().c_str(), delete_load.range().c_str());
  std::printf(
      "  ... best during DROP / no cleanup = %.0f%%, best during DELETE / no cleanup = %.0f%%\n",
      100.0 * drop_load.best_high() / base_load.best_high(),
      100.0 * delete_load.best_high() / base_load.best_high());
  std::printf("  slowest mark transaction (ms): no cleanup %s, during DROP %s, during DELETE %s\n",
              base_stall.range().c_str(), drop_stall.range().c_str(), delete_stall.range().c_str());
}

// ---- B: insert throughput, UUIDv7 vs UUIDv4 ------------------------------------------

double measure_marks(const std::string& url, bool v7, std::int64_t marks) {
  auto store = idem::open_store(url);
  std::mt19937_64 rng(std::random_device{}());
  std::vector<idem::Uuid> ids(1000);
  const auto t0 = Clock::now();
  for (std::int64_t done = 0; done < marks; done += static_cast<std::int64_t>(ids.size())) {
    for (auto& id : ids) {
      if (v7) {
        id = idem::new_uuid_v7();
      } else {
        idem::Uuid::Bytes b{};
        for (std::size_t i = 0; i < 16; i += 8) {
          const std::uint64_t x = rng();
          for (std::size_t k = 0; k < 8; ++k) b[i + k] = static_cast<std::uint8_t>(x >> (8 * k));
        }
        b[6] = static_cast<std::uint8_t>((b[6] & 0x0F) | 0x40);
        b[8] = static_cast<std::uint8_t>((b[8] & 0x3F) | 0x80);
        id = idem::Uuid(b);
      }
    }
    auto tx = store->begin();
    static_cast<void>(tx->mark_processed_batch(ids, kGroup));
    tx->commit();
  }
  return static_cast<double>(marks) / std::chrono::duration<double>(Clock::now() - t0).count();
}

void bench_v7_vs_v4(const std::string& dsn, std::int64_t prefill, std::int64_t marks, int repeat) {
  std::printf("\nB. dedup marks on a table pre-filled with %lld rows: UUIDv7 vs UUIDv4 keys\n",
              static_cast<long long>(prefill));
  Database v7db(dsn, "idem_bench_ret_v7");
  Database v4db(dsn, "idem_bench_ret_v4");
  double fill_v7_s = 0;
  double fill_v4_s = 0;
  for (const auto* db : {&v7db, &v4db}) {
    idem::migrate_reference_system(*idem::open_store(db->url()));
    auto c = connect(db->url());
    const auto t0 = Clock::now();
    // Pre-fill in chunks of 1M, like a table that grew over days (v7: the last 7 days).
    const auto now_ms = ms_of(std::chrono::system_clock::now());
    const std::int64_t week = 7LL * 86'400'000;
    for (std::int64_t done = 0; done < prefill; done += 1'000'000) {
      const std::int64_t n = std::min<std::int64_t>(1'000'000, prefill - done);
      exec(c.get(), db == &v7db
                        ? v7_rows_sql(n, now_ms - week + week * done / prefill, week * n / prefill)
                        : v4_rows_sql(n));
    }
    exec(c.get(), "VACUUM ANALYZE processed_event");
    (db == &v7db ? fill_v7_s : fill_v4_s) =
        std::chrono::duration<double>(Clock::now() - t0).count();
  }
  std::printf(
      "  pre-fill (server-side INSERT ... SELECT, + VACUUM ANALYZE): v7 %.0f s, v4 %.0f s\n",
      fill_v7_s, fill_v4_s);
  Spread v7, v4;
  for (int r = 0; r < repeat; ++r) {  // alternate, so machine noise hits both alike
    v7.add(measure_marks(v7db.url(), true, marks));
    v4.add(measure_marks(v4db.url(), false, marks));
    std::printf("  run %d: v7 %.0f marks/s, v4 %.0f marks/s\n", r + 1, v7.values.back(),
                v4.values.back());
  }
  std::printf(
      "  %lld marks per run, 1000 per transaction. best (range): v7 %.0f (%s), v4 %.0f (%s); v4 / "
      "v7 = %.0f%%\n",
      static_cast<long long>(marks), v7.best_high(), v7.range().c_str(), v4.best_high(),
      v4.range().c_str(), 100.0 * v4.best_high() / v7.best_high());
}

}  // namespace

int main(int argc, char** argv) {
  std::string dsn = env_or_empty("IDEM_BENCH_PG_DSN");
  if (dsn.empty()) dsn = env_or_empty("IDEM_TEST_PG_DSN");
  if (dsn.empty()) {
    std::fprintf(stderr,
                 "set IDEM_BENCH_PG_DSN or IDEM_TEST_PG_DSN (scripts/with-postgres.sh does)\n");
    return 2;
  }
  // Figures at fsync on: with-postgres.sh starts the server with it off.
  idem::bench::postgres_durable(dsn);
  std::printf("postgres: %s; build %s; %s\n", idem::bench::postgres_settings(dsn).c_str(),
              idem::bench::build_type(), idem::bench::load_line().c_str());
  std::int64_t rows_a = 1'000'000;
  std::int64_t prefill_b = 10'000'000;
  std::int64_t marks_b = 200'000;
  int repeat = 3;
  bool only_a = false;
  bool only_b = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto next = [&] {
      if (i + 1 >= argc) throw std::runtime_error(arg + " needs a value");
      return std::atoll(argv[++i]);
    };
    if (arg == "--rows-a")
      rows_a = next();
    else if (arg == "--prefill-b")
      prefill_b = next();
    else if (arg == "--marks-b")
      marks_b = next();
    else if (arg == "--repeat")
      repeat = static_cast<int>(next());
    else if (arg == "--only-a")
      only_a = true;
    else if (arg == "--only-b")
      only_b = true;
    else {
      std::fprintf(stderr, "unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  try {
    if (!only_b) bench_drop_vs_delete(dsn, rows_a, repeat);
    if (!only_a) bench_v7_vs_v4(dsn, prefill_b, marks_b, repeat);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_retention: %s\n", e.what());
    return 1;
  }
  return 0;
}
