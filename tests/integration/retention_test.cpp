// Retention against a real PostgreSQL (and SQLite for the concurrent scenario), with an
// injected clock: partitions are created ahead and dropped only when every event they
// can hold is past the retention; ids outside every partition (a producer clock far
// ahead, or older than the oldest partition) are handled explicitly; the batched
// DELETE removes exactly the expired rows while a consumer runs, and every event still
// has exactly one effect; an advisory lock keeps one maintenance at a time.
#include "idem/retention.hpp"
#include "idem/reference/schema.hpp"

#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/consumer.hpp"
#include "idem/reference/count_handler.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/store.hpp"
#include "support/consumer_scenario.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/manual_clock.hpp"
#include "support/postgres_test_db.hpp"
#include "support/shared_broker.hpp"
#include "support/store_backends.hpp"
#include "support/wait.hpp"

namespace idem {
namespace retention_test {

using namespace std::chrono_literals;
using std::chrono::sys_days;
using test::ManualClock;
using test::uuid_v7_born_at;

constexpr sys_days kDayD = sys_days(std::chrono::year(2026) / 3 / 10);
constexpr const char* kGroup = "billing";

template <class... Args>
std::int64_t int_of(Store& store, std::string_view sql, const Args&... args) {
  auto tx = store.begin();
  const Rows rows = tx->execute(sql, args...);
  tx->commit();
  return rows[0].int64(0);
}

bool mark(Store& store, const Uuid& id, std::string_view group = kGroup) {
  auto tx = store.begin();
  const bool first = tx->mark_processed(id, group);
  tx->commit();
  return first;
}

std::set<std::string> partitions(Store& store) {
  auto tx = store.begin();
  const Rows rows = tx->execute(
      "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
      "WHERE i.inhparent = 'processed_event'::regclass");
  tx->commit();
  std::set<std::string> out;
  for (const RowView r : rows) out.emplace(r.text(0));
  return out;
}

std::int64_t rows_in(Store& store, const std::string& table) {
  return int_of(store, fmt::format("SELECT count(*) FROM {}", table));
}

MigrateOptions partitioned(const Clock& clock, int behind, int ahead) {
  MigrateOptions o;
  o.partitioned = true;
  o.partitions_behind = behind;
  o.partitions_ahead = ahead;
  o.clock = &clock;
  return o;
}

RetentionPolicy policy_for(const Clock& clock, int ahead = 3) {
  RetentionPolicy p;
  p.clock = &clock;
  p.dedup.retention = 7 * 24h;
  p.dedup.safety_margin = 1h;
  p.partitions_ahead = ahead;
  p.batch_size = 100;
  return p;
}

TEST(PostgresRetention, PartitionsAreCreatedAheadAndDroppedOnlyWhenFullyExpired) {
  IDEM_FRESH_POSTGRES_URL(url);
  ManualClock clock(kDayD + 12h);
  auto store = open_store(url);
  idem::migrate_reference_system(*store, partitioned(clock, 2, 1));  // D-2 .. D+1, plus DEFAULT
  ASSERT_EQ(partitions(*store),
            (std::set<std::string>{"processed_event_p20260308", "processed_event_p20260309",
                                   "processed_event_p20260310", "processed_event_p20260311",
                                   "processed_event_default"}));
  const Uuid early_d_minus_2 = uuid_v7_born_at(kDayD - std::chrono::days(2) + 1h);
  const Uuid late_d_minus_2 = uuid_v7_born_at(kDayD - std::chrono::days(2) + 23h);
  const Uuid d_minus_1 = uuid_v7_born_at(kDayD - std::chrono::days(1) + 6h);
  ASSERT_TRUE(mark(*store, early_d_minus_2));
  ASSERT_TRUE(mark(*store, late_d_minus_2));
  ASSERT_TRUE(mark(*store, d_minus_1));

  // Same day: three partitions ahead are created, nothing is dropped.
  MaintenanceReport r = run_maintenance(*store, policy_for(clock));
  ASSERT_TRUE(r.ran);
  EXPECT_TRUE(r.partitioned);
  EXPECT_EQ(r.partitions_created,
            (std::vector<std::string>{"processed_event_p20260312", "processed_event_p20260313"}));
  EXPECT_TRUE(r.partitions_dropped.empty());
  EXPECT_TRUE(run_maintenance(*store, policy_for(clock)).partitions_created.empty())
      << "idempotent";

  // D+5 12:00: the horizon (now - 7 days) is D-2 12:00. Partition D-2 holds an event
  // born at 01:00 (expired) and one at 23:00 (not yet): it must stay.
  clock.set(kDayD + std::chrono::days(5) + 12h);
  r = run_maintenance(*store, policy_for(clock));
  EXPECT_TRUE(r.partitions_dropped.empty());
  EXPECT_EQ(r.partitions_created,
            (std::vector<std::string>{"processed_event_p20260314", "processed_event_p20260315",
                                      "processed_event_p20260316", "processed_event_p20260317",
                                      "processed_event_p20260318"}));
  EXPECT_FALSE(mark(*store, early_d_minus_2)) << "a partially expired partition keeps every row";
  EXPECT_FALSE(mark(*store, late_d_minus_2));

  // D+6 00:00 exactly: the horizon is D-1 00:00, the upper bound of partition D-2: every
  // event it can hold was born before the horizon, so it is dropped; D-1 stays.
  clock.set(kDayD + std::chrono::days(6));
  r = run_maintenance(*store, policy_for(clock));
  EXPECT_EQ(r.partitions_dropped, (std::vector<std::string>{"processed_event_p20260308"}));
  EXPECT_EQ(partitions(*store).count("processed_event_p20260309"), 1u);
  EXPECT_EQ(int_of(*store, "SELECT count(*) FROM processed_event WHERE event_id = $1", d_minus_1),
            1);
  EXPECT_EQ(rows_in(*store, "processed_event"), 1);
  EXPECT_NE(r.summary().find("partitions_dropped=processed_event_p20260308"), std::string::npos)
      << r.summary();
}

TEST(PostgresRetention, IdsOutsideEveryPartitionAreHandledExplicitly) {
  IDEM_FRESH_POSTGRES_URL(url);
  ManualClock clock(kDayD + 12h);
  auto store = open_store(url);
  idem::migrate_reference_system(*store, partitioned(clock, 1, 1));  // D-1 .. D+1
  // A producer whose clock is 10 days ahead, and an event from before the oldest partition.
  const Uuid future = uuid_v7_born_at(kDayD + std::chrono::days(10) + 2h);
  const Uuid ancient = uuid_v7_born_at(kDayD - std::chrono::days(30));
  const Uuid recent_old = uuid_v7_born_at(kDayD - std::chrono::days(3));  // not yet expired
  ASSERT_TRUE(mark(*store, future));
  ASSERT_TRUE(mark(*store, ancient));
  ASSERT_TRUE(mark(*store, recent_old));
  EXPECT_EQ(rows_in(*store, "processed_event_default"), 3);

  // The too-old one is deleted from the DEFAULT partition; the others stay deduplicated.
  MaintenanceReport r = run_maintenance(*store, policy_for(clock));
  EXPECT_EQ(r.dedup_rows_deleted, 1);
  EXPECT_FALSE(mark(*store, future));
  EXPECT_FALSE(mark(*store, recent_old));
  EXPECT_EQ(rows_in(*store, "processed_event_default"), 2);

  // Eight days later partitions reach D+10 + 1: creating D+10's partition moves the
  // future row out of DEFAULT into it (CREATE would otherwise fail), and it still dedups.
  clock.set(kDayD + std::chrono::days(8) + 12h);
  r = run_maintenance(*store, policy_for(clock));
  EXPECT_EQ(r.rows_moved_from_default, 1);
  EXPECT_EQ(rows_in(*store, "processed_event_p20260320"), 1);
  EXPECT_FALSE(mark(*store, future));
  EXPECT_EQ(r.dedup_rows_deleted, 1)
      << "recent_old expired meanwhile (born D-3, horizon D+1 12:00)";
  EXPECT_EQ(rows_in(*store, "processed_event_default"), 0);
}

TEST(PostgresRetention, UnpartitionedTableDeletesExactlyTheExpiredRowsInBatches) {
  IDEM_FRESH_POSTGRES_URL(url);
  ManualClock clock(kDayD);
  auto store = open_store(url);
  idem::migrate_reference_system(*store);
  std::vector<Uuid> expired;
  std::vector<Uuid> kept;
  for (int i = 0; i < 250; ++i)
    expired.push_back(uuid_v7_born_at(kDayD - 7 * 24h - 1ms - i * 1min));
  for (int i = 0; i < 40; ++i) kept.push_back(uuid_v7_born_at(kDayD - 7 * 24h + i * 1min));
  {
    auto tx = store->begin();
    static_cast<void>(tx->mark_processed_batch(expired, kGroup));
    static_cast<void>(tx->mark_processed_batch(kept, kGroup));
    tx->commit();
  }
  RetentionPolicy policy = policy_for(clock);
  policy.outbox_retention = 0ms;  // dedup rows only, so every batch counted is one of theirs
  const MaintenanceReport r = run_maintenance(*store, policy);
  EXPECT_FALSE(r.partitioned);
  EXPECT_EQ(r.dedup_rows_deleted, 250);
  EXPECT_EQ(r.batches, 3u);  // 100 + 100 + 50
  for (const Uuid& id : kept) EXPECT_FALSE(mark(*store, id));
  EXPECT_EQ(rows_in(*store, "processed_event"), 40);
}

TEST(PostgresRetention, AnAdvisoryLockKeepsOneMaintenanceAtATime) {
  IDEM_FRESH_POSTGRES_URL(url);
  ManualClock clock(kDayD);
  auto store = open_store(url);
  idem::migrate_reference_system(*store);
  ASSERT_TRUE(mark(*store, uuid_v7_born_at(kDayD - 10 * 24h)));
  auto other = open_store(url);
  {
    auto tx = other->begin();
    tx->execute("SELECT pg_advisory_lock(1768189294, 1)");  // what a running maintenance holds
    tx->commit();
  }
  EXPECT_FALSE(run_maintenance(*store, policy_for(clock)).ran);
  other.reset();  // its session ends, and the lock with it...
  // ...once the server has noticed the disconnect, which is asynchronous: wait for it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    auto tx = store->begin();
    const auto held =
        tx->execute(
              "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1768189294 "
              "AND objid = 1 AND pid <> pg_backend_pid()")[0]
            .int64(0);
    tx->commit();
    if (held == 0) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the closed session's lock stayed";
  }
  const MaintenanceReport r = run_maintenance(*store, policy_for(clock));
  EXPECT_TRUE(r.ran);
  EXPECT_EQ(r.dedup_rows_deleted, 1);
}

// --- batched delete while a consumer runs --------------------------------------------

OrderConfirmed make_event(std::int64_t order_id) {
  OrderConfirmed e;
  e.event_id = new_uuid_v7();
  e.occurred_at =
      std::chrono::time_point_cast<std::chrono::microseconds>(std::chrono::system_clock::now());
  e.order_id = order_id;
  e.customer_id = 3;
  e.total_amount = Amount::from_hundredths(990);
  return e;
}

void delete_while_consuming(const std::string& url) {
  test::SharedBroker& broker = test::shared_broker();
  const std::string topic = test::unique_name("ttl");
  const std::string group =
      test::unique_name("billing");  // on the shared broker: a group of its own
  broker.create_topic(topic, 3);
  broker.create_topic(topic + ".dlq", 1);
  auto observer = open_store(url);
  idem::migrate_reference_system(*observer);

  // 6000 expired marks of this group, born 8 to 9 days ago.
  const auto now = std::chrono::system_clock::now();
  constexpr int kExpired = 6000;
  for (int chunk = 0; chunk < kExpired / 1000; ++chunk) {
    std::vector<Uuid> ids;
    for (int i = 0; i < 1000; ++i)
      ids.push_back(uuid_v7_born_at(now - 8 * 24h - (chunk * 1000 + i) * 5s));
    auto tx = observer->begin();
    static_cast<void>(tx->mark_processed_batch(ids, group));
    tx->commit();
  }

  std::vector<OrderConfirmed> events;
  std::vector<test::TestRecord> first_half;
  std::vector<test::TestRecord> second_half;
  for (int i = 1; i <= 400; ++i) {
    events.push_back(make_event(i));
    const auto& e = events.back();
    test::TestRecord r{
        topic, std::to_string(e.order_id), to_json(e), {{"event_id", e.event_id.to_string()}}, -1};
    (i <= 200 ? first_half : second_half).push_back(r);
    if (i % 5 == 0) second_half.push_back(r);  // resends of 80 events, after the cleanup started
  }
  const auto produce = [&](const std::vector<test::TestRecord>& records) {
    test::KafkaTestProducer producer(broker.bootstrap_servers());
    for (const auto& r : records) producer.send(r);
    producer.flush();
  };
  produce(first_half);

  ConsumerConfig config = test::mock_consumer_config(broker.bootstrap_servers(), group, {topic});
  config.batch_size = 20;  // many small transactions, interleaving with the cleanup's
  auto c = std::make_unique<Consumer>(config, open_store(url));
  c->on<OrderConfirmed>(topic, count_handler<OrderConfirmed>());
  test::RunningConsumer consumer(std::move(c));
  ASSERT_TRUE(test::eventually([&] { return consumer->stats().processed > 0; }, 60s));

  // Cleanup starts while the consumer is mid-stream, in small batches on its own connection.
  RetentionPolicy policy;
  policy.batch_size = 50;
  policy.batch_pause = 1ms;
  std::atomic<bool> cleaning{true};
  std::atomic<std::int64_t> deleted{0};
  std::atomic<std::int64_t> passes_during_consumption{0};
  std::string cleaner_error;
  std::thread cleaner([&] {
    try {
      auto store = open_store(url);
      while (cleaning.load()) {
        deleted.fetch_add(run_maintenance(*store, policy).dedup_rows_deleted);
        passes_during_consumption.fetch_add(1);
      }
    } catch (const std::exception& e) {
      cleaner_error = e.what();
    }
  });
  // Whatever happens below (a failed assertion, an exception), the cleaner stops and joins.
  struct StopCleaner {
    std::atomic<bool>& cleaning;
    std::thread& cleaner;
    ~StopCleaner() {
      cleaning.store(false);
      if (cleaner.joinable()) cleaner.join();
    }
  } stop_cleaner{cleaning, cleaner};
  produce(second_half);
  const bool caught_up = test::eventually(
      [&] {
        try {  // the observer's transaction competes for SQLite's write lock: busy is no answer
          return count_effects(*observer, group) >= 400 && consumer->stats().duplicates >= 80;
        } catch (const Error& e) {
          if (!e.transient()) throw;
          return false;
        }
      },
      60s, 10ms);
  cleaning.store(false);
  cleaner.join();
  EXPECT_EQ(cleaner_error, "");
  EXPECT_TRUE(consumer.stop());
  ASSERT_TRUE(caught_up);
  EXPECT_FALSE(consumer.error());
  EXPECT_GT(passes_during_consumption.load(), 0);

  // Exactly the expired rows went; every consumed event is still marked, once; one effect each.
  EXPECT_EQ(deleted.load(), kExpired);
  EXPECT_EQ(
      int_of(*observer, "SELECT count(*) FROM processed_event WHERE consumer_group = $1", group),
      400);
  EXPECT_EQ(count_effects(*observer, group), 400);
  EXPECT_EQ(max_effects_per_event(*observer, group), 1);
}

TEST(RetentionWhileConsuming, SqliteBatchedDeleteKeepsEffectsExactlyOnce) {
  delete_while_consuming(test::fresh_sqlite_url());
}

TEST(RetentionWhileConsuming, PostgresBatchedDeleteKeepsEffectsExactlyOnce) {
  IDEM_FRESH_POSTGRES_URL(url);
  delete_while_consuming(url);
}

}  // namespace retention_test
}  // namespace idem
