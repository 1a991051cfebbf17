#pragma once
/// \file
/// The one exception type idem throws at its edges (setup, connection, SQL),
/// and the classification the consumer loop uses to decide what to do next.

#include <stdexcept>
#include <string>
#include <string_view>

namespace idem {

/// Where an error came from.
enum class ErrorSource { Config, Kafka, Postgres, Sqlite, Http, Event, Internal };

/// What kind of error it is. The consumer loop maps these to an action.
enum class ErrorCode {
  InvalidArgument,     ///< a caller passed something that can never work (bad URL, bad name)
  Connection,          ///< the connection is broken or could not be made: reconnect, then redo
  TransactionAborted,  ///< serialization failure, deadlock, SQLITE_BUSY: redo the transaction
  Constraint,          ///< a constraint was violated: redoing will not help
  Query,               ///< the SQL itself failed (syntax, missing table, type mismatch)
  InDoubt,             ///< the connection dropped during COMMIT: outcome unknown, never guess
  Timeout,             ///< a deadline passed
  Schema,              ///< the schema is missing or at an unexpected version
  Internal,            ///< a bug or an impossible state
};

/// The exception thrown by idem. Carries a code, a source and optional native
/// detail (a SQLSTATE, an SQLite extended result code, an HTTP status).
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, ErrorSource source, const std::string& message, std::string detail = {})
      : std::runtime_error(message), code_(code), source_(source), detail_(std::move(detail)) {}

  [[nodiscard]] ErrorCode code() const noexcept { return code_; }
  [[nodiscard]] ErrorSource source() const noexcept { return source_; }
  /// Native detail such as a SQLSTATE ("40001") or SQLite code ("SQLITE_BUSY"); may be empty.
  [[nodiscard]] const std::string& detail() const noexcept { return detail_; }

  /// True when redoing the whole unit of work later may succeed
  /// (Connection, TransactionAborted, Timeout, InDoubt).
  [[nodiscard]] bool transient() const noexcept {
    return code_ == ErrorCode::Connection || code_ == ErrorCode::TransactionAborted ||
           code_ == ErrorCode::Timeout || code_ == ErrorCode::InDoubt;
  }

 private:
  ErrorCode code_;
  ErrorSource source_;
  std::string detail_;
};

/// What an error ruined, and so what can be redone, decided once: by the code for a
/// transient error, and for a store's permanent one by its row in the store error table
/// (docs/store-errors.md), the table PostgreSQL's and SQLite's errors are classified by.
/// The consumer, `idem config test` and `idem config check` all act on it the same way.
enum class ErrorScope {
  /// This statement and the event it serves, nothing else: the event's fault (a
  /// constraint, a bad value, the user's own RAISE; or a handler's own error). Its
  /// savepoint is undone, the event goes to the DLQ, the transaction goes on.
  Statement,
  /// The transaction (serialization failure, deadlock, a busy database): redo it.
  Transaction,
  /// The connection (broken, or a deadline passed): reconnect, then redo.
  Connection,
  /// The connection broke during COMMIT: the outcome is unknown and never guessed;
  /// redelivery and the dedup mark decide.
  InDoubt,
  /// Nothing can redo it and no other event would fare better (a missing table or
  /// privilege, an I/O error the server gave up on, a code the table does not list): stop.
  Permanent,
};

/// The scope of `e` (see ErrorScope).
[[nodiscard]] ErrorScope scope_of(const Error& e) noexcept;

/// What becomes of an error of one event's effect (a handler's or its statement's).
enum class StoreErrorOutcome {
  Retry,       ///< redo the transaction after a backoff (Error::transient())
  Stop,        ///< no event's fault: the consumer stops, saying why
  DeadLetter,  ///< that event's fault: that event alone goes to the DLQ
};

/// What becomes of one event's effect that threw `e`, by its scope (scope_of), the one
/// mapping the consumer, `idem config test` and `idem config check` use: Statement ->
/// DeadLetter (that event alone); Transaction, Connection, InDoubt -> Retry; Permanent ->
/// Stop (no SQLSTATE, an unlisted one, a row that retries a code the store threw as
/// permanent). A handler's own error (not the store's) is Statement.
[[nodiscard]] StoreErrorOutcome effect_error_outcome(const Error& e) noexcept;

/// Short stable names, for logs and DLQ headers.
[[nodiscard]] std::string_view to_string(ErrorCode code) noexcept;
[[nodiscard]] std::string_view to_string(ErrorScope scope) noexcept;
[[nodiscard]] std::string_view to_string(ErrorSource source) noexcept;
/// "retry", "stop" or "dead-letter".
[[nodiscard]] std::string_view to_string(StoreErrorOutcome outcome) noexcept;

}  // namespace idem
