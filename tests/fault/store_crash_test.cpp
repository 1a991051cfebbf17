// Crash tests for the dedup store (IDEM-3): a consumer process is SIGKILLed right after
// its database COMMIT, or in the middle of its transaction. The assertion is always
// about the effect: after a crash after commit the mark and the effect are both there
// (redelivery will be skipped); after a crash before commit neither is (redelivery will
// process the event, once).
//
// Runs on SQLite always and on PostgreSQL when IDEM_TEST_PG_DSN is set (skipped
// otherwise, a failure under CI=true).
#include <signal.h>

#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "support/process.hpp"
#include "support/store_backends.hpp"

namespace store_crash_test {

using namespace std::chrono_literals;
using idem::test::child_program;
using idem::test::ChildProcess;
using idem::test::expect_line;

constexpr int kIterations = 5;
constexpr const char* kGroup = "billing-order-confirmed";

template <class Backend>
class StoreCrash : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = Backend::fresh_url();
    if (this->IsSkipped() || this->HasFatalFailure()) return;
    ASSERT_FALSE(url_.empty());
    idem::migrate_reference_system(*idem::open_store(url_));
  }

  ChildProcess start_child(const char* mode, const idem::Uuid& id) {
    return ChildProcess::spawn(child_program("store_child"), {mode, url_, id.to_string(), kGroup});
  }

  /// Effect rows for `id`, read through a new connection.
  std::int64_t ledger_rows(idem::Store& store, const idem::Uuid& id) {
    auto tx = store.begin();
    const auto rows = tx->execute("SELECT count(*) FROM billing_ledger WHERE event_id = $1", id);
    tx->commit();
    return rows[0].int64(0);
  }

  std::string url_;
};

TYPED_TEST_SUITE(StoreCrash, idem::test::AllBackends, idem::test::BackendName);

TYPED_TEST(StoreCrash, KillAfterCommitKeepsTheMarkAndTheEffect) {
  for (int i = 0; i < kIterations; ++i) {
    SCOPED_TRACE(testing::Message() << "iteration " << i);
    const idem::Uuid id = idem::new_uuid_v7();
    auto child = this->start_child("commit-then-wait", id);
    std::vector<std::string> other;
    ASSERT_TRUE(expect_line(child, "committed", 60s, &other))
        << "child said: " << (other.empty() ? "(nothing)" : other.back());
    child.kill(SIGKILL);
    ASSERT_EQ(child.wait(30s), -SIGKILL);

    auto store = idem::open_store(this->url_);
    {
      auto tx = store->begin();
      EXPECT_FALSE(tx->mark_processed(id, kGroup)) << "the committed mark was lost";
      tx->commit();
    }
    EXPECT_EQ(this->ledger_rows(*store, id), 1) << "the committed effect was lost";
  }
}

TYPED_TEST(StoreCrash, KillBeforeCommitLeavesNeitherMarkNorEffect) {
  for (int i = 0; i < kIterations; ++i) {
    SCOPED_TRACE(testing::Message() << "iteration " << i);
    const idem::Uuid id = idem::new_uuid_v7();
    auto child = this->start_child("mark-then-wait", id);
    std::vector<std::string> other;
    ASSERT_TRUE(expect_line(child, "marked", 60s, &other))
        << "child said: " << (other.empty() ? "(nothing)" : other.back());
    child.kill(SIGKILL);
    ASSERT_EQ(child.wait(30s), -SIGKILL);

    // A new connection (the restarted consumer): the event is new, with no effect, and
    // processing it now works and happens once.
    auto store = idem::open_store(this->url_);
    EXPECT_EQ(this->ledger_rows(*store, id), 0) << "an uncommitted effect survived the crash";
    {
      auto tx = store->begin();
      EXPECT_TRUE(tx->mark_processed(id, kGroup)) << "an uncommitted mark survived the crash";
      tx->commit();
    }
    auto tx = store->begin();
    EXPECT_FALSE(tx->mark_processed(id, kGroup));
  }
}

}  // namespace store_crash_test
