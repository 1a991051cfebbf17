// Which store errors stop a consumer or relay (stores/store_errors.hpp), what they stop
// with, and the schema check they run at start, on SQLite (no server needed).
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/error.hpp"
#include "idem/store.hpp"
#include "stores/store_errors.hpp"

namespace idem {
namespace store_errors_test {

using detail::refused_for_good;

TEST(StoreErrors, OnlyPermanentStoreErrorsAreRefusedForGood) {
  const Error missing(ErrorCode::Query, ErrorSource::Postgres,
                      "ERROR: relation \"processed_event\" does not exist (SQLSTATE 42P01)",
                      "42P01");
  EXPECT_EQ(refused_for_good(missing), &missing);
  EXPECT_NE(refused_for_good(Error(ErrorCode::Schema, ErrorSource::Sqlite, "no schema")), nullptr);
  EXPECT_NE(refused_for_good(Error(ErrorCode::Constraint, ErrorSource::Sqlite, "unique")), nullptr);
  // Redoing may help: retried, never a stop.
  for (const ErrorCode code : {ErrorCode::Connection, ErrorCode::TransactionAborted,
                               ErrorCode::Timeout, ErrorCode::InDoubt}) {
    EXPECT_EQ(refused_for_good(Error(code, ErrorSource::Postgres, "x")), nullptr)
        << to_string(code);
  }
  // Not the store's: a handler's HTTP error or a plain exception is someone else's call.
  EXPECT_EQ(refused_for_good(Error(ErrorCode::Query, ErrorSource::Http, "x")), nullptr);
  EXPECT_EQ(refused_for_good(std::runtime_error("x")), nullptr);
}

TEST(StoreErrors, ASqliteTableThatIsMissingIsRefusedForGood) {
  auto store = open_store("sqlite://:memory:");
  auto tx = store->begin();
  try {
    static_cast<void>(tx->execute("SELECT count(*) FROM processed_event"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(refused_for_good(e), &e) << e.what();
    EXPECT_NE(
        std::string(detail::stopping_error("idem consumer", e).what()).find("run `idem migrate`"),
        std::string::npos);
  }
}

TEST(StoreErrors, TheStoppingErrorNamesTheCauseAndWhatToDo) {
  const Error missing(ErrorCode::Query, ErrorSource::Postgres,
                      "postgres: INSERT ...: ERROR: relation \"outbox\" does not exist "
                      "(SQLSTATE 42P01)",
                      "42P01");
  const Error e = detail::stopping_error("idem relay", missing);
  EXPECT_EQ(e.code(), ErrorCode::Query);
  EXPECT_EQ(e.source(), ErrorSource::Postgres);
  EXPECT_EQ(e.detail(), "42P01");
  EXPECT_EQ(std::string(e.what()),
            "idem relay: stopping: the store refused a statement for good: postgres: INSERT ...: "
            "ERROR: relation \"outbox\" does not exist (SQLSTATE 42P01); the schema is not the "
            "one this idem needs; run `idem migrate`, then start again");

  const Error denied(ErrorCode::Query, ErrorSource::Postgres, "permission denied", "42501");
  EXPECT_NE(std::string(detail::stopping_error("idem consumer", denied).what())
                .find("grant the privileges"),
            std::string::npos);
  const Error readonly(ErrorCode::Query, ErrorSource::Sqlite,
                       "attempt to write a readonly database", "SQLITE_READONLY");
  EXPECT_NE(std::string(detail::stopping_error("idem consumer", readonly).what())
                .find("make the database file writable"),
            std::string::npos);
}

TEST(StoreErrors, StartRefusesAStoreNotMigratedToThisIdemsVersion) {
  auto store = open_store("sqlite://:memory:");
  try {
    detail::require_idem_schema(*store, "idem relay");
    ADD_FAILURE() << "an unmigrated store was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Schema);
    EXPECT_EQ(std::string(e.what()),
              "idem relay: the store has no idem schema (it was never migrated); run `idem "
              "migrate` first, then start again");
  }

  const MigrationReport report = store->migrate();
  EXPECT_EQ(report.to_version, detail::known_idem_schema_version(Backend::Sqlite));
  EXPECT_NO_THROW(detail::require_idem_schema(*store, "idem relay"));

  const int known = report.to_version;
  {
    auto tx = store->begin();
    static_cast<void>(tx->execute(
        "DELETE FROM idem_schema_migrations WHERE migration_set = 'idem' AND version = $1", known));
    tx->commit();
  }
  try {
    detail::require_idem_schema(*store, "idem consumer");
    ADD_FAILURE() << "an older schema was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Schema);
    EXPECT_NE(std::string(e.what()).find(
                  fmt::format("at version {}, older than the version {} this idem needs; run "
                              "`idem migrate` first",
                              known - 1, known)),
              std::string::npos)
        << e.what();
  }

  {
    auto tx = store->begin();
    static_cast<void>(tx->execute(
        "INSERT INTO idem_schema_migrations (migration_set, version, name, applied_at) VALUES "
        "('idem', $1, 'from_a_newer_idem', '2030-01-01T00:00:00Z'), ('idem', $2, 'back', "
        "'2030-01-01T00:00:00Z')",
        known + 1, known));
    tx->commit();
  }
  try {
    detail::require_idem_schema(*store, "idem consumer");
    ADD_FAILURE() << "a newer schema was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Schema);
    EXPECT_NE(std::string(e.what()).find(fmt::format(
                  "at version {}, newer than the version {} this idem knows: it was migrated by "
                  "a newer idem",
                  known + 1, known)),
              std::string::npos)
        << e.what();
  }
}

}  // namespace store_errors_test
}  // namespace idem
