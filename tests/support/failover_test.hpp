#pragma once
// What the failover tests (tests/fault/*_failover_test.cpp) share: a fixture that needs
// the idem CLI and the PostgreSQL server programs, their settings from the environment,
// and how they list what they found.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "support/replicated_postgres.hpp"
#include "support/test_env.hpp"

namespace idem::test {

/// An integer setting (IDEM_TEST_FAILOVER_*: IDEM_TEST_ variables are the tests' own, the
/// configuration loader of the processes they start ignores them), or `fallback`.
inline int failover_setting(const char* name, int fallback) {
  const auto v = env(name);
  return v ? std::stoi(*v) : fallback;
}

/// The first `n` of `items`, comma-separated, with "..." when there are more.
template <class T>
std::string first_of(const std::vector<T>& items, std::size_t n = 10) {
  const std::vector<T> some(items.begin(),
                            items.begin() + static_cast<std::ptrdiff_t>(std::min(n, items.size())));
  return fmt::format("{}{}", fmt::join(some, ", "), items.size() > some.size() ? ", ..." : "");
}

/// Skips the test without the CLI or the server programs (scripts/with-postgres.sh says
/// where they are); fails it instead under CI=true.
class FailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    IDEM_REQUIRE_CLI();
    binaries_ = postgres_binaries();
    if (!binaries_) {
      if (in_ci()) FAIL() << "IDEM_TEST_PG_BIN is not set under CI=true";
      GTEST_SKIP() << "IDEM_TEST_PG_BIN is not set (run under scripts/with-postgres.sh)";
    }
  }

  /// Migrates idem's and the reference system's tables on the cluster's primary.
  static void migrate(const ReplicatedPostgres& cluster) {
    const auto store = open_store(cluster.url());
    store->migrate();
    migrate_reference_system(*store);
  }

  std::optional<PostgresBinaries> binaries_;
};

}  // namespace idem::test
