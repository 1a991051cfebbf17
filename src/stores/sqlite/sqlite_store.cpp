// The SQLite dedup store: the embedded default backend (IDEM-2, IDEM-3).
// This file: the store, its connection settings and migrations; the transaction is in
// sqlite_transaction.cpp.
#include "stores/sqlite/sqlite_store.hpp"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdint>
#include <variant>

#include <fmt/format.h>

#include "idem/stores/sqlite.hpp"
#include "stores/migration.hpp"
#include "stores/sqlite/sqlite_error.hpp"
#include "stores/sqlite/sqlite_values.hpp"

namespace idem::detail::sqlite {

namespace {

// User statements are normally a fixed set of literals, so 256 is plenty; the bound only
// matters for callers that build SQL text dynamically.
constexpr std::size_t kUserStatementCacheSize = 256;
// Multi-row markers are cached per exact row count (exact, so no statement carries padding
// rows). A consumer's batch sizes cluster (full batches plus a few partial ones), so a
// small cache keeps the common sizes prepared. Bounded because a marker is not small:
// about 190 KB and 1-2 ms to prepare for 1000 rows (SQLite 3.40), so 16 hold at most ~3 MB.
constexpr std::size_t kBatchStatementCacheSize = 16;
// Ids per multi-row marker statement. 1000 ids plus the group are 1001 host parameters,
// far below SQLite's default SQLITE_MAX_VARIABLE_NUMBER (32766 since 3.32); a larger
// batch is chunked into several statements inside the same transaction.
constexpr std::size_t kMaxBatchRows = 1000;

constexpr const char* kMigrationsTableSql =
    "CREATE TABLE IF NOT EXISTS idem_schema_migrations ("
    " migration_set TEXT NOT NULL,"
    " version INTEGER NOT NULL,"
    " name TEXT NOT NULL,"
    " applied_at TEXT NOT NULL,"
    " PRIMARY KEY (migration_set, version))";

std::string batch_sql(std::size_t rows) {
  // ?1 is the consumer group, shared by every row; the ids are ?2, ?3, ... Only the first
  // id is numbered explicitly: a bare "?" takes "one more than the largest parameter
  // number already assigned" (https://www.sqlite.org/lang_expr.html#parameters), and
  // SQLite's parser looks explicit ?NNN numbers up in a list, so numbering all 1000 ids
  // makes preparing the statement about 2.5 times slower (measured: ~5 ms vs ~2 ms for
  // 1000 rows on SQLite 3.40). Binding is by index either way.
  std::string sql = "INSERT INTO processed_event(event_id, consumer_group) VALUES (?2,?1)";
  sql.reserve(sql.size() + rows * 7 + 48);
  for (std::size_t i = 1; i < rows; ++i) sql += ",(?,?1)";
  sql += " ON CONFLICT DO NOTHING RETURNING event_id";
  return sql;
}

/// Lets idem's own transaction-control statements past the authorizer while in scope.
class ControlScope {
 public:
  explicit ControlScope(bool& flag) noexcept : flag_(flag) { flag_ = true; }
  ControlScope(const ControlScope&) = delete;
  ControlScope& operator=(const ControlScope&) = delete;
  ~ControlScope() { flag_ = false; }

 private:
  bool& flag_;
};

}  // namespace

// ---------------------------------------------------------------------------------------
// SqliteStore

SqliteStore::SqliteStore(std::string_view path, const StoreOptions& options)
    : path_(path),
      options_(options),
      user_cache_(kUserStatementCacheSize),
      batch_cache_(kBatchStatementCacheSize) {
  if (path_.empty()) {
    invalid("sqlite: empty database path (use \":memory:\" for a private in-memory database)");
  }
  if (path_.find('\0') != std::string::npos) invalid("sqlite: database path contains a NUL byte");

  // NOMUTEX: a Store is one connection used by one thread at a time (store.hpp), so
  // SQLite's per-connection mutex would only cost time. No SQLITE_OPEN_URI: the path is a
  // plain file name, so "file:..." cannot smuggle in options such as mode=memory.
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
#ifdef SQLITE_OPEN_EXRESCODE
  flags |= SQLITE_OPEN_EXRESCODE;
#endif
  const int rc = sqlite3_open_v2(path_.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    const Error e =
        make_error(ErrorCode::Connection, db_, rc, fmt::format("cannot open database '{}'", path_));
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw e;
  }

  try {
    sqlite3_extended_result_codes(db_, 1);
    const auto timeout_ms =
        std::clamp<std::chrono::milliseconds::rep>(options.busy_timeout.count(), 0, INT_MAX);
    sqlite3_busy_timeout(db_, static_cast<int>(timeout_ms));
    sqlite3_set_authorizer(db_, &SqliteStore::authorize, this);

    exec("PRAGMA foreign_keys = ON", "cannot enable foreign keys");
    if (path_ != ":memory:") {
      // WAL: readers never block the writer and the writer never blocks readers, and a
      // commit is one append to the WAL file. The mode is stored in the database file, so
      // this is a no-op after the first connection.
      Statement mode(db_, "PRAGMA journal_mode = WAL", 0);
      StatementUse use(mode);
      const int step = sqlite3_step(mode.get());
      if (step != SQLITE_ROW) throw make_error(db_, step, "cannot switch to WAL journal mode");
      const auto value = column_value(mode.get(), 0);
      if (!value || *value != "wal") {
        throw Error(ErrorCode::Connection, ErrorSource::Sqlite,
                    fmt::format("sqlite: database '{}' refused WAL journal mode (it is '{}')",
                                path_, value.value_or("?")));
      }
    }
    // synchronous=FULL: fsync the WAL on every COMMIT. With WAL, NORMAL is safe against a
    // crash of the process but may lose the last committed transactions on power loss or
    // an OS crash. For idem that is not harmless: the consumer commits its Kafka offset
    // right after the database COMMIT returns, so a lost commit would lose the dedup mark
    // AND the business effect of an event Kafka will not deliver again, while an external
    // effect (the charge) has already happened. The price is one fsync per transaction,
    // which batching (many events per transaction) amortises.
    exec("PRAGMA synchronous = FULL", "cannot set synchronous = FULL");
    // temp_store=MEMORY keeps the savepoint sub-journal in memory. By default SQLite
    // spills it to a temp file (/var/tmp/etilqs_*) once it passes 64 KiB, and a spilled
    // sub-journal is not truncated again until the transaction ends, so every later page
    // write inside a savepoint becomes a pwrite() to that file. Measured with
    // idem_bench_consumer (count handler, batches of 1000, savepoint per event): 114,000
    // pwrite()s to the sub-journal for 20,000 events and ~27,000 events/s; with this
    // pragma none, and see bench/RESULTS.md. The sub-journal only undoes work inside a
    // transaction (crash recovery uses the WAL), so durability is unchanged; its size is
    // bounded by the pages one transaction touches.
    exec("PRAGMA temp_store = MEMORY", "cannot set temp_store = MEMORY");

    const int variables = sqlite3_limit(db_, SQLITE_LIMIT_VARIABLE_NUMBER, -1);
    max_batch_rows_ = std::clamp<std::size_t>(static_cast<std::size_t>(std::max(variables - 1, 1)),
                                              1, kMaxBatchRows);

    ControlScope control(control_allowed_);
    begin_ = std::make_unique<Statement>(db_, "BEGIN IMMEDIATE", SQLITE_PREPARE_PERSISTENT);
    begin_read_ = std::make_unique<Statement>(db_, "BEGIN", SQLITE_PREPARE_PERSISTENT);
    commit_ = std::make_unique<Statement>(db_, "COMMIT", SQLITE_PREPARE_PERSISTENT);
    rollback_ = std::make_unique<Statement>(db_, "ROLLBACK", SQLITE_PREPARE_PERSISTENT);
  } catch (const Error& e) {
    begin_.reset();
    begin_read_.reset();
    commit_.reset();
    rollback_.reset();
    sqlite3_close_v2(db_);
    db_ = nullptr;
    // Whatever went wrong while setting the connection up (not a database, locked
    // for longer than busy_timeout, I/O), the store could not be opened.
    throw Error(e.code() == ErrorCode::InvalidArgument ? e.code() : ErrorCode::Connection,
                ErrorSource::Sqlite, e.what(), e.detail());
  }
}

SqliteStore::~SqliteStore() {
  if (open_tx_ != nullptr) open_tx_->detach();
  // Every statement must be finalized before the connection closes.
  mark_.reset();
  savepoint_statements_.clear();
  begin_.reset();
  begin_read_.reset();
  commit_.reset();
  rollback_.reset();
  user_cache_.clear();
  batch_cache_.clear();
  sqlite3_close_v2(db_);
}

// Transaction control must go through Transaction/Savepoint: a COMMIT or ROLLBACK run
// through execute() would end the transaction behind idem's back, and every later
// statement of the "transaction" (the dedup mark, the effect) would then run in
// autocommit mode, each committed on its own. That silently breaks IDEM-3, so such
// statements are refused when prepared.
int SqliteStore::authorize(void* self, int action, const char*, const char*, const char*,
                           const char*) noexcept {
  if (action != SQLITE_TRANSACTION && action != SQLITE_SAVEPOINT) return SQLITE_OK;
  auto* store = static_cast<SqliteStore*>(self);
  if (store->control_allowed_) return SQLITE_OK;
  store->control_denied_ = true;
  return SQLITE_DENY;
}

void SqliteStore::exec(const char* sql, std::string_view what) {
  char* message = nullptr;
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &message);
  sqlite3_free(message);  // sqlite3_errmsg() still holds the same text
  if (rc != SQLITE_OK) throw make_error(db_, rc, what, sql);
}

void SqliteStore::exec_control(const std::string& sql, std::string_view what) {
  ControlScope control(control_allowed_);
  exec(sql.c_str(), what);
}

int SqliteStore::run_control(Statement& st, std::string_view what, std::optional<Error>& error) {
  ControlScope control(control_allowed_);  // also covers an automatic re-prepare in step
  const int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) error.emplace(make_error(db_, rc, what));
  st.reset();
  return rc;
}

Statement& SqliteStore::user_statement(std::string_view sql) {
  if (Statement* st = user_cache_.find(sql)) return *st;
  control_denied_ = false;
  try {
    auto st = std::make_unique<Statement>(db_, sql, SQLITE_PREPARE_PERSISTENT);
    return user_cache_.insert(std::string(sql), std::move(st));
  } catch (const Error& e) {
    if (!control_denied_) throw;
    invalid(
        fmt::format("sqlite: transaction control (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE) "
                    "cannot run through execute(); use Transaction::commit()/rollback() or "
                    "idem::Savepoint [SQL: {}]",
                    sql_excerpt(sql)));
  }
}

bool SqliteStore::has_table(const char* name) {
  Statement q(db_, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1", 0);
  StatementUse use(q);
  sqlite3_bind_text(q.get(), 1, name, -1, SQLITE_STATIC);
  const int rc = sqlite3_step(q.get());
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  throw make_error(db_, rc, "cannot read the schema");
}

std::unique_ptr<Statement> SqliteStore::prepare_schema_statement(const std::string& sql) {
  try {
    return std::make_unique<Statement>(db_, sql, SQLITE_PREPARE_PERSISTENT);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::Query && !has_table("processed_event")) {
      throw Error(ErrorCode::Schema, ErrorSource::Sqlite,
                  fmt::format("sqlite: table processed_event does not exist in '{}'; run migrate() "
                              "(idem migrate) first",
                              path_),
                  e.detail());
    }
    throw;
  }
}

Statement& SqliteStore::mark_statement() {
  if (!mark_) mark_ = prepare_schema_statement(std::string(kMarkSql));
  return *mark_;
}

Statement& SqliteStore::savepoint_statement(std::size_t depth, SavepointOp op) {
  if (savepoint_statements_.size() <= depth) savepoint_statements_.resize(depth + 1);
  std::unique_ptr<Statement>& slot = savepoint_statements_[depth][static_cast<std::size_t>(op)];
  if (!slot) {
    static constexpr const char* kFormats[] = {"SAVEPOINT idem_sp_d{}", "RELEASE idem_sp_d{}",
                                               "ROLLBACK TO idem_sp_d{}"};
    ControlScope control(control_allowed_);
    slot = std::make_unique<Statement>(
        db_, fmt::format(fmt::runtime(kFormats[static_cast<std::size_t>(op)]), depth),
        SQLITE_PREPARE_PERSISTENT);
  }
  return *slot;
}

Statement& SqliteStore::batch_statement(std::size_t rows) {
  if (Statement* st = batch_cache_.find(rows)) return *st;
  return batch_cache_.insert(rows, prepare_schema_statement(batch_sql(rows)));
}

void SqliteStore::materialize_open_savepoints() {
  if (open_tx_ != nullptr) open_tx_->materialize_savepoints();
}

void SqliteStore::transaction_finished(const SqliteTransaction* tx) noexcept {
  if (open_tx_ == tx) open_tx_ = nullptr;
}

std::unique_ptr<Store> SqliteStore::connect_again() const {
  if (path_ == ":memory:") {
    invalid(
        "sqlite: a private in-memory database (:memory:) has one connection; a second one "
        "(consumer.pipeline_depth 2) needs a database file");
  }
  return std::make_unique<SqliteStore>(path_, options_);
}

std::unique_ptr<Transaction> SqliteStore::begin() {
  // BEGIN IMMEDIATE takes the write lock now instead of at the first write. With a plain
  // (deferred) BEGIN two transactions can both start as readers and then both try to
  // upgrade to writer; SQLite must then fail one of them with SQLITE_BUSY at once (waiting
  // could deadlock), so busy_timeout does not help. Every idem transaction writes (at
  // least the dedup mark), so taking the lock up front costs nothing and makes concurrent
  // writers queue on busy_timeout instead.
  return start(*begin_, false);
}

std::unique_ptr<Transaction> SqliteStore::begin_read() {
  // A plain BEGIN never takes the write lock, and the transaction refuses to write, so it
  // can neither wait for a writer nor run into the upgrade deadlock described above.
  return start(*begin_read_, true);
}

std::unique_ptr<Transaction> SqliteStore::start(Statement& begin_statement, bool read_only) {
  if (open_tx_ != nullptr) {
    invalid(
        "sqlite: a transaction is already open on this Store; a Store is one connection "
        "(open one Store per thread)");
  }
  if (sqlite3_get_autocommit(db_) == 0) {
    invalid(
        "sqlite: the connection is still inside a transaction that idem did not start "
        "(begun through the native handle?)");
  }
  auto tx = std::make_unique<SqliteTransaction>(*this, read_only);
  std::optional<Error> error;
  if (run_control(begin_statement, "cannot begin transaction", error) != SQLITE_DONE) throw *error;
  open_tx_ = tx.get();
  return tx;
}

int SqliteStore::schema_version(std::string_view set) {
  if (!has_table("idem_schema_migrations")) return 0;
  Statement q(db_,
              "SELECT coalesce(max(version), 0) FROM idem_schema_migrations "
              "WHERE migration_set = ?1",
              0);
  StatementUse use(q);
  sqlite3_bind_text(q.get(), 1, set.data(), static_cast<int>(set.size()), SQLITE_TRANSIENT);
  const int rc = sqlite3_step(q.get());
  if (rc != SQLITE_ROW) throw make_error(db_, rc, "cannot read the schema version");
  return sqlite3_column_int(q.get(), 0);
}

void SqliteStore::apply_migration(std::string_view set, const SchemaMigration& migration,
                                  bool& applied) {
  const std::string name(migration.name);
  const std::string sql(migration.sql);
  // BEGIN IMMEDIATE holds the database's write lock from the check to the COMMIT, so
  // migrators in other connections and processes queue here (on busy_timeout) and each
  // migration is applied exactly once.
  exec_control("BEGIN IMMEDIATE", "cannot begin migration transaction");
  try {
    Statement check(
        db_, "SELECT 1 FROM idem_schema_migrations WHERE migration_set = ?1 AND version = ?2", 0);
    StatementUse use_check(check);
    sqlite3_bind_text(check.get(), 1, set.data(), static_cast<int>(set.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int(check.get(), 2, migration.version);
    const int rc = sqlite3_step(check.get());
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
      throw make_error(db_, rc, "cannot read applied migrations");
    applied = rc == SQLITE_DONE;
    if (applied) {
      // A store created with idem_outbox has no older `outbox` to rename (migration.hpp).
      const bool nothing_to_rename = set == kIdemMigrations &&
                                     migration.version == sqlite_sql::kOutboxRenameVersion &&
                                     has_table(kOutboxTable);
      // The migration's SQL may hold several statements; sqlite3_exec runs them all. It
      // runs without control permission: a BEGIN or COMMIT inside a migration file would
      // split the migration from its bookkeeping row, so it is refused.
      if (!nothing_to_rename)
        exec(sql.c_str(), fmt::format("migration {} of '{}' failed", name, set));
      Statement record(db_,
                       "INSERT INTO idem_schema_migrations(migration_set, version, name, "
                       "applied_at) VALUES (?1, ?2, ?3, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
                       0);
      StatementUse use_record(record);
      sqlite3_bind_text(record.get(), 1, set.data(), static_cast<int>(set.size()),
                        SQLITE_TRANSIENT);
      sqlite3_bind_int(record.get(), 2, migration.version);
      sqlite3_bind_text(record.get(), 3, name.c_str(), -1, SQLITE_TRANSIENT);
      const int ins = sqlite3_step(record.get());
      if (ins != SQLITE_DONE) throw make_error(db_, ins, "cannot record migration");
    }
    exec_control("COMMIT", "cannot commit migration");
  } catch (...) {
    if (sqlite3_get_autocommit(db_) == 0) {
      try {
        exec_control("ROLLBACK", "cannot roll back migration");
      } catch (...) {
        // The original error is the one worth reporting.
      }
    }
    applied = false;
    throw;
  }
}

MigrationReport SqliteStore::migrate(const MigrateOptions& options) {
  if (options.partitioned) {
    invalid("sqlite: partitioned processed_event is PostgreSQL-only (MigrateOptions::partitioned)");
  }
  return apply_migrations(kIdemMigrations, sqlite_sql::migrations());
}

MigrationReport SqliteStore::migrate_set(const MigrationSet& set) {
  check_migration_set_name(set.name, "sqlite");
  return apply_migrations(set.name, set.sqlite);
}

MigrationReport SqliteStore::apply_migrations(std::string_view set,
                                              std::span<const SchemaMigration> migrations) {
  if (open_tx_ != nullptr)
    invalid("sqlite: migrate() cannot run while a transaction is open on this Store");
  try {
    exec_control("BEGIN IMMEDIATE", "cannot begin migration transaction");
    try {
      exec(kMigrationsTableSql, "cannot create idem_schema_migrations");
      exec_control("COMMIT", "cannot commit migration transaction");
    } catch (...) {
      if (sqlite3_get_autocommit(db_) == 0) {
        try {
          exec_control("ROLLBACK", "cannot roll back");
        } catch (...) {
        }
      }
      throw;
    }

    MigrationReport report;
    report.from_version = schema_version(set);
    for (const SchemaMigration& m : migrations) {
      bool applied = false;
      apply_migration(set, m, applied);
      if (applied) report.applied.emplace_back(m.name);
    }
    report.to_version = schema_version(set);
    return report;
  } catch (const Error& e) {
    // A busy database is worth retrying; anything else means the schema could not be
    // brought up to date.
    if (e.transient()) throw;
    throw Error(ErrorCode::Schema, ErrorSource::Sqlite, e.what(), e.detail());
  }
}

}  // namespace idem::detail::sqlite

namespace idem {

std::unique_ptr<Store> make_sqlite_store(std::string_view path, const StoreOptions& options) {
  return std::make_unique<detail::sqlite::SqliteStore>(path, options);
}

sqlite3* sqlite_native_handle(Store& store) {
  auto* sqlite = dynamic_cast<detail::sqlite::SqliteStore*>(&store);
  if (sqlite == nullptr) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Sqlite,
                fmt::format("sqlite_native_handle: the store is a {} store, not SQLite",
                            to_string(store.backend())));
  }
  // Whatever the caller runs through the handle belongs inside the savepoints opened so
  // far, so deferred SAVEPOINTs run now (lazy savepoints, see SqliteTransaction).
  sqlite->materialize_open_savepoints();
  return sqlite->db();
}

}  // namespace idem
