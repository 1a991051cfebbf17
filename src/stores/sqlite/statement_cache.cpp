#include "stores/sqlite/statement_cache.hpp"

#include <charconv>
#include <climits>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "stores/sqlite/sqlite_error.hpp"

namespace idem::detail::sqlite {

namespace {

/// The idem parameter index (0-based) for a placeholder name such as "$3" or "?3";
/// -1 if the name is not of that form.
int numbered(const char* name) {
  if (name == nullptr || (name[0] != '$' && name[0] != '?')) return -1;
  const std::string_view digits(name + 1);
  int n = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size() || n < 1) return -1;
  return n - 1;
}

/// True when `rest` holds nothing but whitespace, semicolons and comments.
bool only_trivia(sqlite3* db, const char* rest) {
  while (*rest != '\0') {
    sqlite3_stmt* extra = nullptr;
    const char* tail = nullptr;
    const int rc = sqlite3_prepare_v3(db, rest, -1, 0, &extra, &tail);
    if (rc != SQLITE_OK || extra != nullptr) {
      sqlite3_finalize(extra);
      return false;
    }
    if (tail == nullptr || tail == rest) break;
    rest = tail;
  }
  return true;
}

}  // namespace

Statement::Statement(sqlite3* db, std::string_view sql, unsigned prepare_flags) {
  if (sql.size() > static_cast<std::size_t>(INT_MAX)) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Sqlite, "sqlite: SQL text is too long");
  }
  const char* tail = nullptr;
  const int rc = sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()), prepare_flags,
                                    &stmt_, &tail);
  if (rc != SQLITE_OK) {
    Error e = make_error(db, rc, "cannot prepare statement", sql);
    sqlite3_finalize(stmt_);
    stmt_ = nullptr;
    throw e;
  }
  if (stmt_ == nullptr) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Sqlite,
                fmt::format("sqlite: the SQL text holds no statement [SQL: {}]", sql_excerpt(sql)));
  }
  // The rest of the text must be empty: silently ignoring a second statement would
  // drop work. It is not NUL-terminated inside `sql`, so copy it before re-parsing.
  const std::size_t used = static_cast<std::size_t>(tail - sql.data());
  if (used < sql.size()) {
    const std::string rest(sql.substr(used));
    if (!only_trivia(db, rest.c_str())) {
      sqlite3_finalize(stmt_);
      stmt_ = nullptr;
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Sqlite,
                  fmt::format("sqlite: execute() runs exactly one statement, but the SQL text "
                              "holds more [SQL: {}]",
                              sql_excerpt(sql)));
    }
  }
  const int count = sqlite3_bind_parameter_count(stmt_);
  binding_.resize(static_cast<std::size_t>(count));
  for (int i = 1; i <= count; ++i) {
    const char* name = sqlite3_bind_parameter_name(stmt_, i);
    int index = -1;
    if (name == nullptr) {
      index = i - 1;  // a plain "?": SQLite numbered it
    } else {
      index = numbered(name);
      if (index < 0) {
        const std::string bad(name);
        sqlite3_finalize(stmt_);
        stmt_ = nullptr;
        throw Error(ErrorCode::InvalidArgument, ErrorSource::Sqlite,
                    fmt::format("sqlite: placeholder '{}' is not supported; write $1, $2, ... "
                                "[SQL: {}]",
                                bad, sql_excerpt(sql)));
      }
    }
    binding_[static_cast<std::size_t>(i - 1)] = index;
    arity_ = std::max(arity_, index + 1);
  }
}

Statement::~Statement() {
  sqlite3_finalize(stmt_);
}

void Statement::reset() noexcept {
  // reset() returns the error of the last step again; the caller has already seen it.
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

}  // namespace idem::detail::sqlite
