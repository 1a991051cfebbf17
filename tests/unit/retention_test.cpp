// Retention on SQLite with an injected clock (idem/retention.hpp): the batched DELETE
// removes exactly the rows of events born before the horizon (event time, not
// processed_at), in bounded batches; published outbox rows go by published_at; a lease
// keeps one maintenance at a time; the background task runs passes until destroyed.
#include "idem/retention.hpp"
#include "idem/reference/schema.hpp"

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "idem/dedup_horizon.hpp"
#include "idem/error.hpp"
#include "idem/store.hpp"
#include "stores/dedup_retention.hpp"
#include "support/consumer_scenario.hpp"
#include "support/manual_clock.hpp"
#include "support/store_backends.hpp"
#include "support/wait.hpp"

namespace idem {
namespace retention_test {

using namespace std::chrono_literals;
using test::ManualClock;
using test::uuid_v7_born_at;

constexpr const char* kGroup = "billing";

std::int64_t scalar(Store& store, const std::string& sql) {
  auto tx = store.begin();
  const Rows rows = tx->execute(sql);
  tx->commit();
  return rows[0].int64(0);
}

bool is_marked(Store& store, const Uuid& id) {
  auto tx = store.begin();
  const Rows rows = tx->execute(
      "SELECT count(*) FROM processed_event WHERE event_id = $1 AND consumer_group = $2", id,
      kGroup);
  tx->commit();
  return rows[0].int64(0) == 1;
}

void mark_all(Store& store, const std::vector<Uuid>& ids, std::string_view group = kGroup) {
  auto tx = store.begin();
  static_cast<void>(tx->mark_processed_batch(ids, group));
  tx->commit();
}

class RetentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = test::fresh_sqlite_url();
    store_ = open_store(url_);
    idem::migrate_reference_system(*store_);
    policy_.clock = &clock_;
    policy_.dedup.retention = 7 * 24h;
    policy_.dedup.safety_margin = 1h;
  }

  ManualClock clock_{std::chrono::system_clock::now()};
  std::string url_;
  std::unique_ptr<Store> store_;
  RetentionPolicy policy_;
};

TEST_F(RetentionTest, BatchedDeleteRemovesExactlyTheEventsBornBeforeTheRetention) {
  const auto now = clock_.now();
  const auto horizon = std::chrono::floor<std::chrono::milliseconds>(now - policy_.dedup.retention);
  std::vector<Uuid> expired;
  std::vector<Uuid> kept;
  for (int i = 0; i < 23; ++i) expired.push_back(uuid_v7_born_at(now - 8 * 24h - i * 1min));
  expired.push_back(uuid_v7_born_at(horizon - 1ms));  // one millisecond too old
  kept.push_back(uuid_v7_born_at(horizon));           // exactly at the horizon: kept
  for (int i = 0; i < 14; ++i) kept.push_back(uuid_v7_born_at(now - i * 12h));  // up to 6.5 days
  kept.push_back(uuid_v7_born_at(now + 2h));  // a producer clock ahead of ours
  mark_all(*store_, expired);
  mark_all(*store_, kept);
  mark_all(*store_, expired, "analytics");  // every group's rows age the same way

  policy_.batch_size = 7;
  const MaintenanceReport report = run_maintenance(*store_, policy_);
  EXPECT_TRUE(report.ran);
  EXPECT_FALSE(report.partitioned);
  EXPECT_EQ(report.dedup_rows_deleted, 48);
  EXPECT_GE(report.batches, 48u / 7u);  // bounded batches, not one statement
  for (const Uuid& id : expired) EXPECT_FALSE(is_marked(*store_, id)) << id.to_string();
  for (const Uuid& id : kept) EXPECT_TRUE(is_marked(*store_, id)) << id.to_string();
  EXPECT_EQ(scalar(*store_, "SELECT count(*) FROM processed_event"),
            static_cast<std::int64_t>(kept.size()));

  // Ageing is by event time: marking an old event again now does not make it young.
  mark_all(*store_, {expired[0]});
  EXPECT_EQ(run_maintenance(*store_, policy_).dedup_rows_deleted, 1);

  // A day later the youngest kept rows are still there and the oldest two days went.
  clock_.advance(24h);
  const MaintenanceReport later = run_maintenance(*store_, policy_);
  EXPECT_EQ(later.dedup_rows_deleted, 2);  // the horizon row and the one born 6.5 days ago
  EXPECT_NE(later.summary().find("dedup_rows_deleted=2"), std::string::npos) << later.summary();
}

TEST_F(RetentionTest, MaxBatchesBoundsOnePass) {
  std::vector<Uuid> expired;
  for (int i = 0; i < 50; ++i) expired.push_back(uuid_v7_born_at(clock_.now() - 10 * 24h - i * 1s));
  mark_all(*store_, expired);
  policy_.batch_size = 10;
  policy_.max_batches = 2;
  EXPECT_EQ(run_maintenance(*store_, policy_).dedup_rows_deleted, 20);
  policy_.max_batches = 0;
  EXPECT_EQ(run_maintenance(*store_, policy_).dedup_rows_deleted, 30);
}

TEST_F(RetentionTest, PublishedOutboxRowsGoByPublishedAt) {
  const auto ms = [](std::chrono::system_clock::time_point t) {
    return static_cast<std::int64_t>(
        std::chrono::floor<std::chrono::milliseconds>(t).time_since_epoch().count());
  };
  {
    auto tx = store_->begin();
    const auto insert = [&](std::optional<std::int64_t> published_at) {
      tx->execute(
          "INSERT INTO idem_outbox (event_id, aggregate_type, aggregate_id, topic, message_key, "
          "shard, "
          "payload, published_at) VALUES ($1, 'order', '1', 't', '1', 0, '{}', $2)",
          new_uuid_v7(), published_at);
    };
    insert(ms(clock_.now() - 30h));  // published long ago: deleted
    insert(ms(clock_.now() - 25h));  // deleted
    insert(ms(clock_.now() - 1h));   // recent: kept
    insert(std::nullopt);            // not yet published: never deleted
    tx->commit();
  }
  policy_.outbox_retention = 24h;
  EXPECT_EQ(run_maintenance(*store_, policy_).outbox_rows_deleted, 2);
  EXPECT_EQ(scalar(*store_, "SELECT count(*) FROM idem_outbox"), 2);
  EXPECT_EQ(scalar(*store_, "SELECT count(*) FROM idem_outbox WHERE published_at IS NULL"), 1);
  policy_.outbox_retention = 0ms;  // keep all
  clock_.advance(100h);
  EXPECT_EQ(run_maintenance(*store_, policy_).outbox_rows_deleted, 0);
}

TEST_F(RetentionTest, OneMaintenanceAtATimeThroughALease) {
  mark_all(*store_, {uuid_v7_born_at(clock_.now() - 10 * 24h)});
  // Another process holds the lease for five more minutes.
  {
    auto tx = store_->begin();
    tx->execute(
        "INSERT INTO idem_lease (name, holder, expires_at) VALUES ('maintenance', 'other', $1)",
        static_cast<std::int64_t>(std::chrono::floor<std::chrono::milliseconds>(clock_.now() + 5min)
                                      .time_since_epoch()
                                      .count()));
    tx->commit();
  }
  const MaintenanceReport blocked = run_maintenance(*store_, policy_);
  EXPECT_FALSE(blocked.ran);
  EXPECT_EQ(blocked.dedup_rows_deleted, 0);
  EXPECT_NE(blocked.summary().find("skipped"), std::string::npos);

  // Its holder crashed: once the lease expires, the next run takes it, and releases it.
  clock_.advance(6min);
  const MaintenanceReport ran = run_maintenance(*store_, policy_);
  EXPECT_TRUE(ran.ran);
  EXPECT_EQ(ran.dedup_rows_deleted, 1);
  EXPECT_EQ(scalar(*store_, "SELECT count(*) FROM idem_lease"), 0);
}

TEST_F(RetentionTest, BadPoliciesAreRejected) {
  RetentionPolicy p = policy_;
  p.dedup.safety_margin = p.dedup.retention;
  EXPECT_THROW(static_cast<void>(run_maintenance(*store_, p)), Error);
  p = policy_;
  p.batch_size = 0;
  EXPECT_THROW(static_cast<void>(run_maintenance(*store_, p)), Error);
}

TEST_F(RetentionTest, BackgroundTaskRunsPassesUntilDestroyed) {
  mark_all(*store_, {uuid_v7_born_at(clock_.now() - 9 * 24h), uuid_v7_born_at(clock_.now())});
  std::atomic<std::int64_t> deleted{0};
  std::atomic<int> errors{0};
  {
    MaintenanceTask task(
        url_, policy_, 20ms,
        [&](const MaintenanceReport& r) { deleted.fetch_add(r.dedup_rows_deleted); },
        [&](std::string_view) { errors.fetch_add(1); });
    ASSERT_TRUE(test::eventually([&] { return task.passes() >= 2; }, 10s));
    // A row that expires while the task runs goes on a later pass.
    mark_all(*store_, {uuid_v7_born_at(clock_.now() - 8 * 24h)});
    ASSERT_TRUE(test::eventually([&] { return deleted.load() == 2; }, 10s));
  }
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(scalar(*store_, "SELECT count(*) FROM processed_event"), 1);
}

// One dedup retention per store (docs/retention.md): a pass keeps marks for the longest
// live declaration, ignores expired ones, records what it dropped; forget removes a group.
TEST_F(RetentionTest, APassKeepsTheLongestLiveDeclarationAndRecordsWhatItDropped) {
  const auto now = clock_.now();
  policy_.dedup.retention = 48h;
  const Uuid born_3d = uuid_v7_born_at(now - 72h);
  const Uuid born_6d = uuid_v7_born_at(now - 6 * 24h);
  const Uuid born_9d = uuid_v7_born_at(now - 9 * 24h);
  mark_all(*store_, {born_3d, born_6d, born_9d});
  // Two groups with different horizons, and a group last seen 9 days ago whose 8-day
  // declaration expired yesterday.
  static_cast<void>(detail::declare_dedup_retention(*store_, "billing", 7 * 24h, "a", now - 1h));
  static_cast<void>(detail::declare_dedup_retention(*store_, "analytics", 96h, "b", now));
  static_cast<void>(detail::declare_dedup_retention(*store_, "gone", 8 * 24h, "c", now - 9 * 24h));

  const MaintenanceReport report = run_maintenance(*store_, policy_);
  EXPECT_EQ(report.dedup_retention, 7 * 24h) << report.summary();
  EXPECT_EQ(report.configured_dedup_retention, 48h);
  ASSERT_EQ(report.retention_held_by.size(), 2u);  // analytics (96 h) and billing (168 h)
  ASSERT_EQ(report.expired_declarations.size(), 1u);
  EXPECT_EQ(report.expired_declarations[0].consumer_group, "gone");
  EXPECT_EQ(report.dedup_rows_deleted, 1);  // only the 9-day-old mark
  EXPECT_TRUE(is_marked(*store_, born_3d));
  EXPECT_TRUE(is_marked(*store_, born_6d));
  const auto notes = report.retention_notes();
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("kept dedup marks for 168 h instead of the configured 48 h"),
            std::string::npos)
      << notes[0];
  EXPECT_NE(notes[1].find("ignored the expired declaration of consumer group 'gone'"),
            std::string::npos)
      << notes[1];
  EXPECT_EQ(dropped_dedup_marks(*store_).born_before,
            std::chrono::floor<std::chrono::milliseconds>(now - 7 * 24h));

  // Once billing is forgotten, analytics' 96 h holds; a consumer declaring now learns that
  // marks of events born before now - 96 h may be gone.
  EXPECT_EQ(forget_dedup_retention(*store_, "billing"), 1);
  const MaintenanceReport second = run_maintenance(*store_, policy_);
  EXPECT_EQ(second.dedup_retention, 96h);
  EXPECT_EQ(second.dedup_rows_deleted, 1);  // the 6-day-old mark
  EXPECT_TRUE(is_marked(*store_, born_3d));
  const DroppedDedupMarks dropped =
      detail::declare_dedup_retention(*store_, "billing", 7 * 24h, "a", now);
  EXPECT_EQ(dropped.born_before, std::chrono::floor<std::chrono::milliseconds>(now - 96h));
  EXPECT_EQ(dropped.retention, 96h);
}

TEST_F(RetentionTest, ADeclarationIsRenewedInPlaceAndListed) {
  const auto now = clock_.now();
  static_cast<void>(detail::declare_dedup_retention(*store_, "billing", 7 * 24h, "a", now - 2h));
  static_cast<void>(detail::declare_dedup_retention(*store_, "billing", 7 * 24h, "b", now));
  static_cast<void>(detail::declare_dedup_retention(*store_, "billing", 24h, "c", now));
  const auto declarations = dedup_retention_declarations(*store_);
  ASSERT_EQ(declarations.size(), 2u);  // one per retention: a rolling change keeps the longer
  EXPECT_EQ(declarations[1].retention, 7 * 24h);
  EXPECT_EQ(declarations[1].declared_by, "b");
  EXPECT_EQ(declarations[1].expires_at(),
            std::chrono::floor<std::chrono::milliseconds>(now) + 7 * 24h);
  // A pass that finds no mark that old records nothing: a group starting later on this
  // store processes its backlog as usual.
  mark_all(*store_, {uuid_v7_born_at(now - 1h)});
  policy_.dedup.retention = 48h;
  static_cast<void>(forget_dedup_retention(*store_, "billing"));
  static_cast<void>(run_maintenance(*store_, policy_));
  EXPECT_EQ(dropped_dedup_marks(*store_).born_before.time_since_epoch().count(), 0);
}

TEST_F(RetentionTest, AStoreWithoutTheRetentionTablesIsRefused) {
  {
    auto tx = store_->begin();
    tx->execute("DROP TABLE idem_dedup_marks_dropped");
    tx->commit();
  }
  try {
    static_cast<void>(run_maintenance(*store_, policy_));
    FAIL() << "maintenance ran on a store that cannot record its retention";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Schema);
    EXPECT_NE(std::string(e.what()).find("run `idem migrate`"), std::string::npos) << e.what();
  }
}

TEST(DedupHorizonTest, StaleMeansBornBeforeRetentionMinusMargin) {
  const DedupHorizon h{7 * 24h, 1h};
  const auto now = std::chrono::system_clock::now();
  EXPECT_FALSE(h.is_stale(uuid_v7_born_at(now - 7 * 24h + 1h + 1s), now));
  EXPECT_TRUE(h.is_stale(uuid_v7_born_at(now - 7 * 24h + 1h - 1s), now));
  EXPECT_FALSE(h.is_stale(uuid_v7_born_at(now + 1h), now));
  EXPECT_EQ(h.stale_age(), 7 * 24h - 1h);
}

}  // namespace retention_test
}  // namespace idem
