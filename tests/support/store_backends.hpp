#pragma once
// The dedup-store backends the tests run against, as traits types:
//
//   struct SomeBackend {
//     static constexpr const char* name;          // "sqlite", "postgres": test-name suffix
//     static constexpr idem::Backend kind;         // what Store::backend() reports
//     static constexpr idem::ErrorSource source;   // what its errors report
//     static std::string fresh_url();              // URL of a NEW, EMPTY database
//     static std::int64_t read_scalar(Store&, const std::string& sql);
//   };
//
// fresh_url() may decide that the backend is unavailable: it then calls skip_or_fail()
// (which records a GTest skip, or a fatal failure under CI=true) and returns "". Callers
// check IsSkipped()/HasFatalFailure() after calling it (the fixtures here do).
//
// (The members are spelled like type-traits members, std::integral_constant::value,
// rather than kConstants; GetName is GoogleTest's required spelling.)
//
// read_scalar() runs a parameterless query that returns one integer, on `store`'s
// connection but outside any idem transaction, and must not wait for locks held by a
// concurrent writer; it is how a test observes "what others can see now".
#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/error.hpp"
#include "idem/store.hpp"
#include "idem/stores/sqlite.hpp"
#include "support/test_env.hpp"

#if __has_include("support/postgres_test_db.hpp")
#include "support/postgres_test_db.hpp"
#define IDEM_TEST_HAVE_POSTGRES_BACKEND 1
#endif

namespace idem::test {

/// Marks the current test skipped, or failed (fatally) when CI=true, from any void
/// helper. Check IsSkipped()/HasFatalFailure() after the helper returns.
inline void skip_or_fail(const std::string& reason) {
  if (in_ci()) GTEST_FAIL() << reason << " (CI=true: this may not be skipped)";
  GTEST_SKIP() << reason;
}

/// A directory for this test process's scratch databases, created on first use and
/// removed (with everything in it) when the process exits normally.
inline const std::filesystem::path& scratch_dir() {
  struct Dir {
    std::filesystem::path path;
    Dir() {
      std::string pattern = (std::filesystem::temp_directory_path() / "idem-test-XXXXXX").string();
      if (::mkdtemp(pattern.data()) == nullptr) {
        throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
      }
      path = pattern;
    }
    Dir(const Dir&) = delete;
    Dir& operator=(const Dir&) = delete;
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

/// A URL for a new, empty SQLite database file in scratch_dir().
inline std::string fresh_sqlite_url() {
  static std::atomic<int> counter{0};
  const auto path = scratch_dir() / fmt::format("db-{}.sqlite", counter.fetch_add(1));
  return "sqlite://" + path.string();  // the path is absolute: sqlite:///tmp/...
}

/// read_scalar through an idem transaction. Right for backends whose transactions do
/// not take write locks up front (PostgreSQL): a reader then sees committed data only.
struct TransactionalReader {
  static std::int64_t read_scalar(Store& store, const std::string& sql) {
    auto tx = store.begin();
    const Rows rows = tx->execute(sql);
    tx->rollback();
    if (rows.empty()) throw std::runtime_error("read_scalar: no row from " + sql);
    return rows[0].int64(0);
  }
};

struct SqliteBackend {
  // NOLINTNEXTLINE(readability-identifier-naming)
  static constexpr const char* name = "sqlite";
  // NOLINTNEXTLINE(readability-identifier-naming)
  static constexpr Backend kind = Backend::Sqlite;
  // NOLINTNEXTLINE(readability-identifier-naming)
  static constexpr ErrorSource source = ErrorSource::Sqlite;

  static std::string fresh_url() { return fresh_sqlite_url(); }

  /// An idem transaction on SQLite starts with BEGIN IMMEDIATE (it takes the write lock),
  /// so it would wait behind a concurrent writer. A plain autocommit read on the native
  /// handle reads the last committed snapshot without waiting (WAL).
  static std::int64_t read_scalar(Store& store, const std::string& sql) {
    sqlite3* db = sqlite_native_handle(store);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
      throw std::runtime_error(fmt::format("read_scalar: {}: {}", sql, sqlite3_errmsg(db)));
    }
    const int rc = sqlite3_step(st);
    const std::int64_t value = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    const std::string error = rc == SQLITE_ROW ? "" : sqlite3_errmsg(db);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW) throw std::runtime_error(fmt::format("read_scalar: {}: {}", sql, error));
    return value;
  }
};

#ifdef IDEM_TEST_HAVE_POSTGRES_BACKEND
/// PostgreSQL: a new database per fresh_url() (from tests/support/postgres_test_db.hpp).
/// Skips when IDEM_TEST_PG_DSN is unset; fails instead under CI=true.
struct PostgresBackend : TransactionalReader {
  // NOLINTNEXTLINE(readability-identifier-naming)
  static constexpr const char* name = "postgres";
  // NOLINTNEXTLINE(readability-identifier-naming)
  static constexpr Backend kind = Backend::Postgres;
  // NOLINTNEXTLINE(readability-identifier-naming)
  static constexpr ErrorSource source = ErrorSource::Postgres;

  static std::string fresh_url() {
    if (!postgres_dsn()) {
      skip_or_fail("IDEM_TEST_PG_DSN is not set; skipping the PostgreSQL backend");
      return {};
    }
    return fresh_postgres_url();
  }
};
#endif

/// Every backend this tree can test, for typed suites that run on all of them.
#ifdef IDEM_TEST_HAVE_POSTGRES_BACKEND
using AllBackends = ::testing::Types<SqliteBackend, PostgresBackend>;
#else
using AllBackends = ::testing::Types<SqliteBackend>;
#endif

/// Names typed tests after the backend ("StoreContract/sqlite.MarkReturnsTrue...").
struct BackendName {
  template <class Backend>
  // NOLINTNEXTLINE(readability-identifier-naming)
  static std::string GetName(int) {
    return Backend::name;
  }
};

}  // namespace idem::test
