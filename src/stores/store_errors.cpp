#include "stores/store_errors.hpp"

#include <string>

#include <fmt/format.h>

#include "stores/migration.hpp"

namespace idem::detail {

namespace {

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

using enum StoreErrorOutcome;

// PostgreSQL (Appendix A, Error Codes). Only the rows that differ from the default (Query,
// Stop) are here, and XX for its code; docs/store-errors.md gives every class and why.
constexpr StoreErrorRule kPostgresRules[] = {
    // Retried: nothing about the work is wrong; the same transaction later may succeed.
    {"08", ErrorCode::Connection, Retry},             // connection exception
    {"25P03", ErrorCode::Connection, Retry},          // idle_in_transaction_session_timeout ends it
    {"25P04", ErrorCode::Connection, Retry},          // transaction_timeout (PostgreSQL 17) ends it
    {"40", ErrorCode::TransactionAborted, Retry},     // serialization failure, deadlock
    {"53", ErrorCode::TransactionAborted, Retry},     // disk full, out of memory, connections
    {"55P03", ErrorCode::TransactionAborted, Retry},  // lock_not_available (lock_timeout)
    {"57014", ErrorCode::Timeout, Retry},             // query_canceled (statement_timeout)
    {"57P", ErrorCode::Connection, Retry},            // shutdowns, terminated, database dropped
    {"58", ErrorCode::TransactionAborted, Retry},     // the server's I/O or system call failed
    {"72", ErrorCode::TransactionAborted, Retry},     // snapshot_too_old: a new one will do
    {"HV001", ErrorCode::TransactionAborted, Retry},  // fdw_out_of_memory
    {"HV00N", ErrorCode::Connection, Retry},          // fdw_unable_to_establish_connection
    // The event's fault: what its values met (a constraint, a type, the user's own checks).
    {"20", ErrorCode::Query, DeadLetter},       // case_not_found: a CASE without this value's WHEN
    {"21", ErrorCode::Query, DeadLetter},       // cardinality_violation: more rows than one
    {"22", ErrorCode::Query, DeadLetter},       // data exception: a value the type cannot take
    {"23", ErrorCode::Constraint, DeadLetter},  // integrity constraint violation
    {"44", ErrorCode::Constraint, DeadLetter},  // with_check_option_violation of a view
    {"P0", ErrorCode::Query, DeadLetter},       // PL/pgSQL: RAISE, STRICT, ASSERT
    // Stopped, and said to be the server's: an internal error, corrupted data.
    {"XX", ErrorCode::Internal, Stop},
};

// SQLite's result codes, by the names sqlite3.h gives them. Unlisted
// codes (SQLITE_ERROR: syntax, no such table; SQLITE_TOOBIG, SQLITE_RANGE, SQLITE_MISUSE,
// SQLITE_PERM, SQLITE_AUTH, SQLITE_READONLY on a read-only file, ...) stop.
constexpr StoreErrorRule kSqliteRules[] = {
    // Another connection holds a lock (after busy_timeout), a table is locked in this
    // process, a WAL locking race, a schema changed under a prepared statement, a
    // statement aborted by a rollback, an interrupt, memory running out, the WAL being
    // recovered by another connection: redo the transaction later.
    {"SQLITE_BUSY", ErrorCode::TransactionAborted, Retry},
    {"SQLITE_LOCKED", ErrorCode::TransactionAborted, Retry},
    {"SQLITE_PROTOCOL", ErrorCode::TransactionAborted, Retry},
    {"SQLITE_SCHEMA", ErrorCode::TransactionAborted, Retry},
    {"SQLITE_ABORT", ErrorCode::TransactionAborted, Retry},
    {"SQLITE_INTERRUPT", ErrorCode::TransactionAborted, Retry},
    {"SQLITE_NOMEM", ErrorCode::TransactionAborted, Retry},
    {"SQLITE_READONLY_RECOVERY", ErrorCode::TransactionAborted, Retry},
    {"SQLITE_READONLY_CANTLOCK", ErrorCode::TransactionAborted, Retry},
    // The database file cannot be used right now (cannot be opened, I/O failed, not a
    // database, damaged, disk full): the embedded equivalent of a broken connection.
    {"SQLITE_CANTOPEN", ErrorCode::Connection, Retry},
    {"SQLITE_IOERR", ErrorCode::Connection, Retry},
    {"SQLITE_NOTADB", ErrorCode::Connection, Retry},
    {"SQLITE_CORRUPT", ErrorCode::Connection, Retry},
    {"SQLITE_FULL", ErrorCode::Connection, Retry},
    // The event's fault: a constraint (PRIMARY KEY, UNIQUE, CHECK, NOT NULL, FOREIGN KEY, a
    // STRICT column's type, a trigger's RAISE), a value of the wrong type for a rowid.
    {"SQLITE_CONSTRAINT", ErrorCode::Constraint, DeadLetter},
    {"SQLITE_MISMATCH", ErrorCode::Query, DeadLetter},
};

constexpr StoreErrorRule kUnlisted{"", ErrorCode::Query, Stop};

// The SQLite name `name` is `key` itself or one of its extended codes
// ("SQLITE_BUSY_SNAPSHOT", or "SQLITE_BUSY(1234)" for one without a name).
bool names_code(std::string_view name, std::string_view key) {
  if (!name.starts_with(key)) return false;
  return name.size() == key.size() || name[key.size()] == '_' || name[key.size()] == '(';
}

// What an operator should do about a permanent store error. The SQLSTATE (PostgreSQL) or
// the SQLite code is in Error::detail(); SQLite says "no such table" in its message only.
std::string_view remedy(const Error& e) {
  const std::string& d = e.detail();
  const std::string_view what = e.what();
  // 42P01 undefined_table, 42703 undefined_column, 42883 undefined_function, 3F000
  // invalid_schema_name: the schema is not the one this idem was built for.
  if (e.code() == ErrorCode::Schema || d == "42P01" || d == "42703" || d == "42883" ||
      d == "3F000" || contains(what, "no such table") || contains(what, "no such column")) {
    return "the schema is not the one this idem needs; run `idem migrate`, then start again";
  }
  // 42501 insufficient_privilege; SQLITE_READONLY*, SQLITE_PERM, SQLITE_AUTH.
  if (d == "42501" || d.starts_with("SQLITE_READONLY") || d == "SQLITE_PERM" ||
      d == "SQLITE_AUTH") {
    return "the database refuses this process's writes; grant the privileges (or make the "
           "database file writable), then start again";
  }
  // 25006 read_only_sql_transaction: a standby, or default_transaction_read_only. Only
  // with a single host: with several, it is a reason to reconnect (pg_connection.cpp).
  if (d == "25006") {
    return "the server is read-only (a standby, or a primary demoted by a failover); point "
           "store.url at the primary, or name every host of the cluster in it (host=a,b: "
           "idem then reconnects to the one that takes writes)";
  }
  // Class XX: internal_error, data_corrupted, index_corrupted.
  if (d.starts_with("XX")) {
    return "the server reports an internal error (a bug, or damaged data or indexes); read "
           "the server's log and fix the cause (REINDEX, restore), then start again";
  }
  return "retrying cannot fix it and no event is to blame (docs/store-errors.md); fix the "
         "database or the statement, then start again";
}

}  // namespace

ErrorSource error_source(Backend backend) noexcept {
  return backend == Backend::Postgres ? ErrorSource::Postgres : ErrorSource::Sqlite;
}

StoreErrorRule postgres_error_rule(std::string_view sqlstate) noexcept {
  const StoreErrorRule* found = &kUnlisted;
  for (const StoreErrorRule& rule : kPostgresRules) {
    if (sqlstate.starts_with(rule.key) && rule.key.size() > found->key.size()) found = &rule;
  }
  return *found;
}

StoreErrorRule sqlite_error_rule(std::string_view code_name) noexcept {
  const StoreErrorRule* found = &kUnlisted;
  for (const StoreErrorRule& rule : kSqliteRules) {
    if (names_code(code_name, rule.key) && rule.key.size() > found->key.size()) found = &rule;
  }
  return *found;
}

std::span<const StoreErrorRule> postgres_error_rules() noexcept {
  return kPostgresRules;
}

std::span<const StoreErrorRule> sqlite_error_rules() noexcept {
  return kSqliteRules;
}

}  // namespace idem::detail

namespace idem {

ErrorScope scope_of(const Error& e) noexcept {
  switch (e.code()) {
    case ErrorCode::Connection:
    case ErrorCode::Timeout: return ErrorScope::Connection;
    case ErrorCode::TransactionAborted: return ErrorScope::Transaction;
    case ErrorCode::InDoubt: return ErrorScope::InDoubt;
    default: break;
  }
  detail::StoreErrorRule rule = detail::kUnlisted;
  if (e.source() == ErrorSource::Postgres) {
    rule = detail::postgres_error_rule(e.detail());
  } else if (e.source() == ErrorSource::Sqlite) {
    rule = detail::sqlite_error_rule(e.detail());
  } else {
    return ErrorScope::Statement;  // a handler's own error: its event's business
  }
  // A Retry row's code thrown as permanent (08P01 on a live connection is a Bind the
  // server refused: the statement's parameters do not match it) is not the event's.
  return rule.outcome == StoreErrorOutcome::DeadLetter ? ErrorScope::Statement
                                                       : ErrorScope::Permanent;
}

StoreErrorOutcome effect_error_outcome(const Error& e) noexcept {
  switch (scope_of(e)) {
    case ErrorScope::Statement: return StoreErrorOutcome::DeadLetter;
    case ErrorScope::Permanent: return StoreErrorOutcome::Stop;
    case ErrorScope::Transaction:
    case ErrorScope::Connection:
    case ErrorScope::InDoubt: return StoreErrorOutcome::Retry;
  }
  return StoreErrorOutcome::Stop;
}

std::string_view to_string(StoreErrorOutcome outcome) noexcept {
  switch (outcome) {
    case StoreErrorOutcome::Retry: return "retry";
    case StoreErrorOutcome::Stop: return "stop";
    case StoreErrorOutcome::DeadLetter: return "dead-letter";
  }
  return "unknown";
}

}  // namespace idem

namespace idem::detail {

const Error* refused_for_good(const std::exception& e) noexcept {
  const auto* err = dynamic_cast<const Error*>(&e);
  if (err == nullptr || err->transient()) return nullptr;
  const bool store = err->source() == ErrorSource::Postgres || err->source() == ErrorSource::Sqlite;
  return store ? err : nullptr;
}

Error stopping_error(std::string_view who, const Error& cause) {
  return Error(cause.code(), cause.source(),
               fmt::format("{}: stopping: the store refused a statement for good: {}; {}", who,
                           cause.what(), remedy(cause)),
               cause.detail());
}

void stop_if_refused_for_good(std::string_view who, const std::exception& e) {
  if (const Error* cause = refused_for_good(e)) throw stopping_error(who, *cause);
}

void rethrow_if_refused_for_good(const std::exception_ptr& error) {
  if (!error) return;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    if (refused_for_good(e) != nullptr) throw;
  } catch (...) {
  }
}

int known_idem_schema_version(Backend backend) noexcept {
  const auto& list =
      backend == Backend::Postgres ? postgres_sql::migrations() : sqlite_sql::migrations();
  return list.empty() ? 0 : list.back().version;
}

void require_idem_schema(Store& store, std::string_view who) {
  const int known = known_idem_schema_version(store.backend());
  const int found = store.schema_version();
  if (found == known) return;
  const ErrorSource source = error_source(store.backend());
  if (found == 0) {
    throw Error(ErrorCode::Schema, source,
                fmt::format("{}: the store has no idem schema (it was never migrated); run `idem "
                            "migrate` first, then start again",
                            who));
  }
  if (found < known) {
    throw Error(ErrorCode::Schema, source,
                fmt::format("{}: the store's idem schema is at version {}, older than the "
                            "version {} this idem needs; run `idem migrate` first, then start "
                            "again",
                            who, found, known));
  }
  throw Error(ErrorCode::Schema, source,
              fmt::format("{}: the store's idem schema is at version {}, newer than the version "
                          "{} this idem knows: it was migrated by a newer idem; run that idem (or "
                          "a newer one) against it, never an older one",
                          who, found, known));
}

}  // namespace idem::detail

namespace idem {

void require_table(Store& store, Transaction& tx, std::string_view table, const char* message) {
  const char* sql = store.backend() == Backend::Postgres
                        ? "SELECT count(*) FROM pg_catalog.pg_tables WHERE tablename = $1 AND "
                          "schemaname = ANY (current_schemas(false))"
                        : "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = $1";
  if (tx.execute(sql, std::string(table))[0].int64(0) == 0)
    throw Error(ErrorCode::Schema, detail::error_source(store.backend()), message);
}

}  // namespace idem
