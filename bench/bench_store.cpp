// Dedup-mark throughput: idem's Store against a minimal raw loop that issues the
// same SQL statements through sqlite3 / libpq directly, in the same run.
//
//   idem_bench_store [--benchmark_filter=...]
//   IDEM_BENCH_PG_DSN=postgresql://... (or IDEM_TEST_PG_DSN) enables PostgreSQL.
//
// Every benchmark gets a fresh database so table size is the same for both sides.
// items_per_second is events marked per second; one iteration is one committed
// transaction of `batch` marks (batch 1 uses the single-mark statement).
#include <benchmark/benchmark.h>
#include <libpq-fe.h>
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"

#include "bench_settings.hpp"

namespace {

constexpr const char* kGroup = "bench-group";

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string pg_dsn() {
  std::string dsn = env_or_empty("IDEM_BENCH_PG_DSN");
  return dsn.empty() ? env_or_empty("IDEM_TEST_PG_DSN") : dsn;
}

// ---- fresh databases -------------------------------------------------------

std::filesystem::path scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() /
             fmt::format("idem-bench-{}", std::random_device{}());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

std::string fresh_sqlite_path() {
  static std::atomic<int> n{0};
  return (scratch_dir() / fmt::format("bench-{}.db", n++)).string();
}

PGconn* pg_connect(const std::string& conninfo) {
  PGconn* c = PQconnectdb(conninfo.c_str());
  if (PQstatus(c) != CONNECTION_OK) {
    std::string msg = PQerrorMessage(c);
    PQfinish(c);
    throw std::runtime_error("connect: " + msg);
  }
  return c;
}

void pg_exec(PGconn* c, const char* sql) {
  PGresult* r = PQexec(c, sql);
  const auto st = PQresultStatus(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    std::string msg = PQresultErrorMessage(r);
    PQclear(r);
    throw std::runtime_error(std::string(sql).substr(0, 60) + ": " + msg);
  }
  PQclear(r);
}

// Creates a new database and returns a URL for it (the DSN with its dbname replaced).
std::string fresh_pg_url() {
  static std::atomic<int> n{0};
  const std::string dsn = pg_dsn();
  static const bool durable = [&] {  // figures at fsync on, once per run
    idem::bench::postgres_durable(dsn);
    std::fprintf(stderr, "postgres: %s; build %s; %s\n",
                 idem::bench::postgres_settings(dsn).c_str(), idem::bench::build_type(),
                 idem::bench::load_line().c_str());
    return true;
  }();
  (void)durable;
  const std::string name = fmt::format("idem_bench_{}_{}", getpid(), n++);
  PGconn* c = pg_connect(dsn);
  pg_exec(c, fmt::format("DROP DATABASE IF EXISTS {}", name).c_str());
  pg_exec(c, fmt::format("CREATE DATABASE {}", name).c_str());
  PQfinish(c);
  const auto q = dsn.find('?');
  const std::string base = dsn.substr(0, q);
  const auto slash = base.rfind('/');
  return base.substr(0, slash + 1) + name + (q == std::string::npos ? "" : dsn.substr(q));
}

std::vector<idem::Uuid> next_ids(idem::UuidV7Generator& gen, std::size_t n) {
  std::vector<idem::Uuid> ids(n);
  for (auto& id : ids) id = gen.next();
  return ids;
}

// ---- idem ------------------------------------------------------------------

void run_idem(benchmark::State& state, const std::string& url) {
  const auto batch = static_cast<std::size_t>(state.range(0));
  auto store = idem::open_store(url);
  idem::migrate_reference_system(*store);
  idem::UuidV7Generator gen;
  std::int64_t marked = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const auto ids = next_ids(gen, batch);
    state.ResumeTiming();
    auto tx = store->begin();
    if (batch == 1) {
      marked += tx->mark_processed(ids[0], kGroup) ? 1 : 0;
    } else {
      const auto fresh = tx->mark_processed_batch(ids, kGroup);
      for (bool f : fresh) marked += f ? 1 : 0;
    }
    tx->commit();
  }
  if (marked != static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(batch)) {
    state.SkipWithError("not every id was new");
  }
  state.SetItemsProcessed(marked);
}

void BM_IdemSqlite(benchmark::State& state) {
  run_idem(state, "sqlite://" + fresh_sqlite_path());
}

void BM_IdemPostgres(benchmark::State& state) {
  if (pg_dsn().empty()) {
    state.SkipWithError("set IDEM_BENCH_PG_DSN or IDEM_TEST_PG_DSN");
    return;
  }
  run_idem(state, fresh_pg_url());
}

// ---- raw sqlite3 -------------------------------------------------------------
// The same pragmas and statements as idem's SQLite store, with nothing around them.

void sq_exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "?";
    sqlite3_free(err);
    throw std::runtime_error(msg);
  }
}

void BM_RawSqlite(benchmark::State& state) {
  const auto batch = static_cast<std::size_t>(state.range(0));
  const std::string path = fresh_sqlite_path();
  {  // same schema as idem's migration
    auto store = idem::open_store("sqlite://" + path);
    idem::migrate_reference_system(*store);
  }
  sqlite3* db = nullptr;
  sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  sq_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA busy_timeout=5000");
  // Exactly the statement text idem prepares (anonymous placeholders after ?2).
  std::string sql = "INSERT INTO processed_event(event_id, consumer_group) VALUES (?2,?1)";
  for (std::size_t i = 1; i < batch; ++i) sql += ",(?,?1)";
  sql += batch == 1 ? " ON CONFLICT DO NOTHING" : " ON CONFLICT DO NOTHING RETURNING event_id";
  sqlite3_stmt* ins = nullptr;
  sqlite3_stmt* begin = nullptr;
  sqlite3_stmt* commit = nullptr;
  sqlite3_prepare_v3(db, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &ins, nullptr);
  sqlite3_prepare_v3(db, "BEGIN IMMEDIATE", -1, SQLITE_PREPARE_PERSISTENT, &begin, nullptr);
  sqlite3_prepare_v3(db, "COMMIT", -1, SQLITE_PREPARE_PERSISTENT, &commit, nullptr);
  idem::UuidV7Generator gen;
  std::int64_t marked = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const auto ids = next_ids(gen, batch);
    state.ResumeTiming();
    sqlite3_step(begin);
    sqlite3_reset(begin);
    sqlite3_bind_text(ins, 1, kGroup, -1, SQLITE_STATIC);
    for (std::size_t i = 0; i < batch; ++i) {
      sqlite3_bind_blob(ins, static_cast<int>(i + 2), ids[i].bytes().data(), 16, SQLITE_STATIC);
    }
    int rc;
    while ((rc = sqlite3_step(ins)) == SQLITE_ROW) ++marked;
    if (rc != SQLITE_DONE) throw std::runtime_error(sqlite3_errmsg(db));
    if (batch == 1) marked += sqlite3_changes(db);
    sqlite3_reset(ins);
    if (sqlite3_step(commit) != SQLITE_DONE) throw std::runtime_error(sqlite3_errmsg(db));
    sqlite3_reset(commit);
  }
  sqlite3_finalize(ins);
  sqlite3_finalize(begin);
  sqlite3_finalize(commit);
  sqlite3_close(db);
  state.SetItemsProcessed(marked);
}

// ---- raw libpq ---------------------------------------------------------------
// The same statements as idem's PostgreSQL store, prepared once, text format,
// one synchronous round trip per statement.

void BM_RawPostgres(benchmark::State& state) {
  if (pg_dsn().empty()) {
    state.SkipWithError("set IDEM_BENCH_PG_DSN or IDEM_TEST_PG_DSN");
    return;
  }
  const auto batch = static_cast<std::size_t>(state.range(0));
  const std::string url = fresh_pg_url();
  {
    auto store = idem::open_store(url);
    idem::migrate_reference_system(*store);
  }
  PGconn* c = pg_connect(url);
  const char* sql =
      batch == 1
          ? "INSERT INTO processed_event (event_id, consumer_group) VALUES ($1::uuid, $2) ON "
            "CONFLICT DO NOTHING"
          : "INSERT INTO processed_event (event_id, consumer_group) SELECT unnest($1::uuid[]), $2 "
            "ON CONFLICT DO NOTHING RETURNING event_id";
  PGresult* p = PQprepare(c, "mark", sql, 0, nullptr);
  PQclear(p);
  idem::UuidV7Generator gen;
  std::int64_t marked = 0;
  std::string arg;
  for (auto _ : state) {
    state.PauseTiming();
    const auto ids = next_ids(gen, batch);
    state.ResumeTiming();
    arg.clear();
    if (batch == 1) {
      arg = ids[0].to_string();
    } else {
      arg.push_back('{');
      for (std::size_t i = 0; i < batch; ++i) {
        if (i) arg.push_back(',');
        char buf[36];
        ids[i].format_to(buf);
        arg.append(buf, 36);
      }
      arg.push_back('}');
    }
    const char* values[2] = {arg.c_str(), kGroup};
    pg_exec(c, "BEGIN");
    PGresult* r = PQexecPrepared(c, "mark", 2, values, nullptr, nullptr, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
      throw std::runtime_error(PQresultErrorMessage(r));
    }
    marked += batch == 1 ? std::atoll(PQcmdTuples(r)) : PQntuples(r);
    PQclear(r);
    pg_exec(c, "COMMIT");
  }
  PQfinish(c);
  state.SetItemsProcessed(marked);
}

void batch_sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("batch")->Arg(1)->Arg(100)->Arg(1000)->UseRealTime()->MinTime(2.0);
}

}  // namespace

// Raw then idem for each backend, so each pair runs back to back.
BENCHMARK(BM_RawSqlite)->Apply(batch_sizes);
BENCHMARK(BM_IdemSqlite)->Apply(batch_sizes);
BENCHMARK(BM_RawPostgres)->Apply(batch_sizes);
BENCHMARK(BM_IdemPostgres)->Apply(batch_sizes);

BENCHMARK_MAIN();
