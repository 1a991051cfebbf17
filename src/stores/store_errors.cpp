#include "stores/store_errors.hpp"

#include <string>

#include <fmt/format.h>

#include "stores/migration.hpp"

namespace idem::detail {

namespace {

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
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
  // 25006 read_only_sql_transaction: a standby, or default_transaction_read_only.
  if (d == "25006") return "the server is read-only (a standby?); point store.url at the primary";
  return "retrying cannot fix it; fix the database, then start again";
}

}  // namespace

ErrorSource error_source(Backend backend) noexcept {
  return backend == Backend::Postgres ? ErrorSource::Postgres : ErrorSource::Sqlite;
}

void require_table(Store& store, Transaction& tx, std::string_view table, const char* message) {
  const char* sql = store.backend() == Backend::Postgres
                        ? "SELECT count(*) FROM pg_catalog.pg_tables WHERE tablename = $1 AND "
                          "schemaname = ANY (current_schemas(false))"
                        : "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = $1";
  if (tx.execute(sql, std::string(table))[0].int64(0) == 0)
    throw Error(ErrorCode::Schema, error_source(store.backend()), message);
}

bool statement_refused_for_good(const Error& e) noexcept {
  if (e.transient()) return false;
  const std::string& d = e.detail();
  if (e.source() == ErrorSource::Postgres) {
    return d.starts_with("42") || d == "3F000" || d == "25006";
  }
  if (e.source() != ErrorSource::Sqlite) return false;
  const std::string_view what = e.what();
  return d.starts_with("SQLITE_READONLY") || d == "SQLITE_PERM" || d == "SQLITE_AUTH" ||
         contains(what, "no such table") || contains(what, "no such column") ||
         contains(what, "no such function") || contains(what, "syntax error");
}

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
