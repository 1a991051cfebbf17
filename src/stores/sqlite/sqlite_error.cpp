#include "stores/sqlite/sqlite_error.hpp"

#include <fmt/format.h>

#include "stores/store_errors.hpp"

namespace idem::detail::sqlite {

namespace {

struct CodeName {
  int code;
  const char* name;
};

#define IDEM_SQLITE_CODE(c) \
  CodeName {                \
    c, #c                   \
  }
// The extended codes one meets in practice, then every primary code. Looked up by
// extended code first, so e.g. SQLITE_BUSY_SNAPSHOT is reported as itself.
constexpr CodeName kNames[] = {
    IDEM_SQLITE_CODE(SQLITE_CONSTRAINT_CHECK),
    IDEM_SQLITE_CODE(SQLITE_CONSTRAINT_FOREIGNKEY),
    IDEM_SQLITE_CODE(SQLITE_CONSTRAINT_FUNCTION),
    IDEM_SQLITE_CODE(SQLITE_CONSTRAINT_NOTNULL),
    IDEM_SQLITE_CODE(SQLITE_CONSTRAINT_PRIMARYKEY),
    IDEM_SQLITE_CODE(SQLITE_CONSTRAINT_TRIGGER),
    IDEM_SQLITE_CODE(SQLITE_CONSTRAINT_UNIQUE),
    IDEM_SQLITE_CODE(SQLITE_CONSTRAINT_ROWID),
    IDEM_SQLITE_CODE(SQLITE_CONSTRAINT_DATATYPE),
    IDEM_SQLITE_CODE(SQLITE_BUSY_RECOVERY),
    IDEM_SQLITE_CODE(SQLITE_BUSY_SNAPSHOT),
    IDEM_SQLITE_CODE(SQLITE_BUSY_TIMEOUT),
    IDEM_SQLITE_CODE(SQLITE_LOCKED_SHAREDCACHE),
    IDEM_SQLITE_CODE(SQLITE_ABORT_ROLLBACK),
    IDEM_SQLITE_CODE(SQLITE_IOERR_READ),
    IDEM_SQLITE_CODE(SQLITE_IOERR_SHORT_READ),
    IDEM_SQLITE_CODE(SQLITE_IOERR_WRITE),
    IDEM_SQLITE_CODE(SQLITE_IOERR_FSYNC),
    IDEM_SQLITE_CODE(SQLITE_IOERR_DIR_FSYNC),
    IDEM_SQLITE_CODE(SQLITE_IOERR_TRUNCATE),
    IDEM_SQLITE_CODE(SQLITE_IOERR_FSTAT),
    IDEM_SQLITE_CODE(SQLITE_IOERR_LOCK),
    IDEM_SQLITE_CODE(SQLITE_IOERR_NOMEM),
    IDEM_SQLITE_CODE(SQLITE_IOERR_ACCESS),
    IDEM_SQLITE_CODE(SQLITE_IOERR_SHMOPEN),
    IDEM_SQLITE_CODE(SQLITE_IOERR_SHMSIZE),
    IDEM_SQLITE_CODE(SQLITE_IOERR_SHMLOCK),
    IDEM_SQLITE_CODE(SQLITE_IOERR_SHMMAP),
    IDEM_SQLITE_CODE(SQLITE_IOERR_DATA),
    IDEM_SQLITE_CODE(SQLITE_IOERR_CORRUPTFS),
    IDEM_SQLITE_CODE(SQLITE_CANTOPEN_ISDIR),
    IDEM_SQLITE_CODE(SQLITE_CANTOPEN_FULLPATH),
    IDEM_SQLITE_CODE(SQLITE_CANTOPEN_NOTEMPDIR),
    IDEM_SQLITE_CODE(SQLITE_CANTOPEN_DIRTYWAL),
    IDEM_SQLITE_CODE(SQLITE_CORRUPT_INDEX),
    IDEM_SQLITE_CODE(SQLITE_CORRUPT_SEQUENCE),
    IDEM_SQLITE_CODE(SQLITE_READONLY_RECOVERY),
    IDEM_SQLITE_CODE(SQLITE_READONLY_CANTLOCK),
    IDEM_SQLITE_CODE(SQLITE_READONLY_ROLLBACK),
    IDEM_SQLITE_CODE(SQLITE_READONLY_DBMOVED),
    IDEM_SQLITE_CODE(SQLITE_READONLY_CANTINIT),
    IDEM_SQLITE_CODE(SQLITE_READONLY_DIRECTORY),
    IDEM_SQLITE_CODE(SQLITE_ERROR_MISSING_COLLSEQ),
    IDEM_SQLITE_CODE(SQLITE_ERROR_RETRY),
    IDEM_SQLITE_CODE(SQLITE_OK),
    IDEM_SQLITE_CODE(SQLITE_ERROR),
    IDEM_SQLITE_CODE(SQLITE_INTERNAL),
    IDEM_SQLITE_CODE(SQLITE_PERM),
    IDEM_SQLITE_CODE(SQLITE_ABORT),
    IDEM_SQLITE_CODE(SQLITE_BUSY),
    IDEM_SQLITE_CODE(SQLITE_LOCKED),
    IDEM_SQLITE_CODE(SQLITE_NOMEM),
    IDEM_SQLITE_CODE(SQLITE_READONLY),
    IDEM_SQLITE_CODE(SQLITE_INTERRUPT),
    IDEM_SQLITE_CODE(SQLITE_IOERR),
    IDEM_SQLITE_CODE(SQLITE_CORRUPT),
    IDEM_SQLITE_CODE(SQLITE_NOTFOUND),
    IDEM_SQLITE_CODE(SQLITE_FULL),
    IDEM_SQLITE_CODE(SQLITE_CANTOPEN),
    IDEM_SQLITE_CODE(SQLITE_PROTOCOL),
    IDEM_SQLITE_CODE(SQLITE_EMPTY),
    IDEM_SQLITE_CODE(SQLITE_SCHEMA),
    IDEM_SQLITE_CODE(SQLITE_TOOBIG),
    IDEM_SQLITE_CODE(SQLITE_CONSTRAINT),
    IDEM_SQLITE_CODE(SQLITE_MISMATCH),
    IDEM_SQLITE_CODE(SQLITE_MISUSE),
    IDEM_SQLITE_CODE(SQLITE_NOLFS),
    IDEM_SQLITE_CODE(SQLITE_AUTH),
    IDEM_SQLITE_CODE(SQLITE_FORMAT),
    IDEM_SQLITE_CODE(SQLITE_RANGE),
    IDEM_SQLITE_CODE(SQLITE_NOTADB),
    IDEM_SQLITE_CODE(SQLITE_NOTICE),
    IDEM_SQLITE_CODE(SQLITE_WARNING),
    IDEM_SQLITE_CODE(SQLITE_ROW),
    IDEM_SQLITE_CODE(SQLITE_DONE),
};
#undef IDEM_SQLITE_CODE

const char* find_name(int code) noexcept {
  for (const auto& n : kNames) {
    if (n.code == code) return n.name;
  }
  return nullptr;
}

}  // namespace

std::string code_name(int extended_code) {
  if (const char* n = find_name(extended_code)) return n;
  const int primary = extended_code & 0xff;
  if (const char* n = find_name(primary)) return fmt::format("{}({})", n, extended_code);
  return fmt::format("SQLITE({})", extended_code);
}

ErrorCode classify(int extended_code) noexcept {
  // One table for the code and for what the consumer makes of it (stores/store_errors.cpp,
  // docs/store-errors.md), looked up by the code's name: the extended one when this build
  // names it (SQLITE_READONLY_RECOVERY is retried, SQLITE_READONLY is not), else the primary.
  const char* name = find_name(extended_code);
  if (name == nullptr) name = find_name(extended_code & 0xff);
  return sqlite_error_rule(name != nullptr ? name : "").code;
}

std::string sql_excerpt(std::string_view sql) {
  constexpr std::size_t kMax = 200;
  std::string out;
  out.reserve(std::min(sql.size(), kMax) + 3);
  bool space = false;
  for (const char c : sql) {
    if (out.size() >= kMax) {
      out += "...";
      break;
    }
    // One line: logs and DLQ headers are line-oriented.
    if (c == '\n' || c == '\r' || c == '\t' || c == ' ') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

Error make_error(ErrorCode code, sqlite3* db, int rc, std::string_view what, std::string_view sql) {
  // With extended result codes on, rc is already the extended code; errmsg is more
  // specific than errstr (it names the table, the column, the token).
  const char* msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  std::string text = fmt::format("sqlite: {}: {}", what, msg != nullptr ? msg : sqlite3_errstr(rc));
  if (!sql.empty()) text += fmt::format(" [SQL: {}]", sql_excerpt(sql));
  return Error(code, ErrorSource::Sqlite, text, code_name(rc));
}

Error make_error(sqlite3* db, int rc, std::string_view what, std::string_view sql) {
  return make_error(classify(rc), db, rc, what, sql);
}

}  // namespace idem::detail::sqlite
