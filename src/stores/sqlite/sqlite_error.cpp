#include "stores/sqlite/sqlite_error.hpp"

#include <fmt/format.h>

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
  // Read-only for a moment, not for good: another connection is recovering the WAL, or
  // the WAL index cannot be locked yet. (Every other SQLITE_READONLY is permanent: the
  // file or its directory is not writable, or the database was opened read-only.)
  if (extended_code == SQLITE_READONLY_RECOVERY || extended_code == SQLITE_READONLY_CANTLOCK)
    return ErrorCode::TransactionAborted;
  switch (extended_code & 0xff) {
    // Another connection holds the lock we need (after busy_timeout ran out), or a
    // table is locked inside this process. Nothing is wrong with the work itself:
    // redoing the whole transaction later is the right reaction. The same holds for a
    // WAL locking race (PROTOCOL), a schema changed under a prepared statement more
    // often than SQLite re-prepares it (SCHEMA), a statement aborted by a rollback
    // (ABORT), an interrupt, and memory running out.
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_PROTOCOL:
    case SQLITE_SCHEMA:
    case SQLITE_ABORT:
    case SQLITE_INTERRUPT:
    case SQLITE_NOMEM: return ErrorCode::TransactionAborted;
    // The data broke a rule of the schema (PRIMARY KEY, UNIQUE, CHECK, NOT NULL,
    // FOREIGN KEY). Redoing the same work gives the same answer.
    case SQLITE_CONSTRAINT: return ErrorCode::Constraint;
    // The database file itself cannot be used right now: it cannot be opened, reading
    // or writing it failed, it is not a database, it is damaged, or the disk is full.
    // This is the embedded equivalent of a broken connection: the caller stops, lets
    // an operator (or time) fix the storage, and redoes the work.
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
    case SQLITE_FULL: return ErrorCode::Connection;
    // Everything else is about the statement or the database's permissions: syntax, a
    // missing table or column, type mismatch, misuse, a value too big, a read-only file
    // (SQLITE_READONLY), a denied authorisation. Redoing it gives the same answer.
    default: return ErrorCode::Query;
  }
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
