// The PostgreSQL dedup store (libpq).
//
// Transactions run at READ COMMITTED, PostgreSQL's default, on purpose: the dedup
// mark is INSERT ... ON CONFLICT DO NOTHING, and at READ COMMITTED a concurrent
// insert of the same key makes the second inserter wait for the first and then
// either conflict (first committed: "not new") or insert (first rolled back: "new").
// That is exactly the race-safe check IDEM-2 asks for, without the serialization
// failures REPEATABLE READ / SERIALIZABLE would add for the same race. Business
// SQL that needs stronger isolation can SET TRANSACTION as its first statement.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "idem/stores/postgres.hpp"
#include "stores/migration.hpp"
#include "stores/postgres/pg_connection.hpp"
#include "stores/postgres/pg_partitions.hpp"

namespace idem {
namespace detail::pg {
namespace {

// pg_advisory_xact_lock key that serialises concurrent migrators: "idem-mig" as
// a big-endian int64. Any constant works; this one is recognisable in pg_locks.
constexpr std::int64_t kMigrationLockKey = 7594306391241484647;

constexpr const char* kMarkOneSql =
    "INSERT INTO processed_event (event_id, consumer_group) VALUES ($1, $2) "
    "ON CONFLICT DO NOTHING";
// One statement for the whole batch; RETURNING names the ids that were new.
constexpr const char* kMarkBatchSql =
    "INSERT INTO processed_event (event_id, consumer_group) "
    "SELECT unnest($1::uuid[]), $2 ON CONFLICT DO NOTHING RETURNING event_id";

bool ok_status(const PGresult* r) {
  if (r == nullptr) return false;
  const ExecStatusType s = PQresultStatus(r);
  return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
}

std::int64_t affected_rows(const PGresult* r) {
  // PQcmdTuples also counts the rows a SELECT returned; Rows::affected() means
  // rows changed, so read-only statements report 0 (as on SQLite).
  if (std::strncmp(PQcmdStatus(const_cast<PGresult*>(r)), "SELECT", 6) == 0) return 0;
  const char* n = PQcmdTuples(const_cast<PGresult*>(r));
  std::int64_t v = 0;
  std::from_chars(n, n + std::strlen(n), v);
  return v;
}

Rows to_rows(const PGresult* r) {
  const int nrows = PQntuples(r);
  const int ncols = PQnfields(r);
  std::vector<std::optional<std::string>> cells;
  cells.reserve(static_cast<std::size_t>(nrows) * static_cast<std::size_t>(ncols));
  for (int i = 0; i < nrows; ++i) {
    for (int j = 0; j < ncols; ++j) {
      if (PQgetisnull(r, i, j)) {
        cells.emplace_back(std::nullopt);
      } else {
        cells.emplace_back(std::in_place, PQgetvalue(r, i, j),
                           static_cast<std::size_t>(PQgetlength(r, i, j)));
      }
    }
  }
  return Rows(static_cast<std::size_t>(ncols), std::move(cells), affected_rows(r));
}

void validate_savepoint_name(std::string_view name) {
  const bool valid = !name.empty() && name.size() <= 63 &&
                     !(name.front() >= '0' && name.front() <= '9') &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
                     });
  if (!valid) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Postgres,
                fmt::format("invalid savepoint name '{}': use [a-z0-9_], not starting with a "
                            "digit, at most 63 characters",
                            name));
  }
}

void put_be32(std::string& out, std::uint32_t v) {
  const char bytes[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                         static_cast<char>(v >> 8), static_cast<char>(v)};
  out.append(bytes, 4);
}

// Appends the libpq text form of a non-NULL, non-string value to `out`.
void append_text(std::string& out, const Param::Value& v) {
  char buf[64];
  if (const auto* i = std::get_if<std::int64_t>(&v)) {
    const auto res = std::to_chars(buf, buf + sizeof buf, *i);
    out.append(buf, res.ptr);
  } else if (const auto* d = std::get_if<double>(&v)) {
    // float8in reads these spellings; to_chars would write "inf"/"nan".
    if (std::isnan(*d)) {
      out += "NaN";
    } else if (std::isinf(*d)) {
      out += *d > 0 ? "Infinity" : "-Infinity";
    } else {
      const auto res = std::to_chars(buf, buf + sizeof buf, *d);  // shortest round trip
      out.append(buf, res.ptr);
    }
  } else if (const auto* b = std::get_if<bool>(&v)) {
    out += *b ? "true" : "false";
  } else if (const auto* u = std::get_if<Uuid>(&v)) {
    u->format_to(buf);
    out.append(buf, 36);
  } else if (const auto* s = std::get_if<std::string>(&v)) {
    out += *s;
  }
}

// Parameters encoded as libpq text-format C strings. Numbers and UUIDs are
// written into one arena; strings point at the Param's own storage.
class TextParams {
 public:
  Params encode(std::span<const Param> params) {
    arena_.clear();
    offsets_.clear();
    values_.clear();
    for (const Param& p : params) {
      offsets_.push_back(arena_.size());
      const auto& v = p.value();
      if (v.index() != 0 && !std::holds_alternative<std::string>(v)) {
        append_text(arena_, v);
        arena_.push_back('\0');
      }
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto& v = params[i].value();
      if (v.index() == 0) {
        values_.push_back(nullptr);
      } else if (const auto* s = std::get_if<std::string>(&v)) {
        values_.push_back(s->c_str());
      } else {
        values_.push_back(arena_.data() + offsets_[i]);  // the arena no longer moves
      }
    }
    Params out;
    out.count = static_cast<int>(values_.size());
    out.values = values_.data();
    return out;  // lengths and formats may stay null for text parameters
  }

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
  // Reused by run_queue().
  std::vector<Command> commands_;
  std::vector<const char*> values_;
};

class PostgresStore final : public Store {
 public:
  PostgresStore(std::string_view conninfo, const StoreOptions& options) : conn_(conninfo, options) {
    mark_one_.name = "idem_mark";
    mark_one_.sql = kMarkOneSql;
    // event_id binary (16 bytes, no parsing on the server), consumer_group text.
    mark_one_.types = {kUuidOid, kTextOid};
    mark_batch_.name = "idem_mark_batch";
    mark_batch_.sql = kMarkBatchSql;
    mark_batch_.types = {kUuidArrayOid, kTextOid};
  }
  ~PostgresStore() override = default;

  std::unique_ptr<Transaction> begin() override {
    if (active_ != nullptr) {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Postgres,
                  "postgres: a transaction is already open on this store (a Store is one "
                  "connection; open one Store per concurrent transaction)");
    }
    conn_.ensure_ready();  // reconnects once if the connection broke
    auto tx = std::make_unique<PostgresTransaction>(*this);
    active_ = tx.get();
    return tx;
  }

  MigrationReport migrate(const MigrateOptions& options) override;
  MigrationReport migrate_set(const MigrationSet& set) override;
  int schema_version(std::string_view set) override;
  MigrationReport apply_migrations(std::string_view set,
                                   std::span<const SchemaMigration> migrations,
                                   const MigrateOptions* options);
  [[nodiscard]] Backend backend() const noexcept override { return Backend::Postgres; }

  PGconn* native() {
    if (active_ != nullptr) active_->start_now();
    return conn_.native();
  }

  Connection& connection() noexcept { return conn_; }
  Statement& mark_one() noexcept { return mark_one_; }
  Statement& mark_batch() noexcept { return mark_batch_; }
  TextParams& text_params() noexcept { return text_params_; }
  std::string& scratch() noexcept { return scratch_; }
  void transaction_finished() noexcept { active_ = nullptr; }

 private:
  Result query(const char* sql, std::span<const char* const> params, const char* what);
  void check_processed_event(const MigrateOptions& options, bool recorded);

  Connection conn_;
  PostgresTransaction* active_ = nullptr;
  Statement mark_one_;
  Statement mark_batch_;
  TextParams text_params_;
  std::string scratch_;  // reused buffer for the batch array
};

// ---------------------------------------------------------------------------
// PostgresTransaction

PostgresTransaction::PostgresTransaction(PostgresStore& store)
    : store_(store), conn_(store.connection()) {}

void PostgresTransaction::check_usable() {
  if (state_ == State::Finished) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Postgres,
                "postgres: the transaction is finished (committed or rolled back)");
  }
  // An open transaction block on a connection that broke, or whose protocol state
  // is unknown, cannot go on: the server has rolled it back or will.
  if (state_ == State::Open && conn_.needs_reset()) connection_lost_ = true;
  if (connection_lost_) {
    throw Error(ErrorCode::Connection, ErrorSource::Postgres,
                "postgres: the connection was lost earlier in this transaction; it cannot "
                "continue (the server rolled it back)");
  }
}

// Lazy savepoints (measured with bench/bench_consumer.cpp: SAVEPOINT and RELEASE were
// one round trip each per event, i.e. two of the three round trips per event of the
// count handler and all of the per-event cost of a handler without SQL).
// savepoint() only records the savepoint. When the next statement is issued, BEGIN (if
// not run yet) and the SAVEPOINTs of the recorded savepoints are queued ahead of it;
// release() queues a RELEASE if the SAVEPOINT was queued or sent. The queue, in issue
// order, travels in one pipeline ahead of the next synchronous statement, and
// execute_deferred() statements join the same queue. A savepoint that no statement
// followed was never queued, so releasing it or rolling back to it needs nothing on the
// server (nothing ran after it); COMMIT and ROLLBACK release every savepoint, so
// RELEASEs still queued then are dropped.
// Errors keep their place: every queued command runs, in order, before the statement
// it precedes, and a failing one fails that statement (the commands after it in the
// pipeline do not run). A deferred statement's failure therefore surfaces at the next
// synchronous call, inside whatever savepoint was open when it was issued (rolling that
// savepoint back discards it). Only a SAVEPOINT's own failure moves: from Savepoint's
// constructor to the first statement inside it.
void PostgresTransaction::queue_control() {
  if (state_ == State::Pending && !begin_queued_) {
    queue_.push_back({Queued::Kind::Begin, "BEGIN"});
    begin_queued_ = true;
  }
  for (SavepointMark& sp : savepoints_) {
    if (sp.state != SavepointState::Recorded) continue;
    sp.state = SavepointState::Queued;
    sp.queue_pos = queue_.size();
    queue_.push_back({Queued::Kind::Savepoint, fmt::format("SAVEPOINT {}", sp.name)});
  }
}

void PostgresTransaction::drop_queue() noexcept {
  queue_.clear();
  queued_statements_ = 0;
  param_arena_.clear();
  param_offsets_.clear();
  begin_queued_ = false;
  for (SavepointMark& sp : savepoints_) {
    if (sp.state == SavepointState::Queued) sp.state = SavepointState::Recorded;
  }
}

Reply PostgresTransaction::run_queue(const Command* main) {
  failed_deferred_.clear();
  const bool begin = state_ == State::Pending && begin_queued_;
  // The deferred parameters' pointers, once the arena no longer grows.
  values_.clear();
  for (const std::ptrdiff_t off : param_offsets_) {
    values_.push_back(off < 0 ? nullptr : param_arena_.data() + off);
  }
  commands_.clear();
  for (const Queued& q : queue_) {
    Command c;
    if (q.kind == Queued::Kind::Statement) {
      c.stmt = q.stmt;
      c.params.count = static_cast<int>(q.param_count);
      c.params.values = values_.data() + q.first_param;
    }
    c.sql = q.text;
    commands_.push_back(c);
  }
  if (main != nullptr) commands_.push_back(*main);

  Reply reply;
  if (!begin) {
    reply = conn_.exec(commands_);
  } else {
    // Lazy BEGIN: it travels in one pipeline with the transaction's first statement.
    // Nothing has been sent in this transaction yet, so a broken connection can
    // still be replaced.
    if (conn_.needs_reset()) conn_.reset();
    reply = conn_.exec(commands_);
    if (reply.done == 0 &&
        (conn_.needs_reset() || conn_.classify(reply.result.get()).code == ErrorCode::Connection)) {
      // BEGIN did not run because the connection is broken (typically a session the
      // server ended while we were idle, whose FATAL had not arrived when begin()
      // looked). Nothing of this transaction can have committed, so reconnecting and
      // sending the same pipeline again is safe: it is what begin() does when it
      // notices the break itself.
      conn_.reset();
      reply = conn_.exec(commands_);
    }
  }

  // Apply what ran; what did not run never will (the transaction is aborted then, and
  // the error is the caller's). Savepoints whose SAVEPOINT did not run are recorded
  // again, with the failure that stopped them as the failure before them.
  const bool failed = reply.done < commands_.size();
  std::optional<Earlier> stopped_by;
  if (failed && reply.result != nullptr) {
    const Failure f = conn_.classify(reply.result.get());
    stopped_by = Earlier{f.code, f.message, f.sqlstate};
  }
  for (std::size_t i = 0; i < queue_.size(); ++i) {
    const Queued& q = queue_[i];
    const bool ran = i < reply.done;
    if (q.kind == Queued::Kind::Begin && ran) state_ = State::Open;
    if (q.kind == Queued::Kind::Savepoint) {
      for (SavepointMark& sp : savepoints_) {
        if (sp.state != SavepointState::Queued || sp.queue_pos != i) continue;
        sp.state = ran ? SavepointState::Sent : SavepointState::Recorded;
        if (!ran && state_ == State::Open && stopped_by) sp.failure_before = stopped_by;
      }
    }
    if (failed && i == reply.done && q.kind == Queued::Kind::Statement) {
      failed_deferred_ = fmt::format("deferred statement {}",
                                     sql_excerpt(q.stmt != nullptr ? q.stmt->sql : q.text));
    }
  }
  queue_.clear();
  queued_statements_ = 0;
  param_arena_.clear();
  param_offsets_.clear();
  begin_queued_ = false;
  return reply;
}

Reply PostgresTransaction::run(Statement* stmt, std::string_view sql, const Params& params,
                               int result_format) {
  check_usable();
  queue_control();
  Command main;
  main.stmt = stmt;
  main.sql = sql;
  main.params = params;
  main.result_format = result_format;
  return run_queue(&main);
}

void PostgresTransaction::send_queue() {
  check_usable();
  if (queue_.empty()) return;
  const Reply reply = run_queue(nullptr);
  if (reply.done < commands_.size()) {
    fail(reply.result.get(), failed_deferred_.empty() ? "deferred commands" : failed_deferred_);
  }
}

// Deferred statements are bounded so a caller that defers without ever syncing cannot
// grow the queue without limit: past these, execute_deferred() sends the queue itself.
constexpr std::size_t kMaxQueuedStatements = 10'000;
constexpr std::size_t kMaxQueuedParamBytes = 16u << 20;

void PostgresTransaction::execute_deferred_params(std::string_view sql,
                                                  std::span<const Param> params) {
  check_usable();
  Statement* stmt = conn_.statement(sql);
  // Known statement: a wrong parameter count fails here, before anything is queued.
  check_param_count(stmt, sql, params.size());
  queue_control();
  Queued q{Queued::Kind::Statement, stmt == nullptr ? std::string(sql) : std::string()};
  q.stmt = stmt;
  q.first_param = param_offsets_.size();
  q.param_count = params.size();
  for (const Param& p : params) {
    if (p.is_null()) {
      param_offsets_.push_back(-1);
      continue;
    }
    param_offsets_.push_back(static_cast<std::ptrdiff_t>(param_arena_.size()));
    append_text(param_arena_, p.value());
    param_arena_.push_back('\0');
  }
  queue_.push_back(std::move(q));
  ++queued_statements_;
  if (queued_statements_ >= kMaxQueuedStatements || param_arena_.size() >= kMaxQueuedParamBytes) {
    send_queue();
  }
}

void PostgresTransaction::sync() {
  check_usable();
  if (queued_statements_ > 0) send_queue();
  if (failure_ && state_ == State::Open) {
    throw Error(failure_->code, ErrorSource::Postgres,
                fmt::format("postgres: the transaction cannot commit: a statement in it failed "
                            "earlier: {}",
                            failure_->message),
                failure_->sqlstate);
  }
}

void PostgresTransaction::fail(const PGresult* result, std::string_view what_arg) {
  const std::string_view what = failed_deferred_.empty() ? what_arg : failed_deferred_;
  Failure f = conn_.classify(result);
  if (f.code == ErrorCode::Connection) {
    connection_lost_ = true;
    conn_.poison();
  } else if (f.sqlstate == "25P02" && failure_) {
    // "current transaction is aborted": report the failure that aborted it, which
    // the caller swallowed; its code says whether redoing the work can help.
    f.code = failure_->code;
    f.message =
        fmt::format("{} (the transaction failed earlier: {})", f.message, failure_->message);
  } else if (!failure_ && state_ == State::Open) {
    failure_ = Earlier{f.code, f.message, f.sqlstate};
  }
  throw Error(f.code, ErrorSource::Postgres,
              fmt::format("postgres: {}: {}", sql_excerpt(what), f.message), std::move(f.sqlstate));
}

void PostgresTransaction::check_param_count(const Statement* stmt, std::string_view sql,
                                            std::size_t bound) {
  if (stmt == nullptr || stmt->param_count < 0) return;
  const auto expected = static_cast<std::size_t>(stmt->param_count);
  if (bound == expected) return;
  std::string what;
  if (bound < expected) {
    what = fmt::format("the statement uses ${} but {} parameter{} bound", expected, bound,
                       bound == 1 ? " was" : "s were");
  } else if (expected == 0) {
    what = fmt::format("{} parameters were bound but the statement has no placeholders", bound);
  } else {
    what = fmt::format("{} parameters were bound but the statement uses only $1..${}", bound,
                       expected);
  }
  throw Error(ErrorCode::InvalidArgument, ErrorSource::Postgres,
              fmt::format("postgres: {}: {}", sql_excerpt(sql), what));
}

Rows PostgresTransaction::execute_params(std::string_view sql, std::span<const Param> params) {
  check_usable();
  Statement* stmt = conn_.statement(sql);
  // Known statement: a wrong parameter count fails here, before anything is sent.
  check_param_count(stmt, sql, params.size());
  const Params encoded = store_.text_params().encode(params);
  const Reply reply = run(stmt, sql, encoded, 0);
  if (!ok_status(reply.result.get())) {
    if (!failed_deferred_.empty()) fail(reply.result.get(), sql);
    // First use: the DESCRIBE pipelined with the PREPARE told us the count, and the
    // server refused the Bind. Report it the same way (the transaction is aborted).
    try {
      check_param_count(stmt, sql, params.size());
    } catch (const Error& e) {
      if (!failure_ && state_ == State::Open) failure_ = Earlier{e.code(), e.what(), "08P01"};
      throw;
    }
    fail(reply.result.get(), sql);
  }
  return to_rows(reply.result.get());
}

void PostgresTransaction::check_consumer_group(std::string_view consumer_group) {
  if (consumer_group.empty()) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Postgres,
                "postgres: the consumer group must not be empty");
  }
}

void PostgresTransaction::fail_mark(const PGresult* r, std::string_view what) {
  const char* state = r != nullptr ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  // (A deferred statement's missing table is its own problem, not processed_event's.)
  if (state != nullptr && std::strcmp(state, "42P01") == 0 && failed_deferred_.empty()) {
    failure_ = failure_.value_or(Earlier{ErrorCode::Schema, "processed_event is missing", state});
    throw Error(ErrorCode::Schema, ErrorSource::Postgres,
                "postgres: table processed_event does not exist; run migrate() first", state);
  }
  fail(r, what);
}

bool PostgresTransaction::mark_processed(const Uuid& event_id, std::string_view consumer_group) {
  check_usable();
  check_consumer_group(consumer_group);
  // Both parameters in binary format: 16 raw bytes for the uuid, and text's binary
  // form is its bytes, which needs no terminating NUL (so no copy of the group).
  const char* values[2] = {reinterpret_cast<const char*>(event_id.bytes().data()),
                           consumer_group.data()};
  const int lengths[2] = {16, static_cast<int>(consumer_group.size())};
  const int formats[2] = {1, 1};
  const Params params{2, values, lengths, formats};
  const Reply reply = run(&store_.mark_one(), {}, params, 0);
  const PGresult* r = reply.result.get();
  if (!ok_status(r)) fail_mark(r, "mark_processed");
  // "INSERT 0 1": this call inserted the row, so this is the first delivery.
  // "INSERT 0 0": the key was already there (or is being inserted by a
  // transaction that then committed): a duplicate.
  const char* n = PQcmdTuples(const_cast<PGresult*>(r));
  return n[0] == '1' && n[1] == '\0';
}

// The batch is sent as one uuid[] in binary format (16 bytes per id instead of 37
// characters for the server to parse) and the inserted ids come back in binary (16
// raw bytes each, no parsing). Measured with raw libpq, medians of interleaved runs
// of BEGIN; INSERT ... SELECT unnest($1) ... RETURNING; COMMIT with new ids:
//   batch of    10: text  204-236 us, binary 127-153 us
//   batch of   100: text  669-891 us, binary 569-623 us
//   batch of  1000: text 4.7-4.9 ms,  binary 4.0-4.1 ms
//   batch of 10000: text 64 ms,       binary 44 ms
// so only binary is kept. On the same connection, idem's whole begin/mark/commit runs
// at 99-127% of the speed of the raw libpq loop issuing BEGIN; this statement; COMMIT
// (the lazy BEGIN saves a round trip; the client-side sort and dedupe cost little).
std::vector<bool> PostgresTransaction::mark_processed_batch(std::span<const Uuid> event_ids,
                                                            std::string_view consumer_group) {
  check_usable();
  check_consumer_group(consumer_group);
  std::vector<bool> out(event_ids.size(), false);
  if (event_ids.empty()) return out;
  if (event_ids.size() > 10'000'000) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Postgres,
                "postgres: mark_processed_batch takes at most 10,000,000 ids per call");
  }

  // Dedupe client-side, first occurrence wins: a stable sort keeps equal ids in
  // position order, so the first of each run is the earliest position. Sending the
  // ids sorted also makes concurrent batches take their key locks in the same
  // order, so two consumers marking overlapping batches cannot deadlock.
  std::vector<std::uint32_t> order(event_ids.size());
  std::iota(order.begin(), order.end(), 0U);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return event_ids[a] < event_ids[b]; });
  std::vector<std::uint32_t> first_pos;  // for each unique id (sorted), its first position
  first_pos.reserve(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || event_ids[order[i]] != event_ids[order[i - 1]]) first_pos.push_back(order[i]);
  }

  // Binary array (array_recv): ndim, has-nulls flag, element type, then per
  // dimension its length and lower bound, then each element as length + bytes.
  std::string& buf = store_.scratch();
  buf.clear();
  buf.reserve(20 + first_pos.size() * 20);
  put_be32(buf, 1);
  put_be32(buf, 0);
  put_be32(buf, kUuidOid);
  put_be32(buf, static_cast<std::uint32_t>(first_pos.size()));
  put_be32(buf, 1);
  for (const std::uint32_t pos : first_pos) {
    put_be32(buf, 16);
    buf.append(reinterpret_cast<const char*>(event_ids[pos].bytes().data()), 16);
  }
  const char* values[2] = {buf.data(), consumer_group.data()};
  const int lengths[2] = {static_cast<int>(buf.size()), static_cast<int>(consumer_group.size())};
  const int formats[2] = {1, 1};
  const Params params{2, values, lengths, formats};
  const Reply reply = run(&store_.mark_batch(), {}, params, 1);
  const PGresult* r = reply.result.get();
  if (!ok_status(r)) fail_mark(r, "mark_processed_batch");

  const int rows = PQntuples(r);
  for (int i = 0; i < rows; ++i) {
    if (PQgetlength(r, i, 0) != 16) {
      throw Error(ErrorCode::Internal, ErrorSource::Postgres,
                  "postgres: mark_processed_batch: RETURNING event_id did not return 16 bytes");
    }
    Uuid::Bytes bytes{};
    std::memcpy(bytes.data(), PQgetvalue(r, i, 0), 16);
    const Uuid id(bytes);
    // first_pos is in id order, so the inserted id is found by binary search.
    const auto it =
        std::lower_bound(first_pos.begin(), first_pos.end(), id,
                         [&](std::uint32_t pos, const Uuid& v) { return event_ids[pos] < v; });
    if (it == first_pos.end() || event_ids[*it] != id) {
      throw Error(ErrorCode::Internal, ErrorSource::Postgres,
                  "postgres: mark_processed_batch: the server returned an id that was not sent");
    }
    out[*it] = true;
  }
  return out;
}

// One round trip for the whole span: the ids travel as one uuid[] literal and the
// marked ones come back (the primary key's index answers each).
std::vector<bool> PostgresTransaction::processed_among(std::span<const Uuid> event_ids,
                                                       std::string_view consumer_group) {
  check_consumer_group(consumer_group);
  std::vector<bool> out(event_ids.size(), false);
  if (event_ids.empty()) return out;
  std::string array = "{";
  array.reserve(2 + event_ids.size() * 37);
  for (std::size_t i = 0; i < event_ids.size(); ++i) {
    if (i != 0) array += ',';
    array += event_ids[i].to_string();
  }
  array += '}';
  const std::array<Param, 2> params{Param(array), Param(consumer_group)};
  const Rows rows = execute_params(
      "SELECT event_id FROM processed_event WHERE event_id = ANY($1::uuid[]) AND consumer_group = "
      "$2",
      params);
  std::vector<Uuid> found;
  found.reserve(rows.size());
  for (const RowView row : rows) found.push_back(row.uuid(0));
  std::sort(found.begin(), found.end());
  for (std::size_t i = 0; i < event_ids.size(); ++i) {
    out[i] = std::binary_search(found.begin(), found.end(), event_ids[i]);
  }
  return out;
}

void PostgresTransaction::command(const std::string& sql) {
  const Reply reply = run(nullptr, sql, Params{}, 0);
  if (!ok_status(reply.result.get())) fail(reply.result.get(), sql);
}

void PostgresTransaction::savepoint(std::string_view name) {
  validate_savepoint_name(name);
  check_usable();
  // Deferred: queued when the next statement is issued (see run()).
  savepoints_.push_back(SavepointMark{std::string(name), failure_});
}

std::size_t PostgresTransaction::find_savepoint(std::string_view name) const {
  for (std::size_t i = savepoints_.size(); i-- > 0;) {
    if (savepoints_[i].name == name) return i;
  }
  throw Error(ErrorCode::InvalidArgument, ErrorSource::Postgres,
              fmt::format("postgres: no such savepoint: {}", name));
}

void PostgresTransaction::release_savepoint(std::string_view name) {
  validate_savepoint_name(name);
  check_usable();
  const std::size_t i = find_savepoint(name);
  // RELEASE also releases every savepoint made after this one. One never queued needs
  // no RELEASE (nothing ran inside it); otherwise the RELEASE is queued (see run()).
  if (savepoints_[i].state != SavepointState::Recorded) {
    queue_.push_back({Queued::Kind::Release, fmt::format("RELEASE SAVEPOINT {}", name)});
  }
  savepoints_.resize(i);
}

void PostgresTransaction::rollback_to_savepoint(std::string_view name) {
  validate_savepoint_name(name);
  check_usable();
  const std::size_t i = find_savepoint(name);
  // The savepoint stays; later ones are gone.
  savepoints_.resize(i + 1);
  SavepointMark& sp = savepoints_[i];
  switch (sp.state) {
    case SavepointState::Recorded: break;  // nothing was issued after it
    case SavepointState::Queued: {
      // Its SAVEPOINT and everything issued after it never left the client: forget them
      // (deferred statements included, errors and all).
      queue_.resize(sp.queue_pos);
      sp.state = SavepointState::Recorded;
      queued_statements_ =
          static_cast<std::size_t>(std::count_if(queue_.begin(), queue_.end(), [](const Queued& q) {
            return q.kind == Queued::Kind::Statement;
          }));
      break;
    }
    case SavepointState::Sent:
      // Everything still queued was issued after its SAVEPOINT ran (every round trip
      // sends the whole queue), so the rollback undoes it anyway: drop it unsent. Then
      // synchronous: the work since the savepoint must be gone before anything else runs.
      queue_.clear();
      queued_statements_ = 0;
      param_arena_.clear();
      param_offsets_.clear();
      command(fmt::format("ROLLBACK TO SAVEPOINT {}", name));
      break;
  }
  // Failures since the savepoint are undone.
  failure_ = sp.failure_before;
}

void PostgresTransaction::start_now() {
  if (state_ == State::Finished) return;
  queue_control();
  send_queue();
}

void PostgresTransaction::finish() noexcept {
  if (state_ == State::Finished) return;
  state_ = State::Finished;
  savepoints_.clear();
  drop_queue();
  store_.transaction_finished();
}

void PostgresTransaction::commit() {
  if (state_ == State::Finished) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Postgres,
                "postgres: commit() on a finished transaction");
  }
  if (queued_statements_ > 0) {
    // Deferred statements run first; if one fails, nothing commits (certain, not in
    // doubt: the server answered), and the transaction is finished like any failed commit.
    try {
      send_queue();
    } catch (...) {
      rollback();
      throw;
    }
  }
  if (state_ == State::Pending) {  // nothing was sent, so there is nothing to commit
    finish();
    return;
  }
  if (connection_lost_ || !conn_.poll_alive()) {
    // The session ended before COMMIT was sent (we read its FATAL or EOF), so the
    // server rolled the transaction back: certain, not in doubt.
    finish();
    conn_.poison();
    throw Error(ErrorCode::Connection, ErrorSource::Postgres,
                fmt::format("postgres: the connection was lost before COMMIT ({}); the "
                            "transaction did not commit",
                            conn_.describe()));
  }
  const Result r(PQexec(conn_.native(), "COMMIT"));
  finish();
  if (r != nullptr && PQresultStatus(r.get()) == PGRES_COMMAND_OK) {
    if (PQstatus(conn_.native()) != CONNECTION_OK) conn_.poison();
    // The server answered: "COMMIT" means committed, whatever happens to the
    // connection afterwards.
    if (std::strcmp(PQcmdStatus(const_cast<PGresult*>(r.get())), "ROLLBACK") != 0) return;
    // COMMIT of a transaction block that an earlier error aborted: the server
    // answers "ROLLBACK". Nothing committed. The code of that earlier error tells
    // the caller whether redoing helps; if it was not seen through this handle
    // (native handle), TransactionAborted: a redo will surface the real error.
    const ErrorCode code = failure_ ? failure_->code : ErrorCode::TransactionAborted;
    throw Error(code, ErrorSource::Postgres,
                fmt::format("postgres: COMMIT rolled the transaction back because a statement "
                            "in it failed{}",
                            failure_ ? ": " + failure_->message : std::string()),
                failure_ ? failure_->sqlstate : std::string());
  }
  const char* state = r != nullptr ? PQresultErrorField(r.get(), PG_DIAG_SQLSTATE) : nullptr;
  const char* severity =
      r != nullptr ? PQresultErrorField(r.get(), PG_DIAG_SEVERITY_NONLOCALIZED) : nullptr;
  const std::string sqlstate = state != nullptr ? state : "";
  const bool session_ended = r == nullptr || PQstatus(conn_.native()) != CONNECTION_OK ||
                             sqlstate.empty() || is_connection_sqlstate(sqlstate) ||
                             (severity != nullptr && (std::strcmp(severity, "FATAL") == 0 ||
                                                      std::strcmp(severity, "PANIC") == 0));
  if (session_ended) {
    // COMMIT was sent and the session ended without a verdict: the server may have
    // committed before the connection broke, or not. Never guess (libpqxx's
    // in_doubt_error): redelivery plus the dedup mark decide.
    conn_.poison();
    const Failure f = conn_.classify(r.get());
    throw Error(ErrorCode::InDoubt, ErrorSource::Postgres,
                fmt::format("postgres: the connection broke during COMMIT; whether the "
                            "transaction committed is unknown: {}",
                            f.message),
                sqlstate);
  }
  // An ERROR (the session lives on): the server refused the COMMIT itself, e.g. a
  // deferred constraint or a serialization failure at commit. Certainly rolled back.
  const Failure f = conn_.classify(r.get());
  throw Error(f.code, ErrorSource::Postgres, fmt::format("postgres: COMMIT: {}", f.message),
              f.sqlstate);
}

void PostgresTransaction::rollback() noexcept {
  if (state_ == State::Finished) return;
  if (state_ == State::Open) {
    PGconn* c = conn_.native();
    if (connection_lost_ || PQstatus(c) != CONNECTION_OK ||
        PQpipelineStatus(c) != PQ_PIPELINE_OFF) {
      // The server rolls back a transaction whose session ends; the next begin()
      // starts on a fresh session.
      conn_.poison();
    } else {
      const Result r(PQexec(c, "ROLLBACK"));
      if (!ok_status(r.get())) conn_.poison();
    }
  }
  finish();
}

// ---------------------------------------------------------------------------
// PostgresStore: migrations

Result PostgresStore::query(const char* sql, std::span<const char* const> params,
                            const char* what) {
  Result r(PQexecParams(conn_.native(), sql, static_cast<int>(params.size()), nullptr,
                        params.data(), nullptr, nullptr, 0));
  if (!ok_status(r.get())) conn_.fail(r.get(), what);
  return r;
}

// Checks processed_event against what migration 1 would create. Runs under the
// migration lock, inside the migration transaction.
void PostgresStore::check_processed_event(const MigrateOptions& options, bool recorded) {
  const Result r = query(
      "SELECT c.relkind::text, CASE WHEN c.relkind = 'p' THEN pg_get_partkeydef(c.oid) END "
      "FROM pg_class c WHERE c.oid = to_regclass('processed_event')",
      {}, "inspect processed_event");
  if (PQntuples(r.get()) == 0) {
    if (recorded) {
      throw Error(ErrorCode::Schema, ErrorSource::Postgres,
                  "postgres: idem_schema_migrations records migration 1 but table "
                  "processed_event is missing (dropped by hand?)");
    }
    return;  // migration 1 creates it
  }
  const std::string relkind = PQgetvalue(r.get(), 0, 0);
  const std::string partkey = PQgetisnull(r.get(), 0, 1) ? "" : PQgetvalue(r.get(), 0, 1);
  if (relkind == "p" && partkey != "RANGE (event_id)") {
    // The design documents' DDL partitions by processed_at, which forces
    // processed_at into the primary key: a redelivery at a later time inserts a
    // second row and the effect runs twice. Refuse to run on such a table.
    throw Error(ErrorCode::Schema, ErrorSource::Postgres,
                fmt::format("postgres: processed_event is partitioned by {}; idem needs RANGE "
                            "(event_id) so that the primary key stays (event_id, "
                            "consumer_group) (SPEC IDEM-2 TTL)",
                            partkey));
  }
  if (options.partitioned && relkind != "p") {
    throw Error(ErrorCode::Schema, ErrorSource::Postgres,
                "postgres: migrate(partitioned=true), but processed_event already exists as a "
                "plain table; a table cannot be partitioned in place. Migrate with "
                "partitioned=false, or move the rows into a new partitioned table by hand");
  }
  if (!recorded) {
    throw Error(ErrorCode::Schema, ErrorSource::Postgres,
                "postgres: table processed_event exists but idem_schema_migrations does not "
                "record migration 1; it was not created by idem. Drop or rename it, or record "
                "version 1 if it matches sql/postgres/0001_processed_event.sql");
  }
}

MigrationReport PostgresStore::migrate(const MigrateOptions& options) {
  return apply_migrations(kIdemMigrations, postgres_sql::migrations(), &options);
}

MigrationReport PostgresStore::migrate_set(const MigrationSet& set) {
  check_migration_set_name(set.name, "postgres");
  return apply_migrations(set.name, set.postgres, nullptr);
}

// `options` is set for idem's own migrations only: migration 1 (processed_event) is
// checked against what is there and may be created partitioned.
MigrationReport PostgresStore::apply_migrations(std::string_view set,
                                                std::span<const SchemaMigration> migrations,
                                                const MigrateOptions* options) {
  if (active_ != nullptr) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Postgres,
                "postgres: migrate() while a transaction is open on this store");
  }
  const Clock& clock =
      options != nullptr && options->clock != nullptr ? *options->clock : SystemClock::instance();
  if (options != nullptr && options->partitioned) {
    // Validate before touching the database.
    (void)plan_partitions(*options, clock.now());
  }
  const std::string set_name(set);
  conn_.ensure_ready();

  // Each step is its own transaction holding the migration lock, so concurrent
  // migrators (several consumers starting at once) run one after the other and
  // the later ones find the work done.
  class Tx {
   public:
    explicit Tx(PostgresStore& s) : s_(s) {
      s_.query("BEGIN", {}, "migrate: BEGIN");
      open_ = true;
      const std::string key = std::to_string(kMigrationLockKey);
      const char* params[1] = {key.c_str()};
      s_.query("SELECT pg_advisory_xact_lock($1::bigint)", params,
               "migrate: take the migration lock");
    }
    Tx(const Tx&) = delete;
    Tx& operator=(const Tx&) = delete;
    ~Tx() {
      if (open_) {
        const Result r(PQexec(s_.conn_.native(), "ROLLBACK"));
        if (!ok_status(r.get())) s_.conn_.poison();
      }
    }
    void commit() {
      open_ = false;
      s_.query("COMMIT", {}, "migrate: COMMIT");
    }

   private:
    PostgresStore& s_;
    bool open_ = false;
  };

  MigrationReport report;
  {
    Tx tx(*this);
    query(
        "CREATE TABLE IF NOT EXISTS idem_schema_migrations ("
        "migration_set text NOT NULL, "
        "version int NOT NULL, "
        "name text NOT NULL, "
        "applied_at timestamptz NOT NULL DEFAULT now(), "
        "PRIMARY KEY (migration_set, version))",
        {}, "migrate: create idem_schema_migrations");
    const char* set_param[1] = {set_name.c_str()};
    const Result r = query(
        "SELECT coalesce(max(version), 0) FROM idem_schema_migrations WHERE migration_set = $1",
        set_param, "migrate: read the schema version");
    report.from_version = std::atoi(PQgetvalue(r.get(), 0, 0));
    tx.commit();
  }

  for (const SchemaMigration& m : migrations) {
    Tx tx(*this);
    const std::string version = std::to_string(m.version);
    const char* params[2] = {set_name.c_str(), version.c_str()};
    const Result applied = query(
        "SELECT name FROM idem_schema_migrations WHERE migration_set = $1 AND version = $2::int",
        params, "migrate: read the applied migrations");
    const bool recorded = PQntuples(applied.get()) > 0;
    const bool processed_event_migration = options != nullptr && m.version == 1;
    if (processed_event_migration) check_processed_event(*options, recorded);
    if (recorded) {
      tx.commit();
      continue;
    }
    std::string name(m.name);
    std::string ddl;
    if (processed_event_migration && options->partitioned) {
      ddl = partitioned_processed_event_ddl(*options, clock.now());
      name = kPartitionedMigrationName;
    } else {
      ddl = std::string(m.sql);
    }
    // Simple-query protocol: a migration file holds several statements; they run
    // inside this transaction, so a failing one leaves nothing behind.
    const Result r = conn_.exec_simple(ddl.c_str());
    if (!ok_status(r.get())) conn_.fail(r.get(), fmt::format("migration {} of '{}'", name, set));
    const char* record[3] = {set_name.c_str(), version.c_str(), name.c_str()};
    query(
        "INSERT INTO idem_schema_migrations (migration_set, version, name) "
        "VALUES ($1, $2::int, $3)",
        record, "migrate: record the migration");
    tx.commit();
    report.applied.push_back(name);
  }

  report.to_version = schema_version(set);
  return report;
}

int PostgresStore::schema_version(std::string_view set) {
  if (active_ == nullptr) conn_.ensure_ready();
  const Result exists =
      query("SELECT to_regclass('idem_schema_migrations') IS NOT NULL", {}, "schema_version");
  if (std::strcmp(PQgetvalue(exists.get(), 0, 0), "t") != 0) return 0;
  const std::string set_name(set);
  const char* params[1] = {set_name.c_str()};
  const Result r =
      query("SELECT coalesce(max(version), 0) FROM idem_schema_migrations WHERE migration_set = $1",
            params, "schema_version");
  return std::atoi(PQgetvalue(r.get(), 0, 0));
}

}  // namespace
}  // namespace detail::pg

std::unique_ptr<Store> make_postgres_store(std::string_view conninfo, const StoreOptions& options) {
  return std::make_unique<detail::pg::PostgresStore>(conninfo, options);
}

pg_conn* postgres_native_handle(Store& store) {
  auto* pg = dynamic_cast<detail::pg::PostgresStore*>(&store);
  if (pg == nullptr) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Postgres,
                fmt::format("postgres_native_handle: the store is a {} store, not PostgreSQL",
                            to_string(store.backend())));
  }
  return pg->native();
}

}  // namespace idem
