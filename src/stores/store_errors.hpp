#pragma once
// The one table of store errors (docs/store-errors.md; what an effect's error becomes,
// StoreErrorOutcome and effect_error_outcome, is public in idem/error.hpp): which
// SQLSTATEs and SQLite result codes are retried, which are one event's fault (dead-lettered) and
// which stop the process; what a long-running process (the consumer, the relay) stops with; and the
// schema check they run before they start.
//
// The rule: an idem::Error from PostgreSQL or SQLite that is transient (Error::transient():
// the connection, a lost race, a server out of resources or failing its I/O) is retried.
// Every other one is permanent. A process whose OWN statements (dedup marks, outbox claims
// and marks, retention declarations) fail for good stops and says why. A statement of one
// event's effect that fails for good is that event's fault only when the table says so (a
// constraint, a bad value, the user's own RAISE); every other permanent error, a code the
// table does not list included, stops the consumer rather than dead-lettering the stream.
#include <exception>
#include <span>
#include <string_view>

#include "idem/error.hpp"
#include "idem/store.hpp"

namespace idem::detail {

/// One row of the table. `key` is a SQLSTATE prefix (a class "58", or longer: "57P",
/// "55P03"; the longest matching key wins) or an SQLite result code's name (a primary code
/// "SQLITE_BUSY", which covers its extended codes, or an extended one
/// "SQLITE_READONLY_RECOVERY"). `code` is the ErrorCode the store throws it as; a Retry
/// row's code is transient, every other row's is not.
struct StoreErrorRule {
  std::string_view key;
  ErrorCode code;
  StoreErrorOutcome outcome;
};

/// The rule for a SQLSTATE. A SQLSTATE no row lists: {"", Query, Stop}.
[[nodiscard]] StoreErrorRule postgres_error_rule(std::string_view sqlstate) noexcept;
/// The rule for an SQLite result code's name as code_name() spells it
/// ("SQLITE_CONSTRAINT_UNIQUE", "SQLITE_IOERR(4874)"). Unlisted: {"", Query, Stop}.
[[nodiscard]] StoreErrorRule sqlite_error_rule(std::string_view code_name) noexcept;
/// Every row, for the tests that hold the table to its documented properties.
[[nodiscard]] std::span<const StoreErrorRule> postgres_error_rules() noexcept;
[[nodiscard]] std::span<const StoreErrorRule> sqlite_error_rules() noexcept;

/// The Error inside `e` when it is a store error (PostgreSQL or SQLite) that redoing the
/// work cannot fix; null otherwise (transient, or not a store error).
[[nodiscard]] const Error* refused_for_good(const std::exception& e) noexcept;

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

/// The highest version of idem's own schema this build knows for `backend`.
[[nodiscard]] int known_idem_schema_version(Backend backend) noexcept;

/// Refuses to start on a store whose idem schema is missing, older than this build needs
/// (run `idem migrate`) or newer than it knows (migrated by a newer idem): throws
/// Error(Schema) with a message that starts with `who` and says which. Other store errors
/// (a connection that cannot be made) propagate unchanged, so the caller may retry them.
void require_idem_schema(Store& store, std::string_view who);

}  // namespace idem::detail
