#pragma once
// What every published figure states next to it: the build type, the machine's
// load when the run started, and the PostgreSQL durability settings actually in force.
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "postgres_durable.hpp"

namespace idem::bench {

/// The CMake build type the benchmark was compiled with (bench/CMakeLists.txt passes it).
inline const char* build_type() {
#ifdef IDEM_BENCH_BUILD_TYPE
  return IDEM_BENCH_BUILD_TYPE;
#else
  return "unknown";
#endif
}

/// The 1-minute load average (uptime's first figure), or -1.
inline double load_1min() {
  double load[1] = {-1};
  return getloadavg(load, 1) == 1 ? load[0] : -1;
}

/// "load 1/5/15 min: a b c" as uptime prints it.
inline std::string load_line() {
  double load[3] = {-1, -1, -1};
  (void)getloadavg(load, 3);
  return fmt::format("load average {:.2f} {:.2f} {:.2f}", load[0], load[1], load[2]);
}

/// The server's durability settings, read back (not what was asked for).
inline std::string postgres_settings(const std::string& dsn) {
  return fmt::format(
      "fsync={} full_page_writes={} synchronous_commit={} wal_sync_method={} shared_buffers={}",
      pg_show(dsn, "fsync"), pg_show(dsn, "full_page_writes"), pg_show(dsn, "synchronous_commit"),
      pg_show(dsn, "wal_sync_method"), pg_show(dsn, "shared_buffers"));
}

}  // namespace idem::bench
