// A PostgreSQL store whose URL names both nodes of a real primary/standby pair
// (tests/support/replicated_postgres.hpp) across a failover: the primary SIGKILLed, the
// standby promoted. The same Store object goes on writing on the new primary, without
// being opened again; what it meets on the way is transient, never a permanent refusal.
#include <chrono>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/error.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "support/failover_test.hpp"
#include "support/replicated_postgres.hpp"
#include "support/wait.hpp"

namespace idem {
namespace store_failover_test {

using namespace std::chrono_literals;

constexpr const char* kGroup = "store-failover";

class StoreFailover : public test::FailoverTest {};

/// Marks `id` processed in a transaction of its own.
void mark(Store& store, const Uuid& id) {
  auto tx = store.begin();
  static_cast<void>(tx->mark_processed(id, kGroup));
  tx->commit();
}

TEST_F(StoreFailover, AStoreNamingBothNodesWritesOnTheNewPrimaryAfterAFailover) {
  test::ReplicatedPostgres cluster(*binaries_);
  const auto store = open_store(cluster.url());
  store->migrate();
  mark(*store, new_uuid_v7());
  const std::uint64_t reconnects_before = store->reconnects();

  cluster.crash_primary();
  cluster.promote_standby();

  const Uuid after = new_uuid_v7();
  std::vector<std::string> errors;
  const bool written = test::eventually(
      [&] {
        try {
          mark(*store, after);
          return true;
        } catch (const Error& e) {
          // The dead session, or no primary yet: worth retrying, never a refusal.
          EXPECT_TRUE(e.transient()) << e.what();
          errors.emplace_back(e.what());
          return false;
        }
      },
      60s, 50ms);
  ASSERT_TRUE(written) << "still failing: " << (errors.empty() ? "" : errors.back());
  EXPECT_GT(store->reconnects(), reconnects_before) << "the session was not replaced";
  EXPECT_EQ(cluster.query(fmt::format("SELECT count(*) FROM processed_event WHERE event_id = '{}'",
                                      after.to_string())),
            std::vector<std::string>{"1"})
      << "the mark is not on the new primary";
}

}  // namespace store_failover_test
}  // namespace idem
