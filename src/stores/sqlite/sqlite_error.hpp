#pragma once
// Turning SQLite result codes into idem::Error. Private to the SQLite backend.
#include <sqlite3.h>

#include <string>
#include <string_view>

#include "idem/error.hpp"

namespace idem::detail::sqlite {

/// "SQLITE_CONSTRAINT_PRIMARYKEY", or "SQLITE_IOERR(4874)" for an extended code
/// without a name in this build's table. Used as Error::detail().
[[nodiscard]] std::string code_name(int extended_code);

/// What an SQLite result code means for the caller, by the one table of store errors
/// (sqlite_error_rule() in stores/store_errors.hpp, docs/store-errors.md).
[[nodiscard]] ErrorCode classify(int extended_code) noexcept;

/// The SQL text as it may appear in an error message: at most ~200 characters, on
/// one line. Parameter values never appear in messages: they are bound, not spliced.
[[nodiscard]] std::string sql_excerpt(std::string_view sql);

/// Builds the Error for a failed call on `db`. Reads sqlite3_errmsg(db), so call it
/// before any other call on the connection. `what` says what idem was doing.
[[nodiscard]] Error make_error(sqlite3* db, int rc, std::string_view what,
                               std::string_view sql = {});
/// The same with an explicit code, for when the context changes the meaning
/// (an I/O error during COMMIT is InDoubt, not Connection).
[[nodiscard]] Error make_error(ErrorCode code, sqlite3* db, int rc, std::string_view what,
                               std::string_view sql = {});

}  // namespace idem::detail::sqlite
