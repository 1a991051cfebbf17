// The one table of store errors (stores/store_errors.hpp, docs/store-errors.md): which
// SQLSTATE classes and SQLite result codes are retried, stop the consumer or dead-letter
// one event, with a code the table does not list stopping. Every PostgreSQL class of the
// server's list (Appendix A) by a code of it, and SQLite's codes by name and by real
// statements on an in-memory store. Through the PostgreSQL server and the consumer:
// tests/integration/store_error_outcomes_test.cpp.
#include <sqlite3.h>

#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "idem/error.hpp"
#include "idem/store.hpp"
#include "stores/postgres/pg_connection.hpp"
#include "stores/sqlite/sqlite_error.hpp"
#include "stores/store_errors.hpp"

namespace idem {
namespace store_error_table_test {

using enum StoreErrorOutcome;

struct Case {
  std::string_view code;
  StoreErrorOutcome outcome;
};

/// The Error the PostgreSQL store throws for `sqlstate` on a live connection.
Error postgres_error(std::string_view sqlstate) {
  return {detail::pg::classify_sqlstate(sqlstate), ErrorSource::Postgres, "x",
          std::string(sqlstate)};
}

TEST(StoreErrorTable, RetriedRowsAreTransientAndNoOtherRowIs) {
  for (const auto& rule : detail::postgres_error_rules()) {
    EXPECT_EQ(Error(rule.code, ErrorSource::Postgres, "x").transient(), rule.outcome == Retry)
        << rule.key;
  }
  for (const auto& rule : detail::sqlite_error_rules()) {
    EXPECT_EQ(Error(rule.code, ErrorSource::Sqlite, "x").transient(), rule.outcome == Retry)
        << rule.key;
  }
}

// One code of every class PostgreSQL lists, and the codes a class treats apart.
TEST(StoreErrorTable, EveryPostgresClassIsRetriedStoppedOrDeadLettered) {
  const std::vector<Case> cases = {
      {"00000", Stop},
      {"01000", Stop},
      {"02000", Stop},
      {"03000", Stop},
      {"08000", Retry},
      {"08006", Retry},
      {"09000", Stop},
      {"0A000", Stop},
      {"0B000", Stop},
      {"0F000", Stop},
      {"0L000", Stop},
      {"0P000", Stop},
      {"0Z000", Stop},
      {"20000", DeadLetter},
      {"21000", DeadLetter},
      {"22000", DeadLetter},
      {"22P02", DeadLetter},
      {"22001", DeadLetter},
      {"22012", DeadLetter},
      {"23000", DeadLetter},
      {"23505", DeadLetter},
      {"23514", DeadLetter},
      {"24000", Stop},
      {"25000", Stop},
      {"25006", Stop},
      {"25P02", Stop},
      {"25P03", Retry},
      {"25P04", Retry},
      {"26000", Stop},
      {"27000", Stop},
      {"28000", Stop},
      {"2B000", Stop},
      {"2BP01", Stop},
      {"2D000", Stop},
      {"2F000", Stop},
      {"2F005", Stop},
      {"34000", Stop},
      {"38000", Stop},
      {"39000", Stop},
      {"3B000", Stop},
      {"3D000", Stop},
      {"3F000", Stop},
      {"40000", Retry},
      {"40001", Retry},
      {"40P01", Retry},
      {"42000", Stop},
      {"42601", Stop},
      {"42P01", Stop},
      {"42501", Stop},
      {"44000", DeadLetter},
      {"53000", Retry},
      {"53100", Retry},
      {"53200", Retry},
      {"53300", Retry},
      {"54000", Stop},
      {"54001", Stop},
      {"55000", Stop},
      {"55006", Stop},
      {"55P03", Retry},
      {"57000", Stop},
      {"57014", Retry},
      {"57P01", Retry},
      {"57P02", Retry},
      {"57P03", Retry},
      {"57P04", Retry},
      {"57P05", Retry},
      {"58000", Retry},
      {"58030", Retry},
      {"58P01", Retry},
      {"72000", Retry},
      {"F0000", Stop},
      {"F0001", Stop},
      {"HV000", Stop},
      {"HV001", Retry},
      {"HV00N", Retry},
      {"HV00R", Stop},
      {"P0000", DeadLetter},
      {"P0001", DeadLetter},
      {"P0002", DeadLetter},
      {"P0003", DeadLetter},
      {"P0004", DeadLetter},
      {"XX000", Stop},
      {"XX001", Stop},
      {"XX002", Stop},
      // Codes no class of PostgreSQL's list holds: a newer server's, an extension's.
      {"ZZ999", Stop},
      {"5Q000", Stop},
      {"", Stop},
  };
  for (const Case& c : cases) {
    const Error e = postgres_error(c.code);
    EXPECT_EQ(to_string(effect_error_outcome(e)), to_string(c.outcome)) << c.code;
    EXPECT_EQ(e.transient(), c.outcome == Retry) << c.code;
    EXPECT_EQ(scope_of(e) == ErrorScope::Permanent, c.outcome == Stop) << c.code;
    EXPECT_EQ(scope_of(e) == ErrorScope::Statement, c.outcome == DeadLetter) << c.code;
  }
  // The codes the table gives: a constraint is Constraint, the server's own fault Internal,
  // a timeout Timeout, a lost session Connection.
  EXPECT_EQ(detail::pg::classify_sqlstate("23505"), ErrorCode::Constraint);
  EXPECT_EQ(detail::pg::classify_sqlstate("44000"), ErrorCode::Constraint);
  EXPECT_EQ(detail::pg::classify_sqlstate("XX001"), ErrorCode::Internal);
  EXPECT_EQ(detail::pg::classify_sqlstate("57014"), ErrorCode::Timeout);
  EXPECT_EQ(detail::pg::classify_sqlstate("57P01"), ErrorCode::Connection);
  EXPECT_EQ(detail::pg::classify_sqlstate("58030"), ErrorCode::TransactionAborted);
  EXPECT_EQ(detail::pg::classify_sqlstate("22P02"), ErrorCode::Query);
  EXPECT_EQ(detail::pg::classify_sqlstate("ZZ999"), ErrorCode::Query);
}

// The scope is what the consumer, `idem config test` and `idem config check` act on: one
// mapping to an outcome (effect_error_outcome) for all three.
TEST(StoreErrorTable, EachScopeHasOneOutcome) {
  const auto scope = [](ErrorCode code, ErrorSource source, std::string detail) {
    return scope_of(Error(code, source, "x", std::move(detail)));
  };
  EXPECT_EQ(scope(ErrorCode::Connection, ErrorSource::Postgres, "08006"), ErrorScope::Connection);
  EXPECT_EQ(scope(ErrorCode::Timeout, ErrorSource::Postgres, "57014"), ErrorScope::Connection);
  EXPECT_EQ(scope(ErrorCode::TransactionAborted, ErrorSource::Postgres, "40001"),
            ErrorScope::Transaction);
  EXPECT_EQ(scope(ErrorCode::TransactionAborted, ErrorSource::Sqlite, "SQLITE_BUSY"),
            ErrorScope::Transaction);
  EXPECT_EQ(scope(ErrorCode::InDoubt, ErrorSource::Postgres, ""), ErrorScope::InDoubt);
  EXPECT_EQ(scope(ErrorCode::Constraint, ErrorSource::Postgres, "23505"), ErrorScope::Statement);
  EXPECT_EQ(scope(ErrorCode::Constraint, ErrorSource::Sqlite, "SQLITE_CONSTRAINT_UNIQUE"),
            ErrorScope::Statement);
  EXPECT_EQ(scope(ErrorCode::Query, ErrorSource::Postgres, "42P01"), ErrorScope::Permanent);
  EXPECT_EQ(scope(ErrorCode::Query, ErrorSource::Postgres, "ZZ999"), ErrorScope::Permanent);
  // A handler's own error (not the store's) is its event's.
  EXPECT_EQ(scope(ErrorCode::InvalidArgument, ErrorSource::Http, ""), ErrorScope::Statement);
  const std::vector<std::pair<ErrorScope, StoreErrorOutcome>> outcomes = {
      {ErrorScope::Statement, DeadLetter},
      {ErrorScope::Transaction, Retry},
      {ErrorScope::Connection, Retry},
      {ErrorScope::InDoubt, Retry},
      {ErrorScope::Permanent, Stop}};
  const std::vector<Error> samples = {
      Error(ErrorCode::Constraint, ErrorSource::Postgres, "x", "23505"),
      Error(ErrorCode::TransactionAborted, ErrorSource::Postgres, "x", "40001"),
      Error(ErrorCode::Connection, ErrorSource::Postgres, "x", "08006"),
      Error(ErrorCode::InDoubt, ErrorSource::Postgres, "x", ""),
      Error(ErrorCode::Query, ErrorSource::Postgres, "x", "42P01")};
  for (std::size_t i = 0; i < samples.size(); ++i) {
    EXPECT_EQ(scope_of(samples[i]), outcomes[i].first);
    EXPECT_EQ(to_string(effect_error_outcome(samples[i])), to_string(outcomes[i].second))
        << to_string(outcomes[i].first);
  }
}

TEST(StoreErrorTable, AStoreErrorThrownAsPermanentUnderARetriedCodeStops) {
  // 08P01 on a live connection: the server refused our Bind (Connection::classify makes
  // it InvalidArgument). The statement's parameters are wrong for every event.
  EXPECT_EQ(to_string(effect_error_outcome(
                Error(ErrorCode::InvalidArgument, ErrorSource::Postgres, "bind", "08P01"))),
            "stop");
  // A store error without a SQLSTATE (idem refused the call itself) stops too.
  EXPECT_EQ(to_string(effect_error_outcome(
                Error(ErrorCode::InvalidArgument, ErrorSource::Sqlite, "placeholder ':x'"))),
            "stop");
  // An error that is not the store's is the handler's business: dead-lettered unless
  // transient, as before.
  EXPECT_EQ(to_string(effect_error_outcome(Error(ErrorCode::Query, ErrorSource::Http, "x"))),
            "dead-letter");
  EXPECT_EQ(to_string(effect_error_outcome(Error(ErrorCode::Timeout, ErrorSource::Http, "x"))),
            "retry");
}

TEST(StoreErrorTable, SqliteCodesByName) {
  struct SqliteCase {
    int code;
    StoreErrorOutcome outcome;
  };
  const std::vector<SqliteCase> cases = {
      {SQLITE_BUSY, Retry},
      {SQLITE_BUSY_SNAPSHOT, Retry},
      {SQLITE_BUSY_TIMEOUT, Retry},
      {SQLITE_LOCKED, Retry},
      {SQLITE_LOCKED_SHAREDCACHE, Retry},
      {SQLITE_PROTOCOL, Retry},
      {SQLITE_SCHEMA, Retry},
      {SQLITE_ABORT_ROLLBACK, Retry},
      {SQLITE_INTERRUPT, Retry},
      {SQLITE_NOMEM, Retry},
      {SQLITE_READONLY_RECOVERY, Retry},
      {SQLITE_READONLY_CANTLOCK, Retry},
      {SQLITE_CANTOPEN, Retry},
      {SQLITE_IOERR, Retry},
      {SQLITE_IOERR_FSYNC, Retry},
      {SQLITE_IOERR | (99 << 8), Retry},  // an extended code this build has no name for
      {SQLITE_NOTADB, Retry},
      {SQLITE_CORRUPT, Retry},
      {SQLITE_FULL, Retry},
      {SQLITE_CONSTRAINT, DeadLetter},
      {SQLITE_CONSTRAINT_UNIQUE, DeadLetter},
      {SQLITE_CONSTRAINT_TRIGGER, DeadLetter},
      {SQLITE_CONSTRAINT_DATATYPE, DeadLetter},
      {SQLITE_CONSTRAINT | (99 << 8), DeadLetter},
      {SQLITE_MISMATCH, DeadLetter},
      {SQLITE_ERROR, Stop},
      {SQLITE_ERROR_RETRY, Stop},
      {SQLITE_INTERNAL, Stop},
      {SQLITE_PERM, Stop},
      {SQLITE_READONLY, Stop},
      {SQLITE_READONLY_DBMOVED, Stop},
      {SQLITE_TOOBIG, Stop},
      {SQLITE_RANGE, Stop},
      {SQLITE_MISUSE, Stop},
      {SQLITE_AUTH, Stop},
      {SQLITE_FORMAT, Stop},
      {SQLITE_NOLFS, Stop},
      {SQLITE_NOTFOUND, Stop},
      {SQLITE_EMPTY, Stop},
  };
  for (const SqliteCase& c : cases) {
    const std::string name = detail::sqlite::code_name(c.code);
    const Error e(detail::sqlite::classify(c.code), ErrorSource::Sqlite, "x", name);
    EXPECT_EQ(to_string(effect_error_outcome(e)), to_string(c.outcome)) << name;
    EXPECT_EQ(e.transient(), c.outcome == Retry) << name;
  }
}

// Real statements on SQLite, each in a transaction of its own, through the store API.
TEST(StoreErrorTable, SqliteStatementsThatFailAreRetriedStoppedOrDeadLettered) {
  auto store = open_store("sqlite://:memory:");
  {
    auto tx = store->begin();
    for (const char* sql : {
             "CREATE TABLE account (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, "
             "balance INTEGER NOT NULL CHECK (balance >= 0))",
             "CREATE TABLE strict_amount (cents INTEGER) STRICT",
             "CREATE TABLE audited (n INTEGER)",
             "CREATE TRIGGER refuse_negative BEFORE INSERT ON audited WHEN NEW.n < 0 BEGIN "
             "SELECT RAISE(ABORT, 'negative'); END",
             "INSERT INTO account (id, name, balance) VALUES (1, 'a', 0)",
         }) {
      static_cast<void>(tx->execute(sql));
    }
    tx->commit();
  }
  struct Statement {
    std::string_view sql;
    std::string_view code;
    StoreErrorOutcome outcome;
  };
  const std::vector<Statement> cases = {
      {"INSERT INTO account (id, name, balance) VALUES (1, 'b', 0)", "SQLITE_CONSTRAINT_PRIMARYKEY",
       DeadLetter},
      {"INSERT INTO account (id, name, balance) VALUES (2, 'a', 0)", "SQLITE_CONSTRAINT_UNIQUE",
       DeadLetter},
      {"INSERT INTO account (id, name, balance) VALUES (2, NULL, 0)", "SQLITE_CONSTRAINT_NOTNULL",
       DeadLetter},
      {"UPDATE account SET balance = balance - 1 WHERE id = 1", "SQLITE_CONSTRAINT_CHECK",
       DeadLetter},
      {"INSERT INTO strict_amount (cents) VALUES ('12.5x')", "SQLITE_CONSTRAINT_DATATYPE",
       DeadLetter},
      {"INSERT INTO audited (n) VALUES (-1)", "SQLITE_CONSTRAINT_TRIGGER", DeadLetter},
      {"INSERT INTO account (id, name, balance) VALUES ('x', 'c', 0)", "SQLITE_MISMATCH",
       DeadLetter},
      {"SELECT zeroblob(2000000000)", "SQLITE_TOOBIG", Stop},
      {"SELECT json('{')", "SQLITE_ERROR", Stop},
      {"SELEC 1", "SQLITE_ERROR", Stop},
      {"SELECT * FROM no_such_table", "SQLITE_ERROR", Stop},
  };
  for (const Statement& c : cases) {
    auto tx = store->begin();
    try {
      static_cast<void>(tx->execute(c.sql));
      ADD_FAILURE() << c.sql << " ran";
    } catch (const Error& e) {
      EXPECT_EQ(e.detail(), c.code) << c.sql << ": " << e.what();
      EXPECT_EQ(to_string(effect_error_outcome(e)), to_string(c.outcome))
          << c.sql << ": " << e.what();
    }
    tx->rollback();
  }
}

TEST(StoreErrorTable, AStopOnAnInternalErrorSaysToReadTheServersLog) {
  const Error corrupted(ErrorCode::Internal, ErrorSource::Postgres,
                        "ERROR: invalid page in block 7 (SQLSTATE XX001)", "XX001");
  EXPECT_NE(std::string(detail::stopping_error("idem consumer", corrupted).what())
                .find("read the server's log"),
            std::string::npos);
  const Error unlisted(ErrorCode::Query, ErrorSource::Postgres, "ERROR: x (SQLSTATE ZZ999)",
                       "ZZ999");
  EXPECT_NE(std::string(detail::stopping_error("idem consumer", unlisted).what())
                .find("no event is to blame"),
            std::string::npos);
}

}  // namespace store_error_table_test
}  // namespace idem
