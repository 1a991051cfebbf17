// Which deferred INSERTs the PostgreSQL store merges into multi-row statements, the
// merged text, and the chunks a run is cut into (under the protocol's 65,535 parameters
// per statement, and under what libpq accepts in a DESCRIBE's answer). No server: the store's
// behaviour with one is in tests/integration/pg_insert_merge_test.cpp.
#include "stores/postgres/pg_insert_merge.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

namespace idem::detail::pg {
namespace pg_insert_merge_test {

TEST(PgInsertMerge, TheCountHandlersInsertMerges) {
  const auto shape = parse_mergeable_insert(
      "INSERT INTO effect_log(consumer_group, event_id, topic, kafka_partition, kafka_offset) "
      "VALUES ($1, $2, $3, $4, $5)");
  ASSERT_TRUE(shape);
  EXPECT_EQ(shape->params, 5u);
  EXPECT_EQ(merged_insert_sql(*shape, 2),
            "INSERT INTO effect_log(consumer_group, event_id, topic, kafka_partition, "
            "kafka_offset) VALUES ($1, $2, $3, $4, $5), ($6, $7, $8, $9, $10)");
}

TEST(PgInsertMerge, CastsConflictTargetsAndQuotedNamesAreKept) {
  const auto shape = parse_mergeable_insert(
      "insert into \"My Schema\".t AS x (a, \"B\") values ($2::uuid, $1::double precision) "
      "ON CONFLICT (a) DO NOTHING;");
  ASSERT_TRUE(shape);
  EXPECT_EQ(shape->params, 2u);
  EXPECT_EQ(merged_insert_sql(*shape, 2),
            "insert into \"My Schema\".t AS x (a, \"B\") values ($2::uuid, $1::double "
            "precision), ($4::uuid, $3::double precision) ON CONFLICT (a) DO NOTHING");
  EXPECT_TRUE(parse_mergeable_insert(
      "INSERT INTO t VALUES ($1, $2::text[]) ON CONFLICT ON CONSTRAINT t_pkey DO NOTHING"));
}

TEST(PgInsertMerge, StatementsWhoseRowsCouldSeeEachOtherDoNotMerge) {
  for (const char* sql : {
           // a subquery would not see the rows inserted earlier by the same statement
           "INSERT INTO t(a, b) VALUES ((SELECT max(a) FROM t), $1)",
           "INSERT INTO t(a) VALUES (nextval('s') + $1)",  // an expression
           "INSERT INTO t(a, b) VALUES ($1, 'x')",         // a literal
           "INSERT INTO t(a, b) VALUES ($1, now())",       // a function
           "INSERT INTO t(a) VALUES ($1), ($2)",           // several rows already
           "INSERT INTO t(a) SELECT $1",
           "INSERT INTO t(a) VALUES ($1) RETURNING a",
           // DO UPDATE refuses to change one row twice in a statement
           "INSERT INTO t(a) VALUES ($1) ON CONFLICT (a) DO UPDATE SET a = excluded.a",
           "INSERT INTO t(a) VALUES ($1) -- comment",
           "WITH x AS (SELECT 1) INSERT INTO t(a) VALUES ($1)",
           "UPDATE t SET a = $1",
           "INSERT INTO t(a, b) VALUES ($1, $3)",  // $2 unused: rows would not line up
           "INSERT INTO t(a) VALUES ($1)); DROP TABLE t; --",
           "INSERT INTO t(a) VALUES ($1); INSERT INTO t(a) VALUES ($2)",
       }) {
    EXPECT_FALSE(parse_mergeable_insert(sql)) << sql;
  }
}

TEST(PgInsertMerge, ARepeatedPlaceholderIsRenumberedPerRow) {
  const auto shape = parse_mergeable_insert("INSERT INTO t(a, b, c) VALUES ($1, $2, $1)");
  ASSERT_TRUE(shape);
  EXPECT_EQ(shape->params, 2u);
  EXPECT_EQ(merged_insert_sql(*shape, 3),
            "INSERT INTO t(a, b, c) VALUES ($1, $2, $1), ($3, $4, $3), ($5, $6, $5)");
}

TEST(PgInsertMerge, ChunksArePowersOfTwoWithinTheParameterLimit) {
  EXPECT_EQ(merge_chunks(1000, 5), (std::vector<std::size_t>{512, 256, 128, 64, 32, 8}));
  EXPECT_EQ(merge_chunks(1, 5), (std::vector<std::size_t>{1}));
  EXPECT_EQ(merge_chunks(3, 5), (std::vector<std::size_t>{2, 1}));
  for (const std::size_t per_row : {1u, 5u, 40u, 1000u, 40000u, 65535u}) {
    for (const std::size_t rows : {1u, 2u, 7u, 1000u, 2000u, 10000u}) {
      const auto chunks = merge_chunks(rows, per_row);
      EXPECT_EQ(std::accumulate(chunks.begin(), chunks.end(), std::size_t{0}), rows);
      for (const std::size_t c : chunks) {
        EXPECT_TRUE(c == 1 || c * per_row <= kMaxMergedParams) << rows << "x" << per_row;
        EXPECT_EQ(c & (c - 1), 0u) << c;
      }
    }
  }
  // 40 parameters per row: 128 rows (5,120) fit, 256 (10,240) would not.
  EXPECT_EQ(merge_chunks(2000, 40).front(), 128u);
  static_assert(kMaxMergedParams * 4 + 6 <= 30000, "libpq's limit on a ParameterDescription");
}

}  // namespace pg_insert_merge_test
}  // namespace idem::detail::pg
