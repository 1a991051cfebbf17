// The SQLite store: the store contract (support/store_contract.hpp) on SQLite files,
// plus what only SQLite has (URL forms, pragmas, lock timeouts, SQLite's own automatic
// rollbacks, statement caching details).
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "stores/migration.hpp"

#include "idem/error.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "idem/stores/sqlite.hpp"
#include "idem/uuid.hpp"
#include "support/store_backends.hpp"
#include "support/store_contract.hpp"

namespace idem::test {
INSTANTIATE_TYPED_TEST_SUITE_P(Sqlite, StoreContract, ::testing::Types<SqliteBackend>, BackendName);
}  // namespace idem::test

namespace sqlite_store_test {

using idem::Error;
using idem::ErrorCode;
using idem::Store;
using idem::Uuid;
using idem::test::fresh_sqlite_url;
using idem::test::scratch_dir;

constexpr const char* kGroup = "billing-order-confirmed";

std::unique_ptr<Store> migrated_store(const std::string& url,
                                      const idem::StoreOptions& options = {}) {
  auto store = idem::open_store(url, options);
  idem::migrate_reference_system(*store);
  return store;
}

std::string pragma_text(Store& store, const char* pragma) {
  sqlite3* db = idem::sqlite_native_handle(store);
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, pragma, -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  std::string value;
  if (sqlite3_step(st) == SQLITE_ROW)
    value = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  return value;
}

/// The error `f` throws; fails the test if it throws none.
template <class F>
std::optional<Error> error_from(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no idem::Error was thrown";
  return std::nullopt;
}

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

// ---- URLs and opening --------------------------------------------------------------

TEST(SqliteStoreUrl, AbsolutePathOpensAFileDatabase) {
  const auto path = scratch_dir() / "absolute.sqlite";
  auto store = migrated_store("sqlite://" + path.string());
  EXPECT_EQ(store->backend(), idem::Backend::Sqlite);
  EXPECT_TRUE(std::filesystem::exists(path));
}

TEST(SqliteStoreUrl, RelativePathIsRelativeToTheWorkingDirectory) {
  const std::string name = fmt::format("idem-relative-{}.sqlite", ::getpid());
  {
    auto store = migrated_store("sqlite://" + name);
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::current_path() / name));
  }
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(name + suffix);
}

TEST(SqliteStoreUrl, MemoryDatabaseIsPrivateToItsStore) {
  auto one = migrated_store("sqlite://:memory:");
  auto two = idem::open_store("sqlite://:memory:");
  EXPECT_GE(one->schema_version(), 2);
  EXPECT_EQ(two->schema_version(), 0) << "two :memory: stores share a database";
  EXPECT_EQ(pragma_text(*one, "PRAGMA journal_mode"), "memory");
  auto tx = one->begin();
  EXPECT_TRUE(tx->mark_processed(idem::new_uuid_v7(), kGroup));
  tx->commit();
}

TEST(SqliteStoreUrl, UrlWithoutAPathIsInvalid) {
  const auto e = error_from([] { (void)idem::open_store("sqlite://"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::InvalidArgument);
  const auto direct = error_from([] { (void)idem::make_sqlite_store(""); });
  ASSERT_TRUE(direct);
  EXPECT_EQ(direct->code(), ErrorCode::InvalidArgument);
}

TEST(SqliteStoreUrl, UnknownSchemeErrorDoesNotEchoThePassword) {
  const auto e = error_from([] { (void)idem::open_store("mysql://u:secret@h/db"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::InvalidArgument);
  EXPECT_FALSE(contains(e->what(), "secret")) << e->what();
  EXPECT_TRUE(contains(e->what(), "mysql")) << e->what();
}

TEST(SqliteStoreOpen, MissingDirectoryIsAConnectionError) {
  const auto e = error_from(
      [] { (void)idem::make_sqlite_store((scratch_dir() / "no-such-dir" / "x.sqlite").string()); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::Connection) << e->what();
  EXPECT_EQ(e->source(), idem::ErrorSource::Sqlite);
  EXPECT_TRUE(contains(e->detail(), "SQLITE_CANTOPEN")) << e->detail();
}

TEST(SqliteStoreOpen, FileThatIsNotADatabaseIsAConnectionError) {
  const auto path = scratch_dir() / "not-a-database.sqlite";
  std::ofstream(path) << std::string(4096, 'x');
  const auto e = error_from([&] { (void)idem::make_sqlite_store(path.string()); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::Connection) << e->what();
  EXPECT_EQ(e->detail(), "SQLITE_NOTADB");
}

TEST(SqliteStoreOpen, UsesWalFullSyncAndForeignKeys) {
  auto store = migrated_store(fresh_sqlite_url());
  EXPECT_EQ(pragma_text(*store, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(pragma_text(*store, "PRAGMA synchronous"), "2") << "synchronous is not FULL";
  EXPECT_EQ(pragma_text(*store, "PRAGMA foreign_keys"), "1");
  EXPECT_EQ(pragma_text(*store, "PRAGMA busy_timeout"), "5000");
}

TEST(SqliteStoreOpen, BusyTimeoutComesFromTheOptions) {
  idem::StoreOptions options;
  options.busy_timeout = std::chrono::milliseconds(1234);
  auto store = idem::open_store(fresh_sqlite_url(), options);
  EXPECT_EQ(pragma_text(*store, "PRAGMA busy_timeout"), "1234");
}

TEST(SqliteStoreOpen, ASecondConnectionReachesTheSameFileWithTheSameOptions) {
  idem::StoreOptions options;
  options.busy_timeout = std::chrono::milliseconds(1234);
  auto store = idem::open_store(fresh_sqlite_url(), options);
  static_cast<void>(store->migrate());
  auto tx = store->begin();
  EXPECT_TRUE(tx->mark_processed(idem::new_uuid_v7(), "g"));
  tx->commit();
  const auto again = store->connect_again();
  EXPECT_EQ(pragma_text(*again, "PRAGMA busy_timeout"), "1234");
  EXPECT_EQ(pragma_text(*again, "SELECT count(*) FROM processed_event"), "1");
}

TEST(SqliteStoreOpen, APrivateInMemoryDatabaseHasNoSecondConnection) {
  auto store = idem::open_store("sqlite://:memory:");
  const auto e = error_from([&] { (void)store->connect_again(); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::InvalidArgument);
  EXPECT_NE(std::string(e->what()).find("pipeline_depth"), std::string::npos) << e->what();
}

TEST(SqliteStoreOpen, NativeHandleOfAnotherBackendIsRejected) {
  struct OtherStore final : Store {
    std::unique_ptr<idem::Transaction> begin() override { return nullptr; }
    idem::MigrationReport migrate(const idem::MigrateOptions&) override { return {}; }
    idem::MigrationReport migrate_set(const idem::MigrationSet&) override { return {}; }
    int schema_version(std::string_view) override { return 0; }
    idem::Backend backend() const noexcept override { return idem::Backend::Postgres; }
    std::unique_ptr<Store> connect_again() const override { return nullptr; }
  } other;
  const auto e = error_from([&] { (void)idem::sqlite_native_handle(other); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::InvalidArgument);
}

// ---- transactions ------------------------------------------------------------------

TEST(SqliteStore, BusyTimeoutTurnsLockContentionIntoTransactionAborted) {
  const std::string url = fresh_sqlite_url();
  auto holder = migrated_store(url);
  idem::StoreOptions impatient;
  impatient.busy_timeout = std::chrono::milliseconds(50);
  auto waiter = idem::open_store(url, impatient);

  auto tx = holder->begin();  // BEGIN IMMEDIATE: holds the write lock
  const auto start = std::chrono::steady_clock::now();
  const auto e = error_from([&] { (void)waiter->begin(); });
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::TransactionAborted) << e->what();
  EXPECT_TRUE(e->transient());
  EXPECT_TRUE(contains(e->detail(), "SQLITE_BUSY")) << e->detail();
  EXPECT_GE(waited, std::chrono::milliseconds(40)) << "busy_timeout was not applied";
  tx->commit();

  auto next = waiter->begin();  // the lock is free again
  EXPECT_TRUE(next->mark_processed(idem::new_uuid_v7(), kGroup));
  next->commit();
}

TEST(SqliteStore, ReadTransactionDoesNotWaitForAWriterAndSeesTheCommittedState) {
  const std::string url = fresh_sqlite_url();
  auto writer = migrated_store(url);
  {
    auto tx = writer->begin();
    EXPECT_TRUE(tx->mark_processed(idem::new_uuid_v7(), kGroup));
    tx->commit();
  }
  idem::StoreOptions no_wait;
  no_wait.busy_timeout = std::chrono::milliseconds(0);  // a wait would fail at once
  auto reader = idem::open_store(url, no_wait);

  auto writing = writer->begin();  // BEGIN IMMEDIATE: holds the write lock
  EXPECT_TRUE(writing->mark_processed(idem::new_uuid_v7(), kGroup));
  auto read = reader->begin_read();
  const auto rows = read->execute("SELECT count(*) FROM processed_event");
  EXPECT_EQ(rows[0].int64(0), 1) << "the writer's uncommitted row is not visible";
  read->commit();
  writing->commit();
}

TEST(SqliteStore, ReadTransactionRefusesToWrite) {
  auto store = migrated_store(fresh_sqlite_url());
  auto tx = store->begin_read();
  const auto e = error_from([&] { (void)tx->execute("DELETE FROM processed_event"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::InvalidArgument);
  EXPECT_TRUE(contains(e->what(), "begin_read")) << e->what();
  const auto m = error_from([&] { (void)tx->mark_processed(idem::new_uuid_v7(), kGroup); });
  ASSERT_TRUE(m);
  EXPECT_EQ(m->code(), ErrorCode::InvalidArgument);
  tx->rollback();
}

TEST(SqliteStore, PartitionedMigrationIsPostgresOnly) {
  auto store = idem::open_store(fresh_sqlite_url());
  idem::MigrateOptions options;
  options.partitioned = true;
  const auto e = error_from([&] { (void)store->migrate(options); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::InvalidArgument);
  EXPECT_TRUE(contains(e->what(), "PostgreSQL-only")) << e->what();
  EXPECT_EQ(store->schema_version(), 0);
}

TEST(SqliteStore, MigrateWhileATransactionIsOpenIsRefused) {
  auto store = migrated_store(fresh_sqlite_url());
  auto tx = store->begin();
  const auto e = error_from([&] { (void)store->migrate(); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::InvalidArgument);
}

TEST(SqliteStore, MigrationsAreRecordedByVersionAndName) {
  auto store = migrated_store(fresh_sqlite_url());
  auto tx = store->begin();
  const auto rows = tx->execute(
      "SELECT version, name, applied_at FROM idem_schema_migrations "
      "WHERE migration_set = $1 ORDER BY version",
      std::string(idem::kIdemMigrations));
  const auto& embedded = idem::detail::sqlite_sql::migrations();
  ASSERT_EQ(rows.size(), embedded.size());
  for (std::size_t i = 0; i < embedded.size(); ++i) {
    EXPECT_EQ(rows[i].int64(0), embedded[i].version);
    EXPECT_EQ(rows[i].text(1), embedded[i].name);
  }
  EXPECT_EQ(rows[0].text(1), "0001_processed_event");
  EXPECT_TRUE(idem::parse_rfc3339(rows[0].text(2)).has_value()) << rows[0].text(2);
}

TEST(SqliteStore, MarkBeforeMigrateIsASchemaError) {
  auto store = idem::open_store(fresh_sqlite_url());
  auto tx = store->begin();
  const auto e = error_from([&] { (void)tx->mark_processed(idem::new_uuid_v7(), kGroup); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::Schema) << e->what();
  EXPECT_TRUE(contains(e->what(), "migrate")) << e->what();
}

TEST(SqliteStore, TransactionControlThroughExecuteIsRefused) {
  auto store = migrated_store(fresh_sqlite_url());
  const Uuid id = idem::new_uuid_v7();
  auto tx = store->begin();
  ASSERT_TRUE(tx->mark_processed(id, kGroup));
  for (const char* sql :
       {"COMMIT", "ROLLBACK", "END", "BEGIN", "SAVEPOINT x", "RELEASE x", "ROLLBACK TO x"}) {
    const auto e = error_from([&] { tx->execute(sql); });
    ASSERT_TRUE(e) << sql;
    EXPECT_EQ(e->code(), ErrorCode::InvalidArgument) << sql << ": " << e->what();
  }
  EXPECT_TRUE(tx->active());
  EXPECT_FALSE(tx->mark_processed(id, kGroup)) << "the transaction lost its mark";
  tx->rollback();
  auto check = store->begin();
  EXPECT_TRUE(check->mark_processed(id, kGroup)) << "a refused COMMIT committed anyway";
}

TEST(SqliteStore, TransactionRolledBackBySqliteIsNotContinuedInAutocommit) {
  // INSERT OR ROLLBACK makes SQLite roll back the whole transaction on a conflict, as it
  // does by itself on SQLITE_FULL or an I/O error. Nothing may then run in autocommit.
  auto store = migrated_store(fresh_sqlite_url());
  {
    auto tx = store->begin();
    tx->execute(
        "INSERT INTO orders (id, customer_id, total_amount, created_at) VALUES (1, 1, '1.00', "
        "'x')");
    tx->commit();
  }
  const Uuid a = idem::new_uuid_v7();
  const Uuid b = idem::new_uuid_v7();
  auto tx = store->begin();
  ASSERT_TRUE(tx->mark_processed(a, kGroup));
  const auto conflict = error_from([&] {
    tx->execute(
        "INSERT OR ROLLBACK INTO orders (id, customer_id, total_amount, created_at) "
        "VALUES (1, 1, '1.00', 'x')");
  });
  ASSERT_TRUE(conflict);
  EXPECT_EQ(conflict->code(), ErrorCode::Constraint);
  EXPECT_FALSE(tx->active());
  const auto after = error_from([&] { (void)tx->mark_processed(b, kGroup); });
  ASSERT_TRUE(after);
  EXPECT_EQ(after->code(), ErrorCode::TransactionAborted) << after->what();
  EXPECT_THROW(tx->commit(), Error);

  auto next = store->begin();  // the Store is free again while the dead handle still exists
  EXPECT_TRUE(next->mark_processed(a, kGroup)) << "a's mark survived SQLite's rollback";
  EXPECT_TRUE(next->mark_processed(b, kGroup)) << "b was marked in autocommit mode";
}

TEST(SqliteStore, FailedCommitRollsBackAndFreesTheStore) {
  // A deferred foreign key is checked at COMMIT, so COMMIT itself fails.
  auto store = migrated_store(fresh_sqlite_url());
  {
    auto tx = store->begin();
    tx->execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)");
    tx->execute(
        "CREATE TABLE child (id INTEGER PRIMARY KEY, parent_id INTEGER "
        "REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)");
    tx->commit();
  }
  const Uuid id = idem::new_uuid_v7();
  auto tx = store->begin();
  ASSERT_TRUE(tx->mark_processed(id, kGroup));
  tx->execute("INSERT INTO child (id, parent_id) VALUES (1, 99)");
  const auto e = error_from([&] { tx->commit(); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::Constraint) << e->what();
  EXPECT_EQ(e->detail(), "SQLITE_CONSTRAINT_FOREIGNKEY");
  EXPECT_FALSE(tx->active());

  auto next = store->begin();
  EXPECT_TRUE(next->mark_processed(id, kGroup)) << "the failed commit kept the mark";
  EXPECT_EQ(next->execute("SELECT count(*) FROM child")[0].int64(0), 0);
}

TEST(SqliteStore, StoreDestroyedWithAnOpenTransactionRollsItBack) {
  const std::string url = fresh_sqlite_url();
  auto observer = migrated_store(url);
  auto store = idem::open_store(url);
  const Uuid id = idem::new_uuid_v7();
  auto tx = store->begin();
  ASSERT_TRUE(tx->mark_processed(id, kGroup));
  store.reset();
  EXPECT_FALSE(tx->active());
  const auto e = error_from([&] { (void)tx->mark_processed(id, kGroup); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::InvalidArgument);
  tx.reset();
  auto check = observer->begin();
  EXPECT_TRUE(check->mark_processed(id, kGroup));
}

// ---- executing SQL -----------------------------------------------------------------

TEST(SqliteStore, AcceptsQuestionMarkPlaceholdersAndRepeatedNumbers) {
  auto store = migrated_store(fresh_sqlite_url());
  auto tx = store->begin();
  EXPECT_EQ(tx->execute("SELECT ? + ?", 2, 3)[0].int64(0), 5);
  EXPECT_EQ(tx->execute("SELECT ?2 - ?1", 2, 3)[0].int64(0), 1);
  EXPECT_EQ(tx->execute("SELECT $1 * $1 + $2", 4, 1)[0].int64(0), 17);
  const auto e = error_from([&] { tx->execute("SELECT :name", 1); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::InvalidArgument);
  EXPECT_TRUE(contains(e->what(), ":name")) << e->what();
}

TEST(SqliteStore, ExecuteRunsExactlyOneStatement) {
  auto store = migrated_store(fresh_sqlite_url());
  auto tx = store->begin();
  const auto e = error_from([&] { tx->execute("SELECT 1; SELECT 2"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(tx->execute("SELECT 7; -- trailing comment\n ;")[0].int64(0), 7);
  EXPECT_EQ(error_from([&] { tx->execute("   "); })->code(), ErrorCode::InvalidArgument);
}

TEST(SqliteStore, ManyDistinctStatementsStayCorrectBeyondTheCacheSize) {
  auto store = migrated_store(fresh_sqlite_url());
  auto tx = store->begin();
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 600; ++i) {
      const auto rows = tx->execute(fmt::format("SELECT {} + $1", i), 1);
      ASSERT_EQ(rows[0].int64(0), i + 1);
    }
  }
}

TEST(SqliteStore, ValuesComeBackExactly) {
  auto store = migrated_store(fresh_sqlite_url());
  auto tx = store->begin();
  const auto rows = tx->execute("SELECT 0.1, 1e300, -9223372036854775808, x'00ff10', ''");
  EXPECT_EQ(rows[0].text(0), "0.1");
  EXPECT_EQ(rows[0].real(1), 1e300);
  EXPECT_EQ(rows[0].int64(2), INT64_MIN);
  EXPECT_EQ(rows[0].text(3), std::string("\x00\xff\x10", 3));
  EXPECT_EQ(rows[0].text(4), "");
  EXPECT_FALSE(rows[0].is_null(4));
}

TEST(SqliteStore, ErrorMessagesCarryTheSqlButNotParameterValues) {
  auto store = migrated_store(fresh_sqlite_url());
  auto tx = store->begin();
  const char* sql =
      "INSERT INTO orders (id, customer_id, total_amount, created_at) VALUES ($1, $2, $3, $4)";
  tx->execute(sql, 1, 1, "1.00", "s3cr3t-first");
  const auto e = error_from([&] { tx->execute(sql, 1, 1, "1.00", "s3cr3t-second"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::Constraint);
  EXPECT_EQ(e->detail(), "SQLITE_CONSTRAINT_PRIMARYKEY");
  EXPECT_TRUE(contains(e->what(), "INSERT INTO orders")) << e->what();
  EXPECT_TRUE(contains(e->what(), "orders.id")) << e->what();
  EXPECT_FALSE(contains(e->what(), "s3cr3t")) << e->what();
}

TEST(SqliteStore, ProcessedEventAcceptsOnlySixteenByteBlobIds) {
  auto store = migrated_store(fresh_sqlite_url());
  auto tx = store->begin();
  for (const char* bad :
       {"INSERT INTO processed_event (event_id, consumer_group) VALUES ('0123456789abcdef', 'g')",
        "INSERT INTO processed_event (event_id, consumer_group) VALUES (x'0011', 'g')",
        "INSERT INTO processed_event (event_id, consumer_group) VALUES (randomblob(16), '')"}) {
    const auto e = error_from([&] { tx->execute(bad); });
    ASSERT_TRUE(e) << bad;
    EXPECT_EQ(e->code(), ErrorCode::Constraint) << bad;
  }
}

TEST(SqliteStore, ProcessedAtIsUnixMilliseconds) {
  auto store = migrated_store(fresh_sqlite_url());
  const auto before = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  auto tx = store->begin();
  ASSERT_TRUE(tx->mark_processed(idem::new_uuid_v7(), kGroup));
  const auto at = tx->execute("SELECT processed_at FROM processed_event")[0].int64(0);
  const auto after = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  EXPECT_GE(at, before - 5);  // julianday() has about millisecond resolution
  EXPECT_LE(at, after + 5);
}

}  // namespace sqlite_store_test
