#pragma once
// The SQLite store and its transaction. Private: users get them through
// make_sqlite_store() / open_store() as idem::Store and idem::Transaction.
#include <sqlite3.h>

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "idem/error.hpp"
#include "idem/store.hpp"
#include "stores/sqlite/statement_cache.hpp"

namespace idem::detail::sqlite {

class SqliteTransaction;

/// One SQLite connection (see make_sqlite_store for how it is configured).
class SqliteStore final : public Store {
 public:
  SqliteStore(std::string_view path, const StoreOptions& options);
  ~SqliteStore() override;

  [[nodiscard]] std::unique_ptr<Transaction> begin() override;
  [[nodiscard]] std::unique_ptr<Transaction> begin_read() override;
  MigrationReport migrate(const MigrateOptions& options) override;
  MigrationReport migrate_set(const MigrationSet& set) override;
  [[nodiscard]] int schema_version(std::string_view set) override;
  [[nodiscard]] Backend backend() const noexcept override { return Backend::Sqlite; }
  [[nodiscard]] std::unique_ptr<Store> connect_again() const override;

  [[nodiscard]] sqlite3* db() const noexcept { return db_; }
  /// Runs the deferred SAVEPOINTs of the open transaction (before native-handle use).
  void materialize_open_savepoints();

 private:
  friend class SqliteTransaction;

  // --- used by SqliteTransaction -------------------------------------------------
  /// The cached statement for user SQL, preparing it on first use.
  Statement& user_statement(std::string_view sql);
  /// The cached single-row marker / the cached multi-row marker for `rows` ids.
  Statement& mark_statement();
  Statement& batch_statement(std::size_t rows);
  /// Runs COMMIT / ROLLBACK / SAVEPOINT ... as idem itself (the authorizer lets them through).
  /// Returns the SQLite result; on failure `error` holds the Error built before the reset.
  int run_control(Statement& st, std::string_view what, std::optional<Error>& error);
  void exec_control(const std::string& sql, std::string_view what);
  /// SAVEPOINT / RELEASE / ROLLBACK TO for the savepoint at nesting `depth`, prepared once.
  enum class SavepointOp { Create = 0, Release = 1, RollbackTo = 2 };
  Statement& savepoint_statement(std::size_t depth, SavepointOp op);
  void transaction_finished(const SqliteTransaction* tx) noexcept;
  [[nodiscard]] std::size_t max_batch_rows() const noexcept { return max_batch_rows_; }

  // --- internals ---------------------------------------------------------------
  /// Opens a transaction with `begin_statement` (BEGIN IMMEDIATE or BEGIN).
  std::unique_ptr<Transaction> start(Statement& begin_statement, bool read_only);
  static int authorize(void* self, int action, const char*, const char*, const char*,
                       const char*) noexcept;
  void exec(const char* sql, std::string_view what);
  std::unique_ptr<Statement> prepare_schema_statement(const std::string& sql);
  [[nodiscard]] bool has_table(const char* name);
  MigrationReport apply_migrations(std::string_view set,
                                   std::span<const SchemaMigration> migrations);
  void apply_migration(std::string_view set, const SchemaMigration& migration, bool& applied);

  sqlite3* db_ = nullptr;
  std::string path_;
  StoreOptions options_;  // for connect_again()
  std::size_t max_batch_rows_ = 0;
  SqliteTransaction* open_tx_ = nullptr;
  // Set while idem itself runs BEGIN/COMMIT/ROLLBACK/SAVEPOINT; the authorizer denies
  // those statements otherwise (see authorize()).
  bool control_allowed_ = false;
  bool control_denied_ = false;
  std::unique_ptr<Statement> begin_;
  std::unique_ptr<Statement> begin_read_;
  std::unique_ptr<Statement> commit_;
  std::unique_ptr<Statement> rollback_;
  std::unique_ptr<Statement> mark_;
  std::vector<std::array<std::unique_ptr<Statement>, 3>> savepoint_statements_;  // by depth
  SqlStatementCache user_cache_;
  SizedStatementCache batch_cache_;
};

/// A transaction on a SqliteStore, opened with BEGIN IMMEDIATE.
class SqliteTransaction final : public Transaction {
 public:
  /// `read_only`: opened by begin_read() (plain BEGIN); statements that write are refused.
  SqliteTransaction(SqliteStore& store, bool read_only) noexcept
      : store_(&store), read_only_(read_only) {}
  ~SqliteTransaction() override;

  Rows execute_params(std::string_view sql, std::span<const Param> params) override;
  /// SQLite has no round trip to save: runs the statement now, discarding its rows.
  void execute_deferred_params(std::string_view sql, std::span<const Param> params) override;
  void sync() override { (void)usable(); }
  [[nodiscard]] bool mark_processed(const Uuid& event_id, std::string_view consumer_group) override;
  [[nodiscard]] std::vector<bool> mark_processed_batch(std::span<const Uuid> event_ids,
                                                       std::string_view consumer_group) override;
  /// One primary-key probe per id through one cached statement: SQLite runs in-process,
  /// so there is no round trip to batch away (a probe costs microseconds).
  [[nodiscard]] std::vector<bool> processed_among(std::span<const Uuid> event_ids,
                                                  std::string_view consumer_group) override;
  void commit() override;
  void rollback() noexcept override;
  [[nodiscard]] bool active() const noexcept override { return state_ == State::Active; }

  /// The store is being destroyed while this transaction is open: roll back and let go.
  void detach() noexcept;
  /// Sends the SAVEPOINTs that were deferred (see savepoint()); called before every
  /// statement and when the native handle is handed out.
  void materialize_savepoints();

 protected:
  void savepoint(std::string_view name) override;
  void release_savepoint(std::string_view name) override;
  void rollback_to_savepoint(std::string_view name) override;

 private:
  enum class State { Active, Committed, RolledBack, Aborted, Detached };

  /// The store, if this transaction can still run statements; throws otherwise.
  SqliteStore& usable();
  /// Throws Error(InvalidArgument) in a transaction opened by begin_read().
  void require_writable(std::string_view what) const;
  /// After a failed statement: SQLite rolls the whole transaction back by itself on some
  /// errors (SQLITE_FULL, SQLITE_IOERR, SQLITE_BUSY, SQLITE_NOMEM, and constraints with
  /// an OR ROLLBACK clause). Notice that, so no later statement runs in autocommit mode.
  void check_still_open() noexcept;
  void finish(State state) noexcept;

  SqliteStore* store_;
  State state_ = State::Active;
  bool read_only_ = false;
  // Open savepoints, outermost first. On the connection savepoint i is named by its
  // depth ("idem_sp_d<i>"), so its three statements are prepared once per depth; the
  // caller's name only finds the entry. `sent`: SAVEPOINT has run on the connection.
  struct OpenSavepoint {
    std::string name;
    bool sent = false;
  };
  std::vector<OpenSavepoint> savepoints_;
  [[nodiscard]] std::size_t find_savepoint(std::string_view name) const;
};

}  // namespace idem::detail::sqlite
