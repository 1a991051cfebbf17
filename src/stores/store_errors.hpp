#pragma once
// What a long-running process (the consumer, the relay) does with a store error that
// redoing the work cannot fix, and the schema check they run before they start.
//
// The rule (docs/consumer.md, docs/outbox.md): an idem::Error from PostgreSQL or SQLite
// that is not transient (Error::transient(): connection, serialization failure, deadlock,
// lock timeout, busy) is permanent: a missing table or column, bad SQL, a missing
// privilege, a read-only database. Retrying it only hides it, so a process whose OWN
// statements (dedup marks, outbox claims and marks, retention declarations) fail that
// way stops and says why. An error of one event's effect statement is that event's
// fault instead: the consumer dead-letters that event and goes on.
#include <exception>
#include <string_view>

#include "idem/error.hpp"
#include "idem/store.hpp"

namespace idem::detail {

/// The Error inside `e` when it is a store error (PostgreSQL or SQLite) that redoing the
/// work cannot fix; null otherwise (transient, or not a store error).
[[nodiscard]] const Error* refused_for_good(const std::exception& e) noexcept;

/// True when `e` is a store error of a statement that no event's values could make work:
/// it names a table, column or function that does not exist, is not valid SQL, or the
/// database refuses this process the privilege (PostgreSQL: SQLSTATE class 42, 3F000,
/// 25006; SQLite: "no such table/column/function", a syntax error, SQLITE_READONLY*,
/// SQLITE_PERM, SQLITE_AUTH). A constraint violation or a bad value (class 22, 23) is the
/// event's own fault instead, and a transient error is neither.
[[nodiscard]] bool statement_refused_for_good(const Error& e) noexcept;

/// What `who` ("idem consumer", "idem relay") stops with after `cause`: the same code,
/// source and detail, a message that names the error and what an operator should do.
[[nodiscard]] Error stopping_error(std::string_view who, const Error& cause);

/// Throws stopping_error(who, ...) when refused_for_good(e); returns otherwise.
void stop_if_refused_for_good(std::string_view who, const std::exception& e);

/// Rethrows `error` (unchanged) when it holds an exception refused_for_good(); returns
/// otherwise (also for null).
void rethrow_if_refused_for_good(const std::exception_ptr& error);

/// The ErrorSource of `backend`'s errors.
[[nodiscard]] ErrorSource error_source(Backend backend) noexcept;

/// Throws Error(Schema, `message`) when the store's schema has no table `table` (a store
/// migrated by an older idem, before the table existed). Runs inside `tx`.
void require_table(Store& store, Transaction& tx, std::string_view table, const char* message);

/// The highest version of idem's own schema this build knows for `backend`.
[[nodiscard]] int known_idem_schema_version(Backend backend) noexcept;

/// Refuses to start on a store whose idem schema is missing, older than this build needs
/// (run `idem migrate`) or newer than it knows (migrated by a newer idem): throws
/// Error(Schema) with a message that starts with `who` and says which. Other store errors
/// (a connection that cannot be made) propagate unchanged, so the caller may retry them.
void require_idem_schema(Store& store, std::string_view who);

}  // namespace idem::detail
