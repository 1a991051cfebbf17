#pragma once
// The PostgreSQL store's internals, shared by its parts: postgres_store.cpp (the store,
// its migrations and factories), pg_transaction.cpp (the pipelined transaction with lazy
// savepoints and deferred statements), pg_marks.cpp (the dedup marks) and
// pg_store_support.cpp (result and parameter helpers).
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "idem/store.hpp"
#include "stores/postgres/pg_connection.hpp"
#include "stores/postgres/pg_insert_merge.hpp"

namespace idem::detail::pg {

/// The rows a statement changed (0 for a SELECT, as on SQLite).
[[nodiscard]] std::int64_t affected_rows(const PGresult* r);
[[nodiscard]] Rows to_rows(const PGresult* r);
void validate_savepoint_name(std::string_view name);
void put_be32(std::string& out, std::uint32_t v);
/// Appends the libpq text form of a non-NULL, non-string value to `out`.
void append_text(std::string& out, const Param::Value& v);

// Parameters encoded as libpq text-format C strings. Numbers and UUIDs are
// written into one arena; strings point at the Param's own storage.
class TextParams {
 public:
  Params encode(std::span<const Param> params);

 private:
  std::string arena_;
  std::vector<std::size_t> offsets_;
  std::vector<const char*> values_;
};

class PostgresStore;

class PostgresTransaction final : public Transaction {
 public:
  explicit PostgresTransaction(PostgresStore& store);
  ~PostgresTransaction() override { rollback(); }

  Rows execute_params(std::string_view sql, std::span<const Param> params) override;
  bool mark_processed(const Uuid& event_id, std::string_view consumer_group) override;
  std::vector<bool> mark_processed_batch(std::span<const Uuid> event_ids,
                                         std::string_view consumer_group) override;
  std::vector<bool> processed_among(std::span<const Uuid> event_ids,
                                    std::string_view consumer_group) override;
  void commit() override;
  void rollback() noexcept override;
  [[nodiscard]] bool active() const noexcept override { return state_ != State::Finished; }

  void execute_deferred_params(std::string_view sql, std::span<const Param> params) override;
  void sync() override;

  /// Sends everything deferred (BEGIN, SAVEPOINTs, RELEASEs, deferred statements) now,
  /// for users of the native handle.
  void start_now();
  [[nodiscard]] std::size_t find_savepoint(std::string_view name) const;

 protected:
  void savepoint(std::string_view name) override;
  void release_savepoint(std::string_view name) override;
  void rollback_to_savepoint(std::string_view name) override;

 private:
  enum class State {
    Pending,   // begin() returned; BEGIN not run yet (it travels with the first statement)
    Open,      // the server has an open transaction block
    Finished,  // committed, rolled back, or lost
  };
  struct Earlier {  // the first failure since the transaction (or savepoint) began
    ErrorCode code;
    std::string message;
    std::string sqlstate;
  };
  enum class SavepointState {
    Recorded,  // savepoint() was called; nothing ran after it yet
    Queued,    // its SAVEPOINT waits in queue_ (at queue_pos) for the next round trip
    Sent,      // its SAVEPOINT has run on the server
  };
  struct SavepointMark {
    std::string name;
    std::optional<Earlier> failure_before;
    SavepointState state = SavepointState::Recorded;
    std::size_t queue_pos = 0;
  };
  // A command waiting for the next round trip, in the order it was issued.
  struct Queued {
    enum class Kind { Begin, Savepoint, Release, Statement } kind;
    std::string text;             // the command; for a Statement, its SQL if it is not prepared
    Statement* stmt = nullptr;    // a deferred statement's cached statement
    std::size_t first_param = 0;  // into param_offsets_
    std::size_t param_count = 0;
  };

  void check_usable();
  static void check_param_count(const Statement* stmt, std::string_view sql, std::size_t bound);
  static void check_consumer_group(std::string_view consumer_group);
  /// Queues BEGIN (if not yet) and the SAVEPOINT of every savepoint only recorded so far:
  /// whatever is issued next belongs inside them.
  void queue_control();
  /// Runs the queue and then `main` (if given) in one round trip, and applies what ran.
  Reply run_queue(const Command* main);
  /// Builds commands_ from the queue, merging runs of one deferred INSERT (see
  /// pg_insert_merge.hpp).
  void build_commands();
  Reply run(Statement* stmt, std::string_view sql, const Params& params, int result_format);
  /// Sends the queue now; throws the first error among it.
  void send_queue();
  void drop_queue() noexcept;
  void command(const std::string& sql);
  [[noreturn]] void fail(const PGresult* result, std::string_view what);
  /// fail() for the dedup marks, which name a missing processed_event as a schema problem.
  [[noreturn]] void fail_mark(const PGresult* result, std::string_view what);
  void finish() noexcept;

  PostgresStore& store_;
  Connection& conn_;
  State state_ = State::Pending;
  bool begin_queued_ = false;
  bool connection_lost_ = false;
  std::optional<Earlier> failure_;
  std::vector<SavepointMark> savepoints_;
  // Lazy savepoints and deferred statements: everything issued since the last round
  // trip that needs no answer yet. It travels in the pipeline of the next synchronous
  // statement (or sync(), or ROLLBACK TO); COMMIT/ROLLBACK make trailing RELEASEs and
  // SAVEPOINTs unnecessary.
  std::vector<Queued> queue_;
  std::size_t queued_statements_ = 0;
  std::string param_arena_;                    // deferred parameters' text, NUL-terminated
  std::vector<std::ptrdiff_t> param_offsets_;  // per deferred parameter; -1 for NULL
  // Set by run_queue() when the failure it returned was a deferred statement's: its SQL.
  std::string failed_deferred_;
  // Reused by run_queue(): the commands, their parameters, and per queued command the
  // command it went in (consecutive deferred INSERTs of one text share one).
  std::vector<Command> commands_;
  std::vector<const char*> values_;
  std::vector<std::size_t> command_of_;
  std::vector<std::size_t> value_of_;  // per queued command: its first parameter in values_
};

class PostgresStore final : public Store {
 public:
  PostgresStore(std::string_view conninfo, const StoreOptions& options);
  ~PostgresStore() override = default;

  std::unique_ptr<Transaction> begin() override;

  MigrationReport migrate(const MigrateOptions& options) override;
  MigrationReport migrate_set(const MigrationSet& set) override;
  int schema_version(std::string_view set) override;
  MigrationReport apply_migrations(std::string_view set,
                                   std::span<const SchemaMigration> migrations,
                                   const MigrateOptions* options);
  [[nodiscard]] Backend backend() const noexcept override { return Backend::Postgres; }
  [[nodiscard]] std::uint64_t reconnects() const noexcept override {
    return conn_.generation() - 1;
  }
  [[nodiscard]] std::unique_ptr<Store> connect_again() const override;

  PGconn* native() {
    if (active_ != nullptr) active_->start_now();
    return conn_.native();
  }

  Connection& connection() noexcept { return conn_; }
  Statement& mark_one() noexcept { return mark_one_; }
  Statement& mark_batch() noexcept { return mark_batch_; }
  InsertMerger& merger() noexcept { return merger_; }
  TextParams& text_params() noexcept { return text_params_; }
  std::string& scratch() noexcept { return scratch_; }
  void transaction_finished() noexcept { active_ = nullptr; }

 private:
  Result query(const char* sql, std::span<const char* const> params, const char* what);
  void check_processed_event(const MigrateOptions& options, bool recorded);
  /// Whether `name` resolves to a table or view on the search path.
  bool relation_exists(const char* name);

  // Kept for connect_again() only (it may hold a password: never logged).
  std::string conninfo_;
  StoreOptions options_;
  Connection conn_;
  PostgresTransaction* active_ = nullptr;
  Statement mark_one_;
  Statement mark_batch_;
  InsertMerger merger_{conn_};
  TextParams text_params_;
  std::string scratch_;  // reused buffer for the batch array
};

}  // namespace idem::detail::pg
