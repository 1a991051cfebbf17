#pragma once
// Test-run settings read from the environment. Only tests read the environment
// this way; the library never does.
#include <optional>
#include <string>

namespace idem::test {

/// Value of an environment variable, or nullopt when unset or empty.
std::optional<std::string> env(const char* name);

/// True when running under CI (CI=true): services that tests need must then be
/// present, and a missing one fails the test instead of skipping it.
bool in_ci();

/// IDEM_TEST_PG_DSN, or nullopt. Tests that need PostgreSQL call
/// require_postgres_dsn() from a GTest body: it skips locally, fails under CI.
std::optional<std::string> postgres_dsn();

}  // namespace idem::test

/// Use inside a TEST body: yields the DSN or skips (fails under CI=true).
#define IDEM_REQUIRE_POSTGRES_DSN(var)                                                \
  const auto var##_opt = ::idem::test::postgres_dsn();                                \
  if (!var##_opt) {                                                                   \
    if (::idem::test::in_ci()) FAIL() << "IDEM_TEST_PG_DSN is not set under CI=true"; \
    GTEST_SKIP() << "IDEM_TEST_PG_DSN is not set; skipping PostgreSQL test";          \
  }                                                                                   \
  const std::string var = *var##_opt

/// Use inside a TEST body of a test that runs the idem CLI (IDEM_CLI_PATH): skips when
/// the build has none (IDEM_BUILD_CLI=OFF), and fails under CI=true, where it must exist.
#define IDEM_REQUIRE_CLI()                                                           \
  if (std::string(IDEM_CLI_PATH).empty()) {                                          \
    if (::idem::test::in_ci()) FAIL() << "the idem CLI is not built, under CI=true"; \
    GTEST_SKIP() << "the idem CLI is not built (IDEM_BUILD_CLI=OFF)";                \
  }
