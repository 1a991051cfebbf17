// The PostgreSQL dedup store: the shared store contract, plus what only PostgreSQL
// has (range partitions on event_id, in-doubt commits, reconnects, SQLSTATE classes).
//
// Needs IDEM_TEST_PG_DSN (scripts/with-postgres.sh sets it); without it the tests
// skip, and under CI=true they fail. The partition planning tests need no server.
#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/clock.hpp"
#include "idem/error.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "idem/stores/postgres.hpp"
#include "idem/stores/sqlite.hpp"
#include "idem/uuid.hpp"
#include "stores/migration.hpp"
#include "stores/postgres/pg_conninfo.hpp"
#include "stores/postgres/pg_partitions.hpp"
#include "support/manual_clock.hpp"
#include "support/postgres_test_db.hpp"
#include "support/store_backends.hpp"
#include "support/store_contract.hpp"
#include "support/test_env.hpp"

namespace idem::test {

INSTANTIATE_TYPED_TEST_SUITE_P(Postgres, StoreContract, ::testing::Types<PostgresBackend>,
                               BackendName);

namespace postgres_store_test {

using namespace std::chrono_literals;
using std::chrono::sys_days;
using TimePoint = std::chrono::system_clock::time_point;

using test::ManualClock;

constexpr sys_days kDayD = sys_days(std::chrono::year(2026) / 3 / 10);
constexpr const char* kGroup = "billing-order-confirmed";

/// A UUIDv7 born at `t`.
Uuid uuid_born_at(TimePoint t) {
  const ManualClock clock(t);
  UuidV7Generator generator(clock);
  return generator.next();
}

/// Runs `sql` in its own transaction; the first cell as text ("" for no row or NULL).
template <class... Args>
std::string text_of(Store& store, std::string_view sql, const Args&... args) {
  auto tx = store.begin();
  const Rows rows = tx->execute(sql, args...);
  tx->commit();
  if (rows.empty() || rows[0].is_null(0)) return "";
  return std::string(rows[0].text(0));
}

template <class... Args>
std::int64_t int_of(Store& store, std::string_view sql, const Args&... args) {
  auto tx = store.begin();
  const Rows rows = tx->execute(sql, args...);
  tx->commit();
  if (rows.empty()) throw std::runtime_error(fmt::format("no row from {}", sql));
  return rows[0].int64(0);
}

bool mark_committed(Store& store, const Uuid& id, std::string_view group = kGroup) {
  auto tx = store.begin();
  const bool first = tx->mark_processed(id, group);
  tx->commit();
  return first;
}

/// The backend pid of `store`'s session (no transaction may be open).
int backend_pid(Store& store) {
  return PQbackendPID(postgres_native_handle(store));
}

/// Ends the session `pid` from another connection and waits until it is gone.
void terminate_backend(Store& admin, int pid) {
  ASSERT_EQ(text_of(admin, "SELECT pg_terminate_backend($1)", pid), "t");
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (int_of(admin, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid) != 0) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "backend " << pid << " did not exit";
    std::this_thread::sleep_for(5ms);
  }
}

/// How many migrations idem ships for PostgreSQL, and the newest version.
std::size_t migration_count() {
  return detail::postgres_sql::migrations().size();
}
int latest_version() {
  return detail::postgres_sql::migrations().back().version;
}

MigrateOptions partitioned_options(const Clock& clock, int behind, int ahead,
                                   std::chrono::hours period = 24h) {
  MigrateOptions options;
  options.partitioned = true;
  options.partition_period = period;
  options.partitions_behind = behind;
  options.partitions_ahead = ahead;
  options.clock = &clock;
  return options;
}

/// Each test gets a new empty database and an unmigrated store on it.
class PostgresStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = PostgresBackend::fresh_url();
    if (IsSkipped() || HasFatalFailure()) return;
    store_ = open_store(url_);
    admin_ = open_store(url_);
  }

  std::string url_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Store> admin_;  // a second connection, for watching and killing
};

// ---- partition planning (no server) ---------------------------------------------

TEST(PostgresPartitionPlan, DailyPartitionsAroundNowAlignedToUtcMidnight) {
  const ManualClock clock(kDayD + 15h + 7min);
  const auto plan = detail::pg::plan_partitions(partitioned_options(clock, 2, 3), clock.now());
  ASSERT_EQ(plan.size(), 6u);  // 2 behind + today + 3 ahead
  const std::vector<std::string> names{"processed_event_p20260308", "processed_event_p20260309",
                                       "processed_event_p20260310", "processed_event_p20260311",
                                       "processed_event_p20260312", "processed_event_p20260313"};
  for (std::size_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(plan[i].name, names[i]);
    EXPECT_EQ(plan[i].from, kDayD + (static_cast<int>(i) - 2) * std::chrono::days(1));
    EXPECT_EQ(plan[i].to, plan[i].from + std::chrono::days(1));
  }
  const std::string ddl = detail::pg::partition_ddl(plan[2]);
  EXPECT_NE(ddl.find("processed_event_p20260310 PARTITION OF processed_event FOR VALUES FROM ('" +
                     Uuid::lower_bound_for(kDayD).to_string() + "') TO ('" +
                     Uuid::lower_bound_for(kDayD + std::chrono::days(1)).to_string() + "')"),
            std::string::npos)
      << ddl;
}

TEST(PostgresPartitionPlan, SubDayPeriodsCarryTheHourInTheName) {
  const ManualClock clock(kDayD + 13h + 59min);
  const auto plan = detail::pg::plan_partitions(partitioned_options(clock, 1, 1, 6h), clock.now());
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].name, "processed_event_p2026031006");
  EXPECT_EQ(plan[1].name, "processed_event_p2026031012");
  EXPECT_EQ(plan[2].name, "processed_event_p2026031018");
  EXPECT_EQ(plan[1].from, kDayD + 12h);
}

TEST(PostgresPartitionPlan, RejectsNonsense) {
  const ManualClock clock(kDayD);
  EXPECT_THROW((void)detail::pg::plan_partitions(partitioned_options(clock, -1, 3), clock.now()),
               Error);
  EXPECT_THROW((void)detail::pg::plan_partitions(partitioned_options(clock, 1, 3, 0h), clock.now()),
               Error);
  EXPECT_THROW(
      (void)detail::pg::plan_partitions(partitioned_options(clock, 100000, 3), clock.now()), Error);
}

TEST(PostgresPartitionPlan, DdlPartitionsOnEventIdAndHasADefaultPartition) {
  const ManualClock clock(kDayD);
  const std::string ddl =
      detail::pg::partitioned_processed_event_ddl(partitioned_options(clock, 1, 1), clock.now());
  EXPECT_NE(ddl.find("PARTITION BY RANGE (event_id)"), std::string::npos) << ddl;
  EXPECT_NE(ddl.find("PRIMARY KEY (event_id, consumer_group)"), std::string::npos) << ddl;
  EXPECT_NE(ddl.find("processed_event_default PARTITION OF processed_event DEFAULT"),
            std::string::npos);
  EXPECT_NE(ddl.find("ix_processed_event_processed_at"), std::string::npos);
}

// ---- connecting ------------------------------------------------------------------

TEST(PostgresConnect, ErrorMessageNeverContainsPassword) {
  const std::string password = "S3cr3tPassw0rdXyZ";
  const std::vector<std::string> urls{
      // Nothing listens on port 1: the connection is refused.
      fmt::format("postgresql://idem:{}@127.0.0.1:1/idem", password),
      // Not a port number: libpq's parser rejects it (its message quotes the URI).
      fmt::format("postgresql://idem:{}@127.0.0.1:notaport/idem", password),
      fmt::format("postgresql://idem:{}@127.0.0.1:1/idem?sslmode=bogus", password),
      fmt::format("postgresql://idem:{}@127.0.0.1:1/idem?no_such_option=1", password),
      // key=value form.
      fmt::format("postgresql:host=127.0.0.1 port=1 user=idem password={} dbname=idem", password),
      fmt::format("postgresql:host=127.0.0.1 port=1 password='{}' dbname=idem broken", password),
  };
  for (const auto& url : urls) {
    SCOPED_TRACE(url);
    try {
      StoreOptions options;
      options.connect_timeout = 2s;
      (void)open_store(url, options);
      ADD_FAILURE() << "connected";
    } catch (const Error& e) {
      EXPECT_TRUE(e.code() == ErrorCode::Connection || e.code() == ErrorCode::InvalidArgument)
          << to_string(e.code());
      EXPECT_EQ(e.source(), ErrorSource::Postgres);
      EXPECT_EQ(std::string(e.what()).find(password), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("S3cr3t"), std::string::npos) << e.what();
    }
  }
}

TEST(PostgresConnect, RefusedConnectionIsAConnectionErrorNamingTheServer) {
  try {
    (void)open_store("postgresql://idem@127.0.0.1:1/some_db");
    ADD_FAILURE() << "connected";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Connection);
    EXPECT_TRUE(e.transient());
    const std::string what = e.what();
    EXPECT_NE(what.find("127.0.0.1"), std::string::npos) << what;
    EXPECT_NE(what.find("some_db"), std::string::npos) << what;
  }
}

TEST(PostgresConnect, NativeHandleRejectsOtherBackends) {
  auto sqlite = open_store("sqlite://:memory:");
  try {
    (void)postgres_native_handle(*sqlite);
    ADD_FAILURE() << "a SQLite store gave a PGconn";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  }
}

TEST_F(PostgresStoreTest, KeyValueConninfoAndSessionSettings) {
  // The same database, spelled as key=value instead of a URI.
  std::string conninfo = url_;
  if (conninfo.rfind("postgresql:", 0) == 0 && conninfo.rfind("postgresql://", 0) != 0) {
    conninfo.erase(0, std::string_view("postgresql:").size());  // already key=value
  }
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &error);
  ASSERT_NE(options, nullptr) << (error != nullptr ? error : "");
  std::string kv;
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val != nullptr) kv += fmt::format("{}='{}' ", o->keyword, o->val);
  }
  PQconninfoFree(options);

  StoreOptions store_options;
  store_options.application_name = "idem-test-app";
  store_options.statement_timeout = 250ms;
  auto store = open_store("postgresql:" + kv, store_options);
  EXPECT_EQ(text_of(*store, "SELECT current_setting('application_name')"), "idem-test-app");
  EXPECT_EQ(text_of(*store, "SELECT current_setting('statement_timeout')"), "250ms");
  EXPECT_EQ(text_of(*store, "SELECT current_setting('client_encoding')"), "UTF8");
  // Defaults.
  EXPECT_EQ(text_of(*store_, "SELECT current_setting('application_name')"), "idem");
  EXPECT_EQ(text_of(*store_, "SELECT current_setting('transaction_isolation')"), "read committed");
}

// ---- partitioned dedup table -----------------------------------------------------

TEST_F(PostgresStoreTest, PartitionedTableIsRangePartitionedOnEventId) {
  const ManualClock clock(kDayD + 15h);
  const MigrationReport report = store_->migrate(partitioned_options(clock, 2, 3));
  ASSERT_EQ(report.applied.size(), migration_count());
  EXPECT_EQ(report.to_version, latest_version());
  EXPECT_EQ(report.applied[0], "0001_processed_event_partitioned");
  EXPECT_EQ(text_of(*store_, "SELECT name FROM idem_schema_migrations WHERE version = 1"),
            "0001_processed_event_partitioned");

  EXPECT_EQ(text_of(*store_, "SELECT pg_get_partkeydef('processed_event'::regclass)"),
            "RANGE (event_id)");
  EXPECT_EQ(text_of(*store_,
                    "SELECT string_agg(a.attname, ',' ORDER BY k.ord) "
                    "FROM pg_index i "
                    "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
                    "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
                    "WHERE i.indrelid = 'processed_event'::regclass AND i.indisprimary"),
            "event_id,consumer_group");
  EXPECT_EQ(text_of(*store_,
                    "SELECT string_agg(c.relname, ',' ORDER BY c.relname) "
                    "FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid "
                    "WHERE h.inhparent = 'processed_event'::regclass"),
            "processed_event_default,processed_event_p20260308,processed_event_p20260309,"
            "processed_event_p20260310,processed_event_p20260311,processed_event_p20260312,"
            "processed_event_p20260313");
  // Day D's bounds are the smallest UUIDs of its first millisecond and the next day's.
  EXPECT_EQ(
      text_of(*store_,
              "SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c "
              "WHERE c.relname = 'processed_event_p20260310'"),
      fmt::format("FOR VALUES FROM ('{}') TO ('{}')", Uuid::lower_bound_for(kDayD).to_string(),
                  Uuid::lower_bound_for(kDayD + std::chrono::days(1)).to_string()));
  EXPECT_EQ(text_of(*store_,
                    "SELECT count(*) FROM pg_indexes WHERE tablename = 'processed_event' "
                    "AND indexname = 'ix_processed_event_processed_at'"),
            "1");
  EXPECT_EQ(store_->schema_version(), report.to_version);

  // Running it again is a no-op, partitioned or not.
  EXPECT_TRUE(store_->migrate(partitioned_options(clock, 2, 3)).applied.empty());
  EXPECT_TRUE(store_->migrate().applied.empty());
}

TEST_F(PostgresStoreTest, RedeliveryAfterTableMovedToANewPartitionIsStillADuplicate) {
  ManualClock clock(kDayD + 10h);
  store_->migrate(partitioned_options(clock, 1, 3));
  const Uuid born_on_d = uuid_born_at(kDayD + 10h);
  ASSERT_TRUE(mark_committed(*store_, born_on_d));

  // Two days later: new events land in a later partition.
  clock.set(kDayD + std::chrono::days(2) + 9h);
  const Uuid born_later = uuid_born_at(clock.now());
  EXPECT_TRUE(mark_committed(*store_, born_later));

  // The redelivery of the day-D event, processed two days after it was born, is a
  // duplicate: the key is (event_id, consumer_group) and event_id picks the partition,
  // so it meets the first row. (Partitioned on processed_at, this was INSERT 0 1.)
  EXPECT_FALSE(mark_committed(*store_, born_on_d));
  auto tx = store_->begin();
  const Rows where = tx->execute(
      "SELECT tableoid::regclass::text, count(*) OVER () FROM processed_event WHERE event_id = $1",
      born_on_d);
  tx->commit();
  ASSERT_EQ(where.size(), 1u) << "exactly one row for the event";
  EXPECT_EQ(where[0].text(0), "processed_event_p20260310");
  EXPECT_EQ(
      text_of(*store_, "SELECT tableoid::regclass::text FROM processed_event WHERE event_id = $1",
              born_later),
      "processed_event_p20260312");
}

TEST_F(PostgresStoreTest, ProcessedAtPartitioningOfTheDesignDocumentsWouldRunTheEffectTwice) {
  // Why idem corrects the design documents (IDEM-2 TTL): their DDL partitions on processed_at,
  // which forces processed_at into the primary key, so the same event processed on two
  // days inserts two rows. Shown here on a side table; migrate() refuses such a table.
  auto tx = store_->begin();
  tx->execute(
      "CREATE TABLE doc_processed_event (event_id uuid NOT NULL, consumer_group text NOT NULL, "
      "processed_at timestamptz NOT NULL, PRIMARY KEY (event_id, consumer_group, processed_at)) "
      "PARTITION BY RANGE (processed_at)");
  tx->execute(
      "CREATE TABLE doc_p1 PARTITION OF doc_processed_event "
      "FOR VALUES FROM ('2026-03-10') TO ('2026-03-11')");
  tx->execute(
      "CREATE TABLE doc_p2 PARTITION OF doc_processed_event "
      "FOR VALUES FROM ('2026-03-11') TO ('2026-03-12')");
  const Uuid id = uuid_born_at(kDayD + 1h);
  const char* insert = "INSERT INTO doc_processed_event VALUES ($1, $2, $3) ON CONFLICT DO NOTHING";
  EXPECT_EQ(tx->execute(insert, id, kGroup, "2026-03-10T10:00:00Z").affected(), 1);
  EXPECT_EQ(tx->execute(insert, id, kGroup, "2026-03-11T10:00:00Z").affected(), 1)
      << "the documents' DDL would have caught this redelivery";
  // The same shape under the real name is refused by migrate().
  tx->execute("ALTER TABLE doc_processed_event RENAME TO processed_event");
  tx->commit();
  try {
    store_->migrate();
    ADD_FAILURE() << "migrate() accepted a processed_at-partitioned processed_event";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Schema) << e.what();
    EXPECT_NE(std::string(e.what()).find("processed_at"), std::string::npos) << e.what();
  }
}

TEST_F(PostgresStoreTest, BatchMarkWorksAcrossPartitions) {
  const ManualClock clock(kDayD + 12h);
  store_->migrate(partitioned_options(clock, 2, 2));
  const std::vector<Uuid> ids{
      uuid_born_at(kDayD - std::chrono::days(2) + 1h),   // oldest partition
      uuid_born_at(kDayD + 12h),                         // today's
      uuid_born_at(kDayD + std::chrono::days(2) + 23h),  // newest partition
      uuid_born_at(kDayD - std::chrono::days(30)),       // before the range: default
      uuid_born_at(kDayD + std::chrono::days(40)),       // after the range: default
      uuid_born_at(kDayD + 12h + 1ms),
  };
  {
    auto tx = store_->begin();
    EXPECT_EQ(tx->mark_processed_batch(ids, kGroup), std::vector<bool>(ids.size(), true));
    tx->commit();
  }
  {
    std::vector<Uuid> again = ids;
    again.push_back(uuid_born_at(kDayD + 13h));  // one new id among the redeliveries
    auto tx = store_->begin();
    std::vector<bool> expected(ids.size(), false);
    expected.push_back(true);
    EXPECT_EQ(tx->mark_processed_batch(again, kGroup), expected);
    tx->commit();
  }
  auto tx = store_->begin();
  const Rows per_partition = tx->execute(
      "SELECT tableoid::regclass::text, count(*) FROM processed_event GROUP BY 1 ORDER BY 1");
  tx->commit();
  std::vector<std::pair<std::string, std::int64_t>> got;
  for (const RowView row : per_partition) got.emplace_back(row.text(0), row.int64(1));
  EXPECT_EQ(got,
            (std::vector<std::pair<std::string, std::int64_t>>{{"processed_event_default", 2},
                                                               {"processed_event_p20260308", 1},
                                                               {"processed_event_p20260310", 3},
                                                               {"processed_event_p20260312", 1}}));
}

TEST_F(PostgresStoreTest, PartitionedMigrateRefusesExistingPlainTable) {
  store_->migrate();
  const ManualClock clock(kDayD);
  try {
    store_->migrate(partitioned_options(clock, 1, 1));
    ADD_FAILURE() << "partitioned migrate accepted a plain processed_event";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Schema) << e.what();
    EXPECT_NE(std::string(e.what()).find("plain table"), std::string::npos) << e.what();
  }
  // Nothing changed: the store still works on the plain table.
  EXPECT_EQ(
      text_of(*store_, "SELECT relkind::text FROM pg_class WHERE relname = 'processed_event'"),
      "r");
  EXPECT_TRUE(mark_committed(*store_, new_uuid_v7()));
}

TEST_F(PostgresStoreTest, MigrateRefusesATableItDidNotCreate) {
  auto tx = store_->begin();
  tx->execute("CREATE TABLE processed_event (event_id uuid, consumer_group text)");
  tx->commit();
  try {
    store_->migrate();
    ADD_FAILURE() << "migrate() adopted a hand-made processed_event";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Schema) << e.what();
  }
  EXPECT_EQ(store_->schema_version(), 0) << "a refused migration recorded something";
}

TEST_F(PostgresStoreTest, MigrateConcurrentlyFromTwoConnectionsIsSafe) {
  const ManualClock clock(kDayD);
  constexpr int kMigrators = 2;
  std::vector<std::unique_ptr<Store>> stores;
  for (int i = 0; i < kMigrators; ++i) stores.push_back(open_store(url_));
  std::latch start(kMigrators);
  std::vector<MigrationReport> reports(kMigrators);
  std::vector<std::string> failures(kMigrators);
  std::vector<std::thread> threads;
  for (int i = 0; i < kMigrators; ++i) {
    threads.emplace_back([&, i] {
      const auto n = static_cast<std::size_t>(i);
      start.arrive_and_wait();
      try {
        reports[n] = stores[n]->migrate(partitioned_options(clock, 3, 3));
      } catch (const std::exception& e) {
        failures[n] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& f : failures) EXPECT_EQ(f, "");
  EXPECT_EQ(reports[0].applied.size() + reports[1].applied.size(), migration_count())
      << "each migration is applied by exactly one migrator";
  EXPECT_EQ(int_of(*store_, "SELECT count(*) FROM idem_schema_migrations"),
            static_cast<std::int64_t>(migration_count()));
  EXPECT_EQ(reports[0].to_version, latest_version());
  EXPECT_EQ(reports[1].to_version, latest_version());
  EXPECT_EQ(text_of(*store_, "SELECT pg_get_partkeydef('processed_event'::regclass)"),
            "RANGE (event_id)");
}

// ---- connection loss and commit outcomes ----------------------------------------------

TEST_F(PostgresStoreTest, ConnectionLostIsClassifiedAsConnectionAndBeginReconnects) {
  idem::migrate_reference_system(*store_);
  const char* lookup = "SELECT count(*) FROM processed_event WHERE consumer_group = $1";
  EXPECT_EQ(int_of(*store_, lookup, kGroup), 0);  // now a prepared statement of this session
  ASSERT_TRUE(mark_committed(*store_, new_uuid_v7()));

  // 1. Killed between transactions: begin() notices and reconnects; statements that
  //    were prepared in the old session are prepared again in the new one.
  const int first_pid = backend_pid(*store_);
  terminate_backend(*admin_, first_pid);
  EXPECT_TRUE(mark_committed(*store_, new_uuid_v7()));
  EXPECT_EQ(int_of(*store_, lookup, kGroup), 2);
  const int second_pid = backend_pid(*store_);
  EXPECT_NE(second_pid, first_pid);

  // 2. Killed after begin() but before the first statement: the lazy BEGIN finds the
  //    session gone; nothing of the transaction ran, so it reconnects and goes on.
  {
    auto tx = store_->begin();
    terminate_backend(*admin_, second_pid);
    EXPECT_TRUE(tx->mark_processed(new_uuid_v7(), kGroup));
    tx->commit();
  }
  EXPECT_EQ(int_of(*store_, lookup, kGroup), 3);

  // 3. Killed in the middle of a transaction: the next statement is a Connection
  //    error (transient), the transaction cannot go on, and commit() says it did not
  //    commit (Connection, not InDoubt: COMMIT was never sent).
  const Uuid lost = new_uuid_v7();
  {
    auto tx = store_->begin();
    ASSERT_TRUE(tx->mark_processed(lost, kGroup));
    const int pid = std::stoi(std::string(tx->execute("SELECT pg_backend_pid()")[0].text(0)));
    terminate_backend(*admin_, pid);
    try {
      (void)tx->execute(lookup, kGroup);
      ADD_FAILURE() << "a statement on a killed session succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Connection) << e.what();
      EXPECT_TRUE(e.transient());
    }
    try {
      tx->commit();
      ADD_FAILURE() << "commit() on a lost connection succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Connection) << e.what();
    }
  }
  // 4. And the store is usable again; the lost transaction left nothing behind.
  EXPECT_TRUE(mark_committed(*store_, lost));
  EXPECT_EQ(int_of(*store_, lookup, kGroup), 4);
}

TEST_F(PostgresStoreTest, SessionKilledWhileIdleInTransactionMeansNotCommitted) {
  idem::migrate_reference_system(*store_);
  const Uuid id = new_uuid_v7();
  {
    auto tx = store_->begin();
    ASSERT_TRUE(tx->mark_processed(id, kGroup));
    const int pid = std::stoi(std::string(tx->execute("SELECT pg_backend_pid()")[0].text(0)));
    terminate_backend(*admin_, pid);
    // The server's FATAL arrived before COMMIT was sent: certainly not committed.
    try {
      tx->commit();
      ADD_FAILURE() << "commit() succeeded on a terminated session";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Connection) << e.what();
    }
  }
  EXPECT_TRUE(mark_committed(*store_, id)) << "the event is new again: nothing committed";
}

TEST_F(PostgresStoreTest, InDoubtCommit) {
  idem::migrate_reference_system(*store_);
  // A deferred constraint trigger runs inside COMMIT; it sleeps, so the session can be
  // killed while COMMIT is executing. The client then gets no verdict for its COMMIT.
  {
    auto tx = store_->begin();
    tx->execute("CREATE TABLE slow_commit (id int)");
    tx->execute(
        "CREATE FUNCTION slow_commit_sleep() RETURNS trigger LANGUAGE plpgsql AS "
        "'BEGIN PERFORM pg_sleep(30); RETURN NULL; END'");
    tx->execute(
        "CREATE CONSTRAINT TRIGGER slow_commit_t AFTER INSERT ON slow_commit "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit_sleep()");
    tx->commit();
  }
  const Uuid id = new_uuid_v7();
  auto tx = store_->begin();
  ASSERT_TRUE(tx->mark_processed(id, kGroup));
  tx->execute("INSERT INTO slow_commit VALUES (1)");
  const int pid = std::stoi(std::string(tx->execute("SELECT pg_backend_pid()")[0].text(0)));

  std::string killer_error;
  std::thread killer([&] {
    try {
      auto watcher = open_store(url_);
      const auto deadline = std::chrono::steady_clock::now() + 20s;
      // Wait until the session is inside COMMIT, sleeping in the trigger.
      while (text_of(*watcher,
                     "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND query = 'COMMIT' "
                     "AND wait_event = 'PgSleep'",
                     pid) != "1") {
        if (std::chrono::steady_clock::now() > deadline)
          throw std::runtime_error("COMMIT never started");
        std::this_thread::sleep_for(5ms);
      }
      text_of(*watcher, "SELECT pg_terminate_backend($1)", pid);
    } catch (const std::exception& e) {
      killer_error = e.what();
    }
  });
  try {
    tx->commit();
    ADD_FAILURE() << "commit() returned normally";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InDoubt) << e.what();
    EXPECT_TRUE(e.transient());
  }
  killer.join();
  EXPECT_EQ(killer_error, "");
  EXPECT_FALSE(tx->active());
  tx.reset();
  // The dedup row decides: here the server was killed before the commit record, so
  // the redelivery finds the event new; the store reconnected by itself.
  EXPECT_TRUE(mark_committed(*store_, id));
}

TEST_F(PostgresStoreTest, CommitAfterASwallowedErrorReportsItAndCommitsNothing) {
  idem::migrate_reference_system(*store_);
  const Uuid id = new_uuid_v7();
  auto tx = store_->begin();
  ASSERT_TRUE(tx->mark_processed(id, kGroup));
  const char* insert =
      "INSERT INTO orders (id, customer_id, total_amount, created_at) VALUES ($1, $2, $3, now())";
  tx->execute(insert, 1, 1, "1.00");
  EXPECT_THROW(tx->execute(insert, 1, 1, "1.00"), Error);  // duplicate key, swallowed
  // Later statements report the earlier failure rather than "transaction aborted".
  try {
    (void)tx->execute("SELECT 1");
    ADD_FAILURE() << "a statement ran in an aborted transaction";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Constraint) << e.what();
  }
  try {
    tx->commit();
    ADD_FAILURE() << "COMMIT of an aborted transaction succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Constraint) << e.what();
    EXPECT_EQ(e.detail(), "23505");
  }
  EXPECT_FALSE(tx->active());
  tx.reset();
  EXPECT_TRUE(mark_committed(*store_, id)) << "the aborted transaction's mark survived";
}

TEST_F(PostgresStoreTest, SavepointIsolatesAFailingStatement) {
  idem::migrate_reference_system(*store_);
  auto tx = store_->begin();
  const char* insert =
      "INSERT INTO orders (id, customer_id, total_amount, created_at) VALUES ($1, $2, $3, now())";
  tx->execute(insert, 1, 1, "1.00");
  {
    Savepoint sp(*tx);
    EXPECT_THROW(tx->execute(insert, 1, 1, "1.00"), Error);
    sp.rollback();
  }
  tx->execute(insert, 2, 1, "2.00");
  tx->commit();
  EXPECT_EQ(int_of(*store_, "SELECT count(*) FROM orders"), 2);
}

TEST_F(PostgresStoreTest, SerializationFailureIsTransient) {
  idem::migrate_reference_system(*store_);
  {
    auto tx = store_->begin();
    tx->execute(
        "INSERT INTO orders (id, customer_id, total_amount, created_at) VALUES (1, 1, 1, now())");
    tx->commit();
  }
  auto tx1 = store_->begin();
  auto tx2 = admin_->begin();
  tx1->execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
  tx2->execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
  EXPECT_EQ(tx1->execute("SELECT status FROM orders WHERE id = 1")[0].text(0), "created");
  EXPECT_EQ(tx2->execute("SELECT status FROM orders WHERE id = 1")[0].text(0), "created");
  tx1->execute("UPDATE orders SET status = 'confirmed' WHERE id = 1");
  tx1->commit();
  try {
    tx2->execute("UPDATE orders SET status = 'confirmed' WHERE id = 1");
    ADD_FAILURE() << "a concurrent update under REPEATABLE READ went through";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::TransactionAborted) << e.what();
    EXPECT_EQ(e.detail(), "40001");
    EXPECT_TRUE(e.transient());
  }
}

TEST_F(PostgresStoreTest, StatementTimeoutIsATimeout) {
  StoreOptions options;
  options.statement_timeout = 100ms;
  auto store = open_store(url_, options);
  auto tx = store->begin();
  try {
    tx->execute("SELECT pg_sleep(5)");
    ADD_FAILURE() << "statement_timeout did not fire";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
    EXPECT_EQ(e.detail(), "57014");
    EXPECT_TRUE(e.transient());
  }
}

TEST_F(PostgresStoreTest, MarkWithoutMigrationIsASchemaError) {
  auto tx = store_->begin();
  try {
    (void)tx->mark_processed(new_uuid_v7(), kGroup);
    ADD_FAILURE() << "marked without a processed_event table";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Schema) << e.what();
    EXPECT_NE(std::string(e.what()).find("migrate"), std::string::npos) << e.what();
  }
}

TEST_F(PostgresStoreTest, NativeHandleJoinsTheOpenTransaction) {
  idem::migrate_reference_system(*store_);
  {
    auto tx = store_->begin();
    PGconn* conn = postgres_native_handle(*store_);
    PGresult* r =
        PQexec(conn, "INSERT INTO orders (id, customer_id, total_amount) VALUES (5, 1, 1)");
    EXPECT_EQ(PQresultStatus(r), PGRES_COMMAND_OK) << PQresultErrorMessage(r);
    PQclear(r);
    EXPECT_EQ(PQtransactionStatus(conn), PQTRANS_INTRANS);
    tx->rollback();
  }
  EXPECT_EQ(int_of(*store_, "SELECT count(*) FROM orders"), 0)
      << "SQL run through the handle escaped the idem transaction";
}

TEST_F(PostgresStoreTest, InvalidSavepointNamesAreRejected) {
  // Savepoint names come from idem itself; the store still refuses anything that
  // is not a plain identifier before it reaches SQL text.
  class Probe : public Transaction {
   public:
    static void savepoint_on(Transaction& tx, std::string_view name) {
      (tx.*(&Probe::savepoint))(name);
    }
  };
  auto tx = store_->begin();
  EXPECT_THROW(Probe::savepoint_on(*tx, "x; DROP TABLE orders"), Error);
  EXPECT_THROW(Probe::savepoint_on(*tx, "Upper"), Error);
  EXPECT_THROW(Probe::savepoint_on(*tx, ""), Error);
  EXPECT_NO_THROW(Probe::savepoint_on(*tx, "sp_1"));
}

/// `url_` as a key/value URL naming its host `hosts` times (one server under several
/// names: what a store URL of a cluster looks like to libpq), plus `extra`.
std::string with_hosts(const std::string& url, int hosts, const std::string& extra = {}) {
  const auto p = *detail::pg::parse_conninfo(url);
  std::string host_list = p.at("host");
  std::string port_list = p.at("port");
  for (int i = 1; i < hosts; ++i) {
    host_list += "," + p.at("host");
    port_list += "," + p.at("port");
  }
  return fmt::format("postgresql:host={} port={} dbname={} user={} {}", host_list, port_list,
                     p.at("dbname"), p.at("user"), extra);
}

/// Makes every later transaction of `store`'s current session read-only, as on a
/// standby or a demoted primary (the server answers a write with SQLSTATE 25006).
void make_session_read_only(Store& store) {
  PGresult* r = PQexec(postgres_native_handle(store), "SET default_transaction_read_only = on");
  ASSERT_EQ(PQresultStatus(r), PGRES_COMMAND_OK);
  PQclear(r);
}

TEST_F(PostgresStoreTest, AReadOnlyServerIsAReasonToReconnectWhenSeveralHostsAreNamed) {
  // target_session_attrs=any: libpq may land on a read-only server, as on a standby that
  // answers before the primary; what a write there does is the question.
  auto store = open_store(with_hosts(url_, 2, "target_session_attrs=any"));
  store->migrate();
  make_session_read_only(*store);
  EXPECT_EQ(store->reconnects(), 0U);
  try {
    auto tx = store->begin();
    static_cast<void>(tx->mark_processed(new_uuid_v7(), kGroup));
    tx->commit();
    ADD_FAILURE() << "a read-only session took a write";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Connection) << e.what();
    EXPECT_TRUE(e.transient());
    EXPECT_EQ(e.detail(), "25006");
    EXPECT_NE(std::string(e.what()).find("reconnecting to the host that takes writes"),
              std::string::npos)
        << e.what();
  }
  // The next transaction runs on a new session (where nothing is read-only) and the
  // store says it reconnected, for callers that keep state from the old session.
  auto tx = store->begin();
  EXPECT_TRUE(tx->mark_processed(new_uuid_v7(), kGroup));
  tx->commit();
  EXPECT_EQ(store->reconnects(), 1U);
}

TEST_F(PostgresStoreTest, AReadOnlyServerStaysAPermanentRefusalWithOneHost) {
  store_->migrate();
  make_session_read_only(*store_);
  try {
    auto tx = store_->begin();
    static_cast<void>(tx->mark_processed(new_uuid_v7(), kGroup));
    tx->commit();
    ADD_FAILURE() << "a read-only session took a write";
  } catch (const Error& e) {
    EXPECT_FALSE(e.transient()) << "nothing else could take the writes: " << e.what();
    EXPECT_EQ(e.detail(), "25006");
  }
  EXPECT_EQ(store_->reconnects(), 0U);
}

TEST_F(PostgresStoreTest, SeveralHostsMeanTheSessionThatTakesWrites) {
  // No target_session_attrs given: idem asks libpq for a read-write session, so a
  // standby named first is passed over instead of refusing every write.
  auto store = open_store(with_hosts(url_, 2));
  EXPECT_EQ(text_of(*store, "SHOW transaction_read_only"), "off");
  PQconninfoOption* options = PQconninfo(postgres_native_handle(*store));
  std::string attrs;
  for (const PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (std::string_view(o->keyword) == "target_session_attrs" && o->val != nullptr) attrs = o->val;
  }
  PQconninfoFree(options);
  EXPECT_EQ(attrs, "read-write");
}

}  // namespace postgres_store_test
}  // namespace idem::test
