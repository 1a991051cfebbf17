// The SQLite dedup store: the embedded default backend (IDEM-2, IDEM-3).
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

constexpr std::string_view kMarkSql =
    "INSERT INTO processed_event(event_id, consumer_group) VALUES (?1, ?2) "
    "ON CONFLICT DO NOTHING";

constexpr const char* kMigrationsTableSql =
    "CREATE TABLE IF NOT EXISTS idem_schema_migrations ("
    " migration_set TEXT NOT NULL,"
    " version INTEGER NOT NULL,"
    " name TEXT NOT NULL,"
    " applied_at TEXT NOT NULL,"
    " PRIMARY KEY (migration_set, version))";

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, ErrorSource::Sqlite, message);
}

void validate_group(std::string_view group) {
  if (group.empty()) invalid("sqlite: consumer_group must not be empty");
}

// Savepoint names come from idem::Savepoint ("idem_sp_<n>"). They are spliced into SQL
// (SAVEPOINT takes no parameters), so only a strict alphabet is accepted, and the name
// is quoted as an identifier on top of that.
void validate_savepoint_name(std::string_view name) {
  const bool ok =
      !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
      });
  if (!ok) invalid(fmt::format("sqlite: invalid savepoint name '{}'", name.substr(0, 64)));
}

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

/// One result cell as idem's text form: integers and reals exactly (shortest text that
/// reads back to the same value), text as UTF-8, BLOBs as their raw bytes.
std::optional<std::string> column_value(sqlite3_stmt* s, int col) {
  switch (sqlite3_column_type(s, col)) {
    case SQLITE_NULL: return std::nullopt;
    case SQLITE_INTEGER: {
      char buf[24];
      const auto r = std::to_chars(buf, buf + sizeof buf, sqlite3_column_int64(s, col));
      return std::string(buf, r.ptr);
    }
    case SQLITE_FLOAT: {
      char buf[32];
      const auto r = std::to_chars(buf, buf + sizeof buf, sqlite3_column_double(s, col));
      return std::string(buf, r.ptr);
    }
    case SQLITE_BLOB: {
      const void* p = sqlite3_column_blob(s, col);
      const int n = sqlite3_column_bytes(s, col);
      if (p == nullptr || n <= 0) return std::string();
      return std::string(static_cast<const char*>(p), static_cast<std::size_t>(n));
    }
    default: {
      const unsigned char* p = sqlite3_column_text(s, col);
      const int n = sqlite3_column_bytes(s, col);
      if (p == nullptr || n <= 0) return std::string();
      return std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n));
    }
  }
}

std::uint64_t load_be64(const unsigned char* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

int bind_one(sqlite3_stmt* s, int index, const Param& p) {
  // SQLITE_STATIC: the values live in the caller's span for the whole execute call, and
  // the statement's bindings are cleared before execute returns.
  return std::visit(
      Overloaded{
          [&](std::monostate) { return sqlite3_bind_null(s, index); },
          [&](std::int64_t v) { return sqlite3_bind_int64(s, index, v); },
          [&](double v) { return sqlite3_bind_double(s, index, v); },
          [&](bool v) { return sqlite3_bind_int(s, index, v ? 1 : 0); },
          [&](const std::string& v) {
            return sqlite3_bind_text64(s, index, v.data(), v.size(), SQLITE_STATIC, SQLITE_UTF8);
          },
          [&](const Uuid& v) {
            return sqlite3_bind_blob(s, index, v.bytes().data(), static_cast<int>(v.bytes().size()),
                                     SQLITE_STATIC);
          },
      },
      p.value());
}

void bind_all(sqlite3* db, Statement& st, std::span<const Param> params, std::string_view sql) {
  const auto& binding = st.binding();
  const auto given = params.size();
  const auto needed = static_cast<std::size_t>(st.arity());
  if (given < needed) {
    std::size_t missing = needed - 1;
    for (const int b : binding) {
      const auto idx = static_cast<std::size_t>(b);
      if (idx >= given && idx < missing) missing = idx;
    }
    invalid(
        fmt::format("sqlite: placeholder ${} has no value: the statement uses {} parameter(s), {} "
                    "given [SQL: {}]",
                    missing + 1, needed, given, sql_excerpt(sql)));
  }
  if (given > needed) {
    invalid(fmt::format("sqlite: the statement uses {} parameter(s), but {} were given [SQL: {}]",
                        needed, given, sql_excerpt(sql)));
  }
  sqlite3_stmt* s = st.get();
  for (std::size_t i = 0; i < binding.size(); ++i) {
    const auto idx = static_cast<std::size_t>(binding[i]);
    const int rc = bind_one(s, static_cast<int>(i + 1), params[idx]);
    if (rc != SQLITE_OK)
      throw make_error(db, rc, fmt::format("cannot bind parameter ${}", idx + 1), sql);
  }
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
    : path_(path), user_cache_(kUserStatementCacheSize), batch_cache_(kBatchStatementCacheSize) {
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
      // The migration's SQL may hold several statements; sqlite3_exec runs them all. It
      // runs without control permission: a BEGIN or COMMIT inside a migration file would
      // split the migration from its bookkeeping row, so it is refused.
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

// ---------------------------------------------------------------------------------------
// SqliteTransaction

SqliteTransaction::~SqliteTransaction() {
  rollback();
}

void SqliteTransaction::finish(State state) noexcept {
  state_ = state;
  savepoints_.clear();
  if (store_ != nullptr) store_->transaction_finished(this);
}

void SqliteTransaction::check_still_open() noexcept {
  if (state_ == State::Active && store_ != nullptr && sqlite3_get_autocommit(store_->db()) != 0) {
    finish(State::Aborted);
  }
}

SqliteStore& SqliteTransaction::usable() {
  switch (state_) {
    case State::Active: break;
    case State::Committed:
    case State::RolledBack:
      invalid("sqlite: the transaction is already finished (committed or rolled back)");
    case State::Aborted:
      throw Error(ErrorCode::TransactionAborted, ErrorSource::Sqlite,
                  "sqlite: the transaction was rolled back after an earlier error; redo the whole "
                  "unit of work in a new transaction");
    case State::Detached: invalid("sqlite: the Store of this transaction was destroyed");
  }
  if (sqlite3_get_autocommit(store_->db()) != 0) {
    finish(State::Aborted);
    throw Error(ErrorCode::TransactionAborted, ErrorSource::Sqlite,
                "sqlite: SQLite rolled the transaction back after an earlier error; redo the "
                "whole unit of work in a new transaction");
  }
  return *store_;
}

Rows SqliteTransaction::execute_params(std::string_view sql, std::span<const Param> params) {
  SqliteStore& store = usable();
  materialize_savepoints();
  sqlite3* db = store.db();
  Statement& st = store.user_statement(sql);
  StatementUse use(st);
  bind_all(db, st, params, sql);

  sqlite3_stmt* s = st.get();
  if (sqlite3_stmt_readonly(s) == 0) require_writable(sql);
  const int columns = sqlite3_column_count(s);
  std::vector<std::optional<std::string>> cells;
  const sqlite3_int64 changes_before = sqlite3_total_changes64(db);
  for (;;) {
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
      for (int c = 0; c < columns; ++c) cells.push_back(column_value(s, c));
      continue;
    }
    if (rc == SQLITE_DONE) break;
    const Error e = make_error(db, rc, "statement failed", sql);
    st.reset();
    check_still_open();
    throw e;
  }
  // sqlite3_changes() keeps the count of the last INSERT/UPDATE/DELETE, so it is only
  // read when this statement changed something (a SELECT or DDL reports 0).
  std::int64_t affected = 0;
  if (sqlite3_stmt_readonly(s) == 0 && sqlite3_total_changes64(db) != changes_before) {
    affected = sqlite3_changes64(db);
  }
  return Rows(static_cast<std::size_t>(columns), std::move(cells), affected);
}

void SqliteTransaction::execute_deferred_params(std::string_view sql,
                                                std::span<const Param> params) {
  // An INSERT/UPDATE returns no rows, so this builds nothing; a statement that does
  // return rows has them dropped.
  (void)execute_params(sql, params);
}

void SqliteTransaction::require_writable(std::string_view what) const {
  if (!read_only_) return;
  throw Error(ErrorCode::InvalidArgument, ErrorSource::Sqlite,
              fmt::format("sqlite: a read transaction (begin_read) cannot write: {}", what));
}

bool SqliteTransaction::mark_processed(const Uuid& event_id, std::string_view consumer_group) {
  require_writable("mark_processed");
  validate_group(consumer_group);
  SqliteStore& store = usable();
  materialize_savepoints();
  sqlite3* db = store.db();
  Statement& st = store.mark_statement();
  StatementUse use(st);
  sqlite3_stmt* s = st.get();
  int rc = sqlite3_bind_blob(s, 1, event_id.bytes().data(),
                             static_cast<int>(event_id.bytes().size()), SQLITE_STATIC);
  if (rc == SQLITE_OK) {
    rc = sqlite3_bind_text64(s, 2, consumer_group.data(), consumer_group.size(), SQLITE_STATIC,
                             SQLITE_UTF8);
  }
  if (rc != SQLITE_OK) throw make_error(db, rc, "cannot bind dedup mark", kMarkSql);
  // INSERT ... ON CONFLICT DO NOTHING: the primary key decides atomically whether this
  // is the first time (one row inserted) or not (none). Never SELECT-then-INSERT.
  rc = sqlite3_step(s);
  if (rc != SQLITE_DONE) {
    const Error e = make_error(db, rc, "cannot mark event processed", kMarkSql);
    st.reset();
    check_still_open();
    throw e;
  }
  return sqlite3_changes64(db) == 1;
}

std::vector<bool> SqliteTransaction::processed_among(std::span<const Uuid> event_ids,
                                                     std::string_view consumer_group) {
  validate_group(consumer_group);
  std::vector<bool> out(event_ids.size(), false);
  for (std::size_t i = 0; i < event_ids.size(); ++i) {
    const std::array<Param, 2> params{Param(event_ids[i]), Param(consumer_group)};
    out[i] =
        !execute_params("SELECT 1 FROM processed_event WHERE event_id = $1 AND consumer_group = $2",
                        params)
             .empty();
  }
  return out;
}

std::vector<bool> SqliteTransaction::mark_processed_batch(std::span<const Uuid> event_ids,
                                                          std::string_view consumer_group) {
  require_writable("mark_processed_batch");
  validate_group(consumer_group);
  SqliteStore& store = usable();
  std::vector<bool> result(event_ids.size(), false);
  if (event_ids.empty()) return result;
  materialize_savepoints();

  // Distinct ids with the position of their first occurrence, sorted by id. Sorting
  // (rather than hashing) needs one allocation, lets RETURNING rows be mapped back to
  // positions by a forward scan, and inserts in key order, which is kind to the B-tree.
  // Ids are compared as two big-endian 64-bit halves (the same order as bytewise).
  struct Item {
    std::uint64_t hi;
    std::uint64_t lo;
    std::size_t pos;
  };
  const auto key_less = [](const Item& a, const Item& b) {
    return a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo;
  };
  std::vector<Item> items;
  items.reserve(event_ids.size());
  for (std::size_t i = 0; i < event_ids.size(); ++i) {
    const auto* b = event_ids[i].bytes().data();
    items.push_back({load_be64(b), load_be64(b + 8), i});
  }
  // UUIDv7s from one producer mostly arrive in order already; then there is nothing to sort.
  const auto by_key_then_pos = [&](const Item& a, const Item& b) {
    return key_less(a, b) || (!key_less(b, a) && a.pos < b.pos);
  };
  if (!std::is_sorted(items.begin(), items.end(), by_key_then_pos)) {
    std::sort(items.begin(), items.end(), by_key_then_pos);
  }
  items.erase(
      std::unique(items.begin(), items.end(),
                  [](const Item& a, const Item& b) { return a.hi == b.hi && a.lo == b.lo; }),
      items.end());

  sqlite3* db = store.db();
  const std::size_t chunk = store.max_batch_rows();
  for (std::size_t offset = 0; offset < items.size(); offset += chunk) {
    const std::size_t rows = std::min(chunk, items.size() - offset);
    const auto first = items.begin() + static_cast<std::ptrdiff_t>(offset);
    const auto last = first + static_cast<std::ptrdiff_t>(rows);

    // The statement's row count is rounded up (to a power of two up to 32, then to a
    // multiple of 32, never past the chunk size) and the extra rows repeat the last id.
    // A repeated id inside one INSERT ... ON CONFLICT DO NOTHING conflicts with its own
    // first row, so it inserts nothing and RETURNING does not return it: the result is
    // the same. Why: the number of distinct ids in a batch varies with its duplicates,
    // and with exact sizes a batch of 1000 with 10% duplicates needed a new size almost
    // every batch, so the 16-entry cache thrashed and each batch re-prepared its marker
    // (1-2 ms for ~900 rows). Measured with idem_bench_consumer, 1M events, dedup-only
    // handler: batches of 100, 36k events/s with exact sizes (raw loop 137k); see
    // bench/RESULTS.md for the figures after. Padding costs one failed index probe per row.
    std::size_t padded = 1;
    while (padded < rows && padded < 32) padded *= 2;
    if (rows > 32) padded = (rows + 31) / 32 * 32;
    padded = std::min(padded, chunk);
    Statement& st = store.batch_statement(padded);
    StatementUse use(st);
    sqlite3_stmt* s = st.get();
    int rc = sqlite3_bind_text64(s, 1, consumer_group.data(), consumer_group.size(), SQLITE_STATIC,
                                 SQLITE_UTF8);
    for (std::size_t r = 0; r < padded && rc == SQLITE_OK; ++r) {
      const std::size_t k = std::min(r, rows - 1);
      rc = sqlite3_bind_blob(s, static_cast<int>(r + 2),
                             event_ids[first[static_cast<std::ptrdiff_t>(k)].pos].bytes().data(),
                             16, SQLITE_STATIC);
    }
    if (rc != SQLITE_OK) throw make_error(db, rc, "cannot bind dedup batch");

    // One multi-row INSERT ... ON CONFLICT DO NOTHING RETURNING event_id: the rows it
    // returns are exactly the ids inserted now, i.e. the ones not processed before.
    // SQLite returns them in insertion order in practice (the documentation promises no
    // order), i.e. sorted, so a cursor that only moves forward finds each one; a binary
    // search covers any other order.
    auto cursor = first;
    for (;;) {
      rc = sqlite3_step(s);
      if (rc == SQLITE_ROW) {
        const auto* blob = static_cast<const unsigned char*>(sqlite3_column_blob(s, 0));
        if (blob == nullptr || sqlite3_column_bytes(s, 0) != 16) {
          throw Error(ErrorCode::Internal, ErrorSource::Sqlite,
                      "sqlite: dedup batch returned an event_id that is not 16 bytes");
        }
        const Item key{load_be64(blob), load_be64(blob + 8), 0};
        while (cursor != last && key_less(*cursor, key)) ++cursor;
        auto it = cursor;
        if (it == last || key_less(key, *it)) it = std::lower_bound(first, last, key, key_less);
        if (it == last || key_less(key, *it)) {
          throw Error(ErrorCode::Internal, ErrorSource::Sqlite,
                      "sqlite: dedup batch returned an event_id it was not given");
        }
        result[it->pos] = true;
        continue;
      }
      if (rc == SQLITE_DONE) break;
      const Error e = make_error(db, rc, "cannot mark event batch processed");
      st.reset();
      check_still_open();
      throw e;
    }
  }
  return result;
}

// Lazy savepoints. SAVEPOINT runs only when the next statement does (so a savepoint
// with no statement inside costs nothing: the consumer's dedup-only handlers), and a
// savepoint that never ran needs no RELEASE or ROLLBACK TO, because nothing ran after
// it. Every path that runs SQL on the connection (execute_params, the marks, the native
// handle) calls materialize_savepoints() first, so the connection's savepoint stack is
// exactly savepoints_ whenever a statement runs. The statements are prepared once per
// nesting depth instead of parsed per call (sqlite3_exec of "SAVEPOINT \"idem_sp_<n>\""
// and "RELEASE ..." cost about 2 x 2-3 us per event before).
std::size_t SqliteTransaction::find_savepoint(std::string_view name) const {
  for (std::size_t i = savepoints_.size(); i-- > 0;) {
    if (savepoints_[i].name == name) return i;
  }
  invalid(fmt::format("sqlite: no such savepoint: {}", name));
}

void SqliteTransaction::materialize_savepoints() {
  if (savepoints_.empty() || savepoints_.back().sent) return;
  SqliteStore& store = usable();
  for (std::size_t i = 0; i < savepoints_.size(); ++i) {
    if (savepoints_[i].sent) continue;
    std::optional<Error> error;
    if (store.run_control(store.savepoint_statement(i, SqliteStore::SavepointOp::Create),
                          "cannot create savepoint", error) != SQLITE_DONE) {
      check_still_open();
      throw *error;
    }
    savepoints_[i].sent = true;
  }
}

void SqliteTransaction::savepoint(std::string_view name) {
  validate_savepoint_name(name);
  (void)usable();
  savepoints_.push_back({std::string(name), false});
}

void SqliteTransaction::release_savepoint(std::string_view name) {
  validate_savepoint_name(name);
  SqliteStore& store = usable();
  const std::size_t i = find_savepoint(name);
  if (savepoints_[i].sent) {
    // RELEASE also releases every savepoint nested inside this one.
    std::optional<Error> error;
    if (store.run_control(store.savepoint_statement(i, SqliteStore::SavepointOp::Release),
                          "cannot release savepoint", error) != SQLITE_DONE) {
      check_still_open();
      throw *error;
    }
  }
  savepoints_.resize(i);
}

void SqliteTransaction::rollback_to_savepoint(std::string_view name) {
  validate_savepoint_name(name);
  SqliteStore& store = usable();
  const std::size_t i = find_savepoint(name);
  if (savepoints_[i].sent) {
    // The savepoint stays open; the ones nested inside it are gone.
    std::optional<Error> error;
    if (store.run_control(store.savepoint_statement(i, SqliteStore::SavepointOp::RollbackTo),
                          "cannot roll back to savepoint", error) != SQLITE_DONE) {
      check_still_open();
      throw *error;
    }
  }
  savepoints_.resize(i + 1);
}

void SqliteTransaction::commit() {
  SqliteStore& store = usable();
  std::optional<Error> error;
  const int rc = store.run_control(*store.commit_, "commit failed", error);
  if (rc == SQLITE_DONE) {
    finish(State::Committed);
    return;
  }
  // SQLite may leave the transaction open after a failed COMMIT (after SQLITE_BUSY it
  // expects the caller to retry the COMMIT). idem's callers redo the whole unit of work
  // instead, so roll back now and leave the connection ready for the next begin().
  if (sqlite3_get_autocommit(store.db()) == 0) {
    std::optional<Error> ignored;
    store.run_control(*store.rollback_, "rollback after failed commit", ignored);
  }
  finish(State::Aborted);
  // An I/O error during COMMIT leaves the outcome unknown: the WAL frame carrying the
  // commit record may be written although its fsync failed, and recovery would then keep
  // it. Never guess (InDoubt): redelivery plus the dedup mark decide.
  if ((rc & 0xff) == SQLITE_IOERR) {
    throw Error(ErrorCode::InDoubt, ErrorSource::Sqlite, error->what(), error->detail());
  }
  throw *error;
}

void SqliteTransaction::rollback() noexcept {
  if (state_ != State::Active) return;
  if (store_ != nullptr && sqlite3_get_autocommit(store_->db()) == 0) {
    try {
      std::optional<Error> ignored;
      store_->run_control(*store_->rollback_, "rollback failed", ignored);
    } catch (...) {
      // Only allocation can throw here. If ROLLBACK itself failed, SQLite has either
      // rolled back already or will when the connection closes; the next begin() reports
      // a connection still inside a transaction.
    }
  }
  finish(State::RolledBack);
}

void SqliteTransaction::detach() noexcept {
  rollback();
  state_ = State::Detached;
  store_ = nullptr;
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
