// Deferred INSERTs of one text merged into multi-row statements on PostgreSQL:
// the rows, their order and their values are what single statements would have written;
// a FOR EACH STATEMENT trigger counts how many statements the server ran. Needs
// IDEM_TEST_PG_DSN (scripts/with-postgres.sh sets it).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/error.hpp"
#include "idem/store.hpp"
#include "stores/postgres/pg_insert_merge.hpp"
#include "support/postgres_test_db.hpp"

namespace idem::test {
namespace pg_insert_merge_test {

constexpr const char* kInsertM = "INSERT INTO m (a, b, u) VALUES ($1, $2, $3::uuid)";
constexpr const char* kInsertN = "INSERT INTO n (a) VALUES ($1)";

class PgInsertMergeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    IDEM_FRESH_POSTGRES_URL(url);
    store_ = open_store(url);
    auto tx = store_->begin();
    for (const char* sql : {
             "CREATE TABLE statements (tbl text PRIMARY KEY, n int NOT NULL)",
             "CREATE FUNCTION count_statement() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
             "INSERT INTO statements VALUES (TG_TABLE_NAME, 1) "
             "ON CONFLICT (tbl) DO UPDATE SET n = statements.n + 1; RETURN NULL; END $$",
             "CREATE TABLE m (seq bigserial PRIMARY KEY, a int NOT NULL UNIQUE, b text, u uuid)",
             "CREATE TABLE n (seq bigserial PRIMARY KEY, a int NOT NULL)",
             "CREATE TRIGGER m_statements AFTER INSERT ON m FOR EACH STATEMENT "
             "EXECUTE FUNCTION count_statement()",
             "CREATE TRIGGER n_statements AFTER INSERT ON n FOR EACH STATEMENT "
             "EXECUTE FUNCTION count_statement()",
         }) {
      tx->execute(sql);
    }
    tx->commit();
  }

  std::int64_t scalar(const std::string& sql) {
    auto tx = store_->begin();
    const Rows rows = tx->execute(sql);
    tx->rollback();
    return rows.empty() || rows[0].is_null(0) ? 0 : rows[0].int64(0);
  }
  std::int64_t statements(const char* table) {
    return scalar(fmt::format("SELECT n FROM statements WHERE tbl = '{}'", table));
  }

  std::unique_ptr<Store> store_;
};

TEST_F(PgInsertMergeTest, ConsecutiveInsertsOfOneTextBecomeFewStatementsInIssueOrder) {
  constexpr int kRows = 100;
  {
    auto tx = store_->begin();
    for (int i = 0; i < kRows; ++i) {
      // Every third b is NULL: a NULL parameter keeps its place in the merged statement.
      const std::string b = fmt::format("b{}", i);
      if (i % 3 == 0) {
        tx->execute_deferred(kInsertM, i, nullptr,
                             fmt::format("00000000-0000-7000-8000-{:012}", i));
      } else {
        tx->execute_deferred(kInsertM, i, b, fmt::format("00000000-0000-7000-8000-{:012}", i));
      }
    }
    tx->commit();
  }
  EXPECT_EQ(scalar("SELECT count(*) FROM m"), kRows);
  EXPECT_EQ(statements("m"), static_cast<std::int64_t>(detail::pg::merge_chunks(kRows, 3).size()));
  // seq follows the rows' order in the statements: the issue order.
  EXPECT_EQ(scalar("SELECT count(*) FROM m WHERE seq <> a + 1"), 0);
  EXPECT_EQ(scalar("SELECT count(*) FROM m WHERE (a % 3 = 0) <> (b IS NULL)"), 0);
  EXPECT_EQ(scalar("SELECT count(*) FROM m WHERE b IS NOT NULL AND b <> 'b' || a"), 0);
  EXPECT_EQ(scalar("SELECT count(*) FROM m WHERE u <> "
                   "('00000000-0000-7000-8000-' || lpad(a::text, 12, '0'))::uuid"),
            0);
}

TEST_F(PgInsertMergeTest, InterleavedTextsAreNotMergedNorReordered) {
  constexpr int kEach = 10;
  {
    auto tx = store_->begin();
    for (int i = 0; i < kEach; ++i) {
      tx->execute_deferred(kInsertM, i, "x", nullptr);
      tx->execute_deferred(kInsertN, i);
    }
    tx->commit();
  }
  EXPECT_EQ(statements("m"), kEach);
  EXPECT_EQ(statements("n"), kEach);
  EXPECT_EQ(scalar("SELECT count(*) FROM m"), kEach);
  EXPECT_EQ(scalar("SELECT count(*) FROM n"), kEach);
}

TEST_F(PgInsertMergeTest, AStatementWhoseRowsSeeEachOtherRunsOneByOne) {
  // Each row's subquery sees the rows before it only if each is its own statement.
  {
    auto tx = store_->begin();
    for (int i = 0; i < 5; ++i) {
      tx->execute_deferred("INSERT INTO n (a) VALUES ((SELECT count(*) FROM n) + $1)", 0);
    }
    tx->commit();
  }
  auto tx = store_->begin();
  const Rows rows = tx->execute("SELECT string_agg(a::text, ',' ORDER BY seq) FROM n");
  EXPECT_EQ(rows[0].text(0), "0,1,2,3,4");
  EXPECT_EQ(tx->execute("SELECT n FROM statements WHERE tbl = 'n'")[0].int64(0), 5);
}

TEST_F(PgInsertMergeTest, ARunOverTheParameterLimitIsCutIntoStatementsUnderIt) {
  // 40 parameters per row, 2,000 rows: 80,000 parameters, over the protocol's 65,535 (and
  // a statement of 2,000 rows would be over what libpq reads of its DESCRIBE).
  constexpr int kColumns = 40;
  constexpr int kRows = 2000;
  std::string columns;
  std::string placeholders;
  for (int c = 1; c <= kColumns; ++c) {
    columns += fmt::format("{}c{} int", c == 1 ? "" : ", ", c);
    placeholders += fmt::format("{}${}", c == 1 ? "" : ", ", c);
  }
  {
    auto tx = store_->begin();
    tx->execute(fmt::format("CREATE TABLE w ({})", columns));
    tx->commit();
  }
  std::string names;
  for (int c = 1; c <= kColumns; ++c) names += fmt::format("{}c{}", c == 1 ? "" : ", ", c);
  const std::string sql = fmt::format("INSERT INTO w ({}) VALUES ({})", names, placeholders);
  {
    auto tx = store_->begin();
    std::vector<Param> row(kColumns, Param(0));
    for (int r = 0; r < kRows; ++r) {
      for (int c = 0; c < kColumns; ++c) row[static_cast<std::size_t>(c)] = Param(r * 100 + c);
      tx->execute_deferred_params(sql, row);
    }
    EXPECT_NO_THROW(tx->sync());
    tx->commit();
  }
  EXPECT_EQ(scalar("SELECT count(*) FROM w"), kRows);
  EXPECT_EQ(scalar("SELECT count(*) FROM w WHERE c40 <> c1 + 39 OR c1 % 100 <> 0"), 0);
  EXPECT_EQ(scalar("SELECT count(DISTINCT c1) FROM w"), kRows);
}

TEST_F(PgInsertMergeTest, ABadRowFailsItsMergedStatementAndTheTransaction) {
  auto tx = store_->begin();
  for (int i = 0; i < 50; ++i) tx->execute_deferred(kInsertM, i, "x", nullptr);
  tx->execute_deferred(kInsertM, 7, "again", nullptr);  // a unique violation
  for (int i = 50; i < 60; ++i) tx->execute_deferred(kInsertM, i, "x", nullptr);
  try {
    tx->sync();
    FAIL() << "sync() did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Constraint) << e.what();
    EXPECT_NE(std::string(e.what()).find("INSERT INTO m (a, b, u) VALUES ($1, $2, $3::uuid)"),
              std::string::npos)
        << "the message should name the statement as issued: " << e.what();
  }
  EXPECT_THROW(tx->commit(), Error);
  EXPECT_EQ(scalar("SELECT count(*) FROM m"), 0);
}

TEST_F(PgInsertMergeTest, DoNothingSkipsADuplicateInsideOneMergedStatement) {
  constexpr const char* kUpsert = "INSERT INTO m (a, b) VALUES ($1, $2) ON CONFLICT (a) DO NOTHING";
  {
    auto tx = store_->begin();
    tx->execute_deferred(kUpsert, 1, "first");
    tx->execute_deferred(kUpsert, 2, "first");
    tx->execute_deferred(kUpsert, 1, "second");
    tx->execute_deferred(kUpsert, 3, "first");
    tx->commit();
  }
  EXPECT_EQ(scalar("SELECT count(*) FROM m"), 3);
  EXPECT_EQ(scalar("SELECT count(*) FROM m WHERE b = 'second'"), 0);
  EXPECT_LT(statements("m"), 4);
}

TEST_F(PgInsertMergeTest, ASavepointEndsARun) {
  {
    auto tx = store_->begin();
    tx->execute_deferred(kInsertN, 1);
    tx->execute_deferred(kInsertN, 2);
    {
      Savepoint sp(*tx);
      tx->execute_deferred(kInsertN, 3);
      tx->execute_deferred(kInsertN, 4);
      sp.rollback();
    }
    tx->execute_deferred(kInsertN, 5);
    {
      Savepoint sp(*tx);
      tx->execute_deferred(kInsertN, 6);
      tx->sync();  // the savepoint and 6 reach the server
      tx->execute_deferred(kInsertN, 7);
      sp.rollback();
    }
    {
      Savepoint sp(*tx);
      tx->execute_deferred(kInsertN, 8);
      sp.release();
    }
    tx->execute_deferred(kInsertN, 9);
    tx->commit();
  }
  auto tx = store_->begin();
  const Rows rows = tx->execute("SELECT string_agg(a::text, ',' ORDER BY seq) FROM n");
  EXPECT_EQ(rows[0].text(0), "1,2,5,8,9");
}

}  // namespace pg_insert_merge_test
}  // namespace idem::test
