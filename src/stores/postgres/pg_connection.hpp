#pragma once
// One libpq connection: connecting without ever printing the conninfo, the
// prepared-statement cache, pipelined execution, and SQLSTATE classification.
// Private to the PostgreSQL store.
#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "idem/error.hpp"
#include "idem/store.hpp"

namespace idem::detail::pg {

// Type OIDs from PostgreSQL's catalog/pg_type_d.h (stable across versions; that
// header is server-side, so the few we need are spelled out here).
inline constexpr Oid kTextOid = 25;
inline constexpr Oid kUuidOid = 2950;
inline constexpr Oid kUuidArrayOid = 2951;

struct ResultDeleter {
  void operator()(PGresult* r) const noexcept { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultDeleter>;

/// A server-side prepared statement. Its name is fixed for the life of the
/// Connection; whether the *current* session has it is tracked by generation,
/// because a reconnect silently drops every prepared statement.
struct Statement {
  std::string name;
  std::string sql;
  std::vector<Oid> types;                 ///< empty: the server infers every parameter type
  std::uint64_t prepared_generation = 0;  ///< == Connection::generation() when prepared
  /// How many parameters the server says the statement takes (from DESCRIBE on its
  /// first PREPARE); -1 until known. Lets a wrong count fail before anything is sent.
  int param_count = -1;
};

/// Parameters encoded for libpq (pointers stay owned by the caller).
struct Params {
  int count = 0;
  const char* const* values = nullptr;
  const int* lengths = nullptr;
  const int* formats = nullptr;
};

/// One command of a round trip.
struct Command {
  /// The prepared statement to run (its PREPARE and a DESCRIBE are pipelined ahead of it
  /// when this session has not prepared it yet), or nullptr to run `sql` unnamed.
  Statement* stmt = nullptr;
  std::string_view sql;  ///< used only when stmt is nullptr
  Params params;
  int result_format = 0;  ///< 0 text, 1 binary
};

/// What one round trip produced.
struct Reply {
  /// The last command's result, or the first error of the round trip (an error of an
  /// earlier command, or of a pipelined PREPARE, is reported instead of the last result).
  /// Null when nothing could be sent or read at all (a broken connection).
  Result result;
  /// How many of the commands succeeded, in order; the ones after a failure did not run.
  std::size_t done = 0;
};

/// The classification of one failed result (see classify()).
struct Failure {
  ErrorCode code = ErrorCode::Internal;
  std::string sqlstate;  ///< empty for errors libpq made up itself (connection lost)
  /// The server's primary message, without DETAIL (which quotes row values) and
  /// without the password. (The primary message of an input-syntax error does quote
  /// the literal it could not parse; nothing else of the bound values appears.)
  std::string message;
};

class Connection {
 public:
  /// Connects. Throws Error(InvalidArgument) for an unparsable conninfo and
  /// Error(Connection) when no connection can be made. Messages name host, port,
  /// database and user, never the conninfo itself (it may hold a password).
  Connection(std::string_view conninfo, const StoreOptions& options);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  [[nodiscard]] PGconn* native() const noexcept { return conn_; }
  /// Bumped by every reconnect: statements prepared in an older generation are gone.
  [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }
  /// True when the conninfo names several hosts (a cluster that may fail over).
  [[nodiscard]] bool several_hosts() const noexcept { return several_hosts_; }

  /// Reads whatever the server sent while we were idle (a FATAL from
  /// pg_terminate_backend, an idle-session timeout, EOF) without blocking.
  /// Returns false when the connection is now known to be unusable.
  bool poll_alive() noexcept;

  /// True when the connection must be re-established before the next transaction.
  [[nodiscard]] bool needs_reset() const noexcept;
  /// Marks the session state as unknown (a protocol exchange was cut short), so
  /// the next transaction starts on a fresh session.
  void poison() noexcept { poisoned_ = true; }
  /// Re-establishes the connection (PQreset, one attempt). Throws Error(Connection).
  void reset();
  /// Makes the connection ready for a new transaction: reconnects once if it is
  /// broken or poisoned, and ends a transaction block left open by someone else.
  void ensure_ready();

  /// The cached statement for `sql`, creating its cache entry (not yet prepared)
  /// on first use. Returns nullptr when the cache is full: the caller then runs
  /// the SQL unprepared, so dynamically built SQL cannot grow the cache forever.
  Statement* statement(std::string_view sql);

  /// Runs `commands` in one round trip: pipelined back to back behind one sync, in
  /// order (a single command whose statement is prepared already goes without pipeline
  /// mode). On success the statements prepared here are marked prepared and get their
  /// param_count. Never throws: SQL and connection errors come back in the Reply for the
  /// caller to classify.
  Reply exec(std::span<const Command> commands);

  /// Simple-query protocol (several statements allowed), for migrations. Not pipelined.
  Result exec_simple(const char* sql);

  /// Classifies a failed result (or a null one, which means the connection broke).
  /// With several hosts named, a read-only refusal (25006) is a Connection failure and
  /// marks the session for replacement (see the .cpp).
  [[nodiscard]] Failure classify(const PGresult* result) const;
  /// Throws the Error for a failed result. `what` says what was being done; it is
  /// prefixed to the message ("postgres: <what>: <server message>").
  [[noreturn]] void fail(const PGresult* result, std::string_view what) const;

  /// "host=... port=... dbname=... user=..." for messages; never the password.
  [[nodiscard]] std::string describe() const;

  /// Removes the password from a message (defence in depth: libpq does not put it
  /// in its messages, but a malformed URI can make a part of it look like a host).
  [[nodiscard]] std::string scrub(std::string message) const;

 private:
  Reply exec_pipelined(std::span<const Command> commands);
  /// The result of the next pipelined command (consuming its terminating null).
  Result next_pipeline_result();

  static void on_notice(void* self, const PGresult* notice);

  PGconn* conn_ = nullptr;
  std::string password_;       // only to scrub it from messages
  bool server_ended_ = false;  // a FATAL arrived while no command was running
  std::uint64_t generation_ = 1;
  bool several_hosts_ = false;
  // Also set by classify(): a read-only primary's session must be replaced.
  mutable bool poisoned_ = false;

  struct SqlHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  std::unordered_map<std::string, std::unique_ptr<Statement>, SqlHash, std::equal_to<>> cache_;
  std::uint64_t next_statement_ = 0;
  // Reused by exec_pipelined().
  std::vector<Statement*> preparing_;
  std::vector<bool> prepares_;
};

/// Classifies a SQLSTATE (five characters) into idem's error codes, by the one table of
/// store errors (postgres_error_rule() in stores/store_errors.hpp). Unlisted: Query.
[[nodiscard]] ErrorCode classify_sqlstate(std::string_view sqlstate) noexcept;

/// The statement text for messages: whitespace collapsed, cut at 160 characters.
/// Values are never in it: they travel as parameters.
[[nodiscard]] std::string sql_excerpt(std::string_view sql);
/// A statement's result succeeded (a command, or rows); false for none.
[[nodiscard]] bool ok_status(const PGresult* r);

/// True for SQLSTATEs that mean the session is gone (class 08, 57P01-57P05).
[[nodiscard]] bool is_connection_sqlstate(std::string_view sqlstate) noexcept;

}  // namespace idem::detail::pg
