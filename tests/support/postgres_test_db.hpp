#pragma once
// Throwaway PostgreSQL databases for tests, on the server named by IDEM_TEST_PG_DSN
// (scripts/with-postgres.sh starts one and sets it).
//
//   TEST(Something, Works) {
//     IDEM_FRESH_POSTGRES_URL(url);          // skips locally, fails under CI=true
//     auto store = idem::open_store(url);    // a new, empty database
//   }
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "support/test_env.hpp"

namespace idem::test {

/// Creates a new, empty database (idem_t_<random>) on the IDEM_TEST_PG_DSN server and
/// returns its URL for open_store(): the DSN with the database name replaced (a
/// key=value DSN comes back as "postgresql:<key=value ...>"). The database is dropped
/// (WITH (FORCE)) when the process exits normally; best effort, and only by the
/// process that created it (a forked child exiting does not drop its parent's).
/// Thread-safe. Throws std::runtime_error when IDEM_TEST_PG_DSN is unset or the
/// database cannot be created.
[[nodiscard]] std::string fresh_postgres_url();

/// The DSN (a postgresql:// URI or a key=value string) with its database replaced by `dbname`.
[[nodiscard]] std::string postgres_url_with_dbname(std::string_view dsn, std::string_view dbname);

}  // namespace idem::test

/// Use inside a TEST body: declares `var` as the URL of a fresh empty database, or
/// skips the test when IDEM_TEST_PG_DSN is unset (fails instead under CI=true).
#define IDEM_FRESH_POSTGRES_URL(var)    \
  IDEM_REQUIRE_POSTGRES_DSN(var##_dsn); \
  (void)var##_dsn;                      \
  const std::string var = ::idem::test::fresh_postgres_url()
