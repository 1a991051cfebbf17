// The PostgreSQL dedup store (libpq).
//
// Transactions run at READ COMMITTED, PostgreSQL's default, on purpose: the dedup
// mark is INSERT ... ON CONFLICT DO NOTHING, and at READ COMMITTED a concurrent
// insert of the same key makes the second inserter wait for the first and then
// either conflict (first committed: "not new") or insert (first rolled back: "new").
// That is exactly the race-safe check IDEM-2 asks for, without the serialization
// failures REPEATABLE READ / SERIALIZABLE would add for the same race. Business
// SQL that needs stronger isolation can SET TRANSACTION as its first statement.
//
// This file: the transaction. Statements, lazy savepoints and deferred statements travel
// in libpq pipelines; BEGIN goes with the first statement. The dedup marks are in
// pg_marks.cpp.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "stores/postgres/pg_store.hpp"

namespace idem::detail::pg {

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
  build_commands();
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
  if (failed && reply.done < commands_.size()) {
    // A merged INSERT the server would not even prepare (a type it resolves differently
    // across rows, say) is never merged again; this transaction's failure stands, and
    // the consumer's isolated pass redoes the batch one statement at a time.
    const Statement* stmt = commands_[reply.done].stmt;
    InsertMerger::Entry* e = store_.merger().owner_of(stmt);
    if (e != nullptr && stmt->prepared_generation != conn_.generation() && stopped_by &&
        stopped_by->code != ErrorCode::Connection) {
      e->disabled = true;
    }
  }
  for (std::size_t i = 0; i < queue_.size(); ++i) {
    const Queued& q = queue_[i];
    const bool ran = command_of_[i] < reply.done;
    if (q.kind == Queued::Kind::Begin && ran) state_ = State::Open;
    if (q.kind == Queued::Kind::Savepoint) {
      for (SavepointMark& sp : savepoints_) {
        if (sp.state != SavepointState::Queued || sp.queue_pos != i) continue;
        sp.state = ran ? SavepointState::Sent : SavepointState::Recorded;
        if (!ran && state_ == State::Open && stopped_by) sp.failure_before = stopped_by;
      }
    }
    if (failed && command_of_[i] == reply.done && failed_deferred_.empty() &&
        q.kind == Queued::Kind::Statement) {
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

// Merging: an optimistic pass of the consumer queues one INSERT per event, and
// each was its own Bind/Execute on the server. A run of consecutive deferred statements
// with one mergeable text (pg_insert_merge.hpp) and the right parameter count goes as
// multi-row INSERTs instead. Only consecutive ones: moving a statement past another could
// break a foreign key or a trigger's view of the table; and a SAVEPOINT or RELEASE ends a
// run, so an error still belongs to the savepoint the statement was issued in (the
// isolated pass syncs each event's statements inside its own savepoint). A merged
// statement fails as a whole, which is what the single rows did too: the first failure
// aborts the transaction and the statements after it never run.
void PostgresTransaction::build_commands() {
  // The deferred parameters' pointers, in queue order (a run's rows are then adjacent),
  // once the arena no longer grows.
  values_.clear();
  std::vector<std::size_t>& first_value = value_of_;
  first_value.assign(queue_.size(), 0);
  command_of_.assign(queue_.size(), 0);
  for (std::size_t i = 0; i < queue_.size(); ++i) {
    const Queued& q = queue_[i];
    first_value[i] = values_.size();
    if (q.kind != Queued::Kind::Statement) continue;
    for (std::size_t k = 0; k < q.param_count; ++k) {
      const std::ptrdiff_t off = param_offsets_[q.first_param + k];
      values_.push_back(off < 0 ? nullptr : param_arena_.data() + off);
    }
  }
  commands_.clear();
  std::size_t i = 0;
  while (i < queue_.size()) {
    const Queued& q = queue_[i];
    const std::size_t first = first_value[i];
    Command c;
    c.sql = q.text;
    std::size_t run = 1;
    InsertMerger::Entry* merge = nullptr;
    if (q.kind == Queued::Kind::Statement && q.stmt != nullptr) {
      merge = store_.merger().entry(*q.stmt);
      if (merge != nullptr && q.param_count != merge->shape->params) merge = nullptr;
      while (merge != nullptr && i + run < queue_.size() &&
             queue_[i + run].kind == Queued::Kind::Statement && queue_[i + run].stmt == q.stmt &&
             queue_[i + run].param_count == q.param_count) {
        ++run;
      }
    }
    if (q.kind == Queued::Kind::Statement && run == 1) {
      c.stmt = q.stmt;
      c.params.count = static_cast<int>(q.param_count);
      c.params.values = values_.data() + first;
    }
    if (run == 1) {
      command_of_[i] = commands_.size();
      commands_.push_back(c);
      ++i;
      continue;
    }
    std::size_t row = 0;
    for (const std::size_t rows : merge_chunks(run, q.param_count)) {
      Command m;
      if (rows == 1) {
        m.stmt = q.stmt;  // the statement itself, prepared already or with the run
      } else {
        m.stmt = store_.merger().statement(*merge, rows, m.sql);
      }
      m.params.count = static_cast<int>(rows * q.param_count);
      m.params.values = values_.data() + first + row * q.param_count;
      for (std::size_t k = 0; k < rows; ++k) command_of_[i + row + k] = commands_.size();
      commands_.push_back(m);
      row += rows;
    }
    i += run;
  }
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
    // the caller swallowed; its code and SQLSTATE say whether redoing the work can help
    // and whose fault it is (docs/store-errors.md).
    f.code = failure_->code;
    f.message =
        fmt::format("{} (the transaction failed earlier: {})", f.message, failure_->message);
    f.sqlstate = failure_->sqlstate;
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

}  // namespace idem::detail::pg
