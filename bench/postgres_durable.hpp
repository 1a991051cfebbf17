#pragma once
// PostgreSQL settings for durability benchmarks: scripts/with-postgres.sh runs its
// throwaway cluster with fsync = off (fine for crash tests, wrong for figures that claim
// durable commits), so a benchmark switches the flushes back on for its run.
#include <libpq-fe.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include <fmt/format.h>

namespace idem::bench {

inline void pg_exec(PGconn* conn, const std::string& sql) {
  PGresult* r = PQexec(conn, sql.c_str());
  const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
  const std::string error = ok ? "" : PQerrorMessage(conn);
  PQclear(r);
  if (!ok) throw std::runtime_error(fmt::format("{}: {}", sql, error));
}

/// SHOW `setting` on the server of `dsn`.
inline std::string pg_show(const std::string& dsn, const char* setting) {
  PGconn* conn = PQconnectdb(dsn.c_str());
  PGresult* r = PQexec(conn, fmt::format("SHOW {}", setting).c_str());
  std::string value = PQresultStatus(r) == PGRES_TUPLES_OK ? PQgetvalue(r, 0, 0) : "?";
  PQclear(r);
  PQfinish(conn);
  return value;
}

/// fsync and full_page_writes on for the server of `dsn` (ALTER SYSTEM; both take effect
/// on reload, which this waits for).
inline void postgres_durable(const std::string& dsn) {
  using namespace std::chrono_literals;
  PGconn* conn = PQconnectdb(dsn.c_str());
  if (PQstatus(conn) != CONNECTION_OK) throw std::runtime_error(PQerrorMessage(conn));
  pg_exec(conn, "ALTER SYSTEM SET fsync = on");
  pg_exec(conn, "ALTER SYSTEM SET full_page_writes = on");
  pg_exec(conn, "SELECT pg_reload_conf()");
  PQfinish(conn);
  for (int i = 0; i < 100 && pg_show(dsn, "fsync") != "on"; ++i) std::this_thread::sleep_for(50ms);
}

}  // namespace idem::bench
