#pragma once
// The store contract: one typed GoogleTest suite that every dedup-store backend must
// pass. It pins down the behaviour the consumer loop relies on (IDEM-2, IDEM-3):
// marking, per-group scope, transactional visibility, rollback, batches, races between
// threads and between processes, savepoints, parameter binding, error classification
// and migrations.
//
// Instantiate it once per backend and binary, with a traits type from
// support/store_backends.hpp (or one of the same shape):
//
//   #include "support/store_contract.hpp"
//   INSTANTIATE_TYPED_TEST_SUITE_P(Sqlite, StoreContract,
//                                  ::testing::Types<idem::test::SqliteBackend>,
//                                  idem::test::BackendName);
//
// Every test gets a new, empty, migrated database (Backend::fresh_url()), so tests may
// create tables and never see each other's rows. The SQL used here is portable between
// SQLite and PostgreSQL on purpose.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <latch>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "idem/amount.hpp"
#include "idem/error.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "support/process.hpp"
#include "support/store_backends.hpp"

namespace idem::test {

/// The reference unit of work of the race tests: in one transaction, mark the event
/// and, only if this is the first time, apply the effect (add one to test_counter row 1);
/// commit. A transient error (lock timeout, serialization failure, broken connection)
/// redoes the whole transaction, as a real consumer does. Returns whether this call
/// applied the effect. (tests/children/store_child.cpp runs the same steps.)
inline bool process_once(Store& store, const Uuid& event_id, std::string_view group,
                         std::chrono::seconds give_up_after = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + give_up_after;
  for (;;) {
    try {
      auto tx = store.begin();
      const bool first = tx->mark_processed(event_id, group);
      if (first) tx->execute("UPDATE test_counter SET n = n + 1 WHERE id = 1");
      tx->commit();
      return first;
    } catch (const Error& e) {
      if (!e.transient() || std::chrono::steady_clock::now() > deadline) throw;
    }
  }
}

template <class Backend>
class StoreContract : public ::testing::Test {
 protected:
  static constexpr const char* kGroup = "billing-order-confirmed";

  void SetUp() override {
    url_ = Backend::fresh_url();
    if (this->IsSkipped() || this->HasFatalFailure()) return;
    ASSERT_FALSE(url_.empty()) << Backend::name << ": fresh_url() returned no URL";
    store_ = open_store(url_);
    // The reference system's tables (orders, billing_ledger) are the business tables
    // these tests write to, as a user's own MigrationSet would be.
    migrate_reference_system(*store_);
  }

  /// Another connection to the same database.
  [[nodiscard]] std::unique_ptr<Store> connect() const { return open_store(url_); }

  /// Runs one statement in its own committed transaction on `store`.
  template <class... Args>
  Rows run(Store& store, std::string_view sql, const Args&... args) {
    auto tx = store.begin();
    Rows rows = tx->execute(sql, args...);
    tx->commit();
    return rows;
  }

  /// The integer in the first column of the first row, read in its own transaction.
  template <class... Args>
  std::int64_t scalar(Store& store, std::string_view sql, const Args&... args) {
    const Rows rows = run(store, sql, args...);
    if (rows.empty()) throw std::runtime_error("scalar(): no row");
    return rows[0].int64(0);
  }

  std::int64_t marks(std::string_view group = kGroup) {
    return scalar(*store_, "SELECT count(*) FROM processed_event WHERE consumer_group = $1", group);
  }

  bool mark_committed(const Uuid& id, std::string_view group = kGroup) {
    auto tx = store_->begin();
    const bool first = tx->mark_processed(id, group);
    tx->commit();
    return first;
  }

  void create_counter() {
    auto tx = store_->begin();
    tx->execute("CREATE TABLE test_counter (id integer PRIMARY KEY, n bigint NOT NULL)");
    tx->execute("INSERT INTO test_counter (id, n) VALUES (1, 0)");
    tx->commit();
  }

  std::int64_t counter() { return scalar(*store_, "SELECT n FROM test_counter WHERE id = 1"); }

  std::string url_;
  std::unique_ptr<Store> store_;
};

TYPED_TEST_SUITE_P(StoreContract);

// ---- marking ---------------------------------------------------------------------

TYPED_TEST_P(StoreContract, ReportsItsBackend) {
  EXPECT_EQ(this->store_->backend(), TypeParam::kind);
}

TYPED_TEST_P(StoreContract, MarkReturnsTrueOnlyTheFirstTime) {
  const Uuid id = new_uuid_v7();
  {
    auto tx = this->store_->begin();
    EXPECT_TRUE(tx->mark_processed(id, this->kGroup));
    EXPECT_FALSE(tx->mark_processed(id, this->kGroup)) << "second mark in the same transaction";
    tx->commit();
  }
  EXPECT_FALSE(this->mark_committed(id)) << "mark after commit";
  EXPECT_FALSE(this->mark_committed(id)) << "and again";
  EXPECT_EQ(this->marks(), 1);
}

TYPED_TEST_P(StoreContract, MarkIsScopedPerConsumerGroup) {
  const Uuid id = new_uuid_v7();
  EXPECT_TRUE(this->mark_committed(id, "billing-order-confirmed"));
  EXPECT_TRUE(this->mark_committed(id, "analytics-order-confirmed"));
  EXPECT_FALSE(this->mark_committed(id, "billing-order-confirmed"));
  EXPECT_FALSE(this->mark_committed(id, "analytics-order-confirmed"));
  EXPECT_EQ(this->marks("billing-order-confirmed"), 1);
  EXPECT_EQ(this->marks("analytics-order-confirmed"), 1);
}

TYPED_TEST_P(StoreContract, MarkRejectsAnEmptyConsumerGroup) {
  auto tx = this->store_->begin();
  try {
    (void)tx->mark_processed(new_uuid_v7(), "");
    ADD_FAILURE() << "an empty consumer group was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
  }
}

TYPED_TEST_P(StoreContract, MarkIsInvisibleToOthersUntilCommit) {
  const Uuid id = new_uuid_v7();
  auto other = this->connect();
  const std::string count_sql = "SELECT count(*) FROM processed_event";
  {
    auto tx = this->store_->begin();
    ASSERT_TRUE(tx->mark_processed(id, this->kGroup));
    EXPECT_EQ(TypeParam::read_scalar(*other, count_sql), 0) << "uncommitted mark is visible";
    tx->commit();
  }
  EXPECT_EQ(TypeParam::read_scalar(*other, count_sql), 1) << "committed mark is not visible";
  auto tx = other->begin();
  EXPECT_FALSE(tx->mark_processed(id, this->kGroup));
}

TYPED_TEST_P(StoreContract, RollbackUndoesTheMark) {
  this->create_counter();
  const Uuid id = new_uuid_v7();
  struct EffectFailed : std::runtime_error {
    EffectFailed() : std::runtime_error("effect failed") {}
  };
  // The handler pattern: mark, apply the effect, commit; an exception in the effect
  // destroys the transaction without commit.
  auto handle = [&](bool effect_fails) {
    auto tx = this->store_->begin();
    if (!tx->mark_processed(id, this->kGroup)) return false;
    tx->execute("UPDATE test_counter SET n = n + 1 WHERE id = 1");
    if (effect_fails) throw EffectFailed();
    tx->commit();
    return true;
  };
  EXPECT_THROW(handle(true), EffectFailed);
  EXPECT_EQ(this->counter(), 0) << "the effect of a failed transaction survived";
  EXPECT_EQ(this->marks(), 0) << "the mark of a failed transaction survived";
  EXPECT_TRUE(handle(false)) << "the event could not be processed again after the failure";
  EXPECT_EQ(this->counter(), 1);
  EXPECT_FALSE(handle(false)) << "redelivery after success ran the effect again";
  EXPECT_EQ(this->counter(), 1);
}

TYPED_TEST_P(StoreContract, ExplicitRollbackIsIdempotent) {
  const Uuid id = new_uuid_v7();
  auto tx = this->store_->begin();
  EXPECT_TRUE(tx->active());
  EXPECT_TRUE(tx->mark_processed(id, this->kGroup));
  tx->rollback();
  EXPECT_FALSE(tx->active());
  tx->rollback();  // no-op, no throw
  EXPECT_FALSE(tx->active());
  tx.reset();
  EXPECT_TRUE(this->mark_committed(id));
}

TYPED_TEST_P(StoreContract, DestructorRollsBack) {
  const Uuid id = new_uuid_v7();
  {
    auto tx = this->store_->begin();
    EXPECT_TRUE(tx->mark_processed(id, this->kGroup));
    tx->execute(
        "INSERT INTO orders (id, customer_id, total_amount, created_at) VALUES ($1, $2, $3, $4)", 1,
        2, "10.00", "2026-01-02T03:04:05Z");
  }
  EXPECT_EQ(this->scalar(*this->store_, "SELECT count(*) FROM orders"), 0);
  EXPECT_TRUE(this->mark_committed(id));
}

TYPED_TEST_P(StoreContract, SecondBeginWhileOpenThrows) {
  auto tx = this->store_->begin();
  try {
    auto second = this->store_->begin();
    ADD_FAILURE() << "a second transaction was opened on the same Store";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
  }
  EXPECT_TRUE(tx->active()) << "the failed begin() disturbed the open transaction";
  EXPECT_TRUE(tx->mark_processed(new_uuid_v7(), this->kGroup));
  tx->commit();
  auto next = this->store_->begin();  // free again after commit
  EXPECT_TRUE(next->active());
}

TYPED_TEST_P(StoreContract, FinishedTransactionRejectsFurtherWork) {
  auto tx = this->store_->begin();
  EXPECT_TRUE(tx->mark_processed(new_uuid_v7(), this->kGroup));
  tx->commit();
  EXPECT_FALSE(tx->active());
  EXPECT_THROW((void)tx->mark_processed(new_uuid_v7(), this->kGroup), Error);
  EXPECT_THROW(tx->execute("SELECT 1"), Error);
  EXPECT_THROW(tx->commit(), Error);
  EXPECT_EQ(this->marks(), 1);
}

// ---- batches -------------------------------------------------------------------------

TYPED_TEST_P(StoreContract, BatchReturnsFirstOccurrencesOfNewIdsOnly) {
  const Uuid a = new_uuid_v7(), b = new_uuid_v7(), c = new_uuid_v7(), d = new_uuid_v7(),
             e = new_uuid_v7();
  ASSERT_TRUE(this->mark_committed(b));
  {
    auto tx = this->store_->begin();
    const std::vector<Uuid> batch{a, b, a, c, b, d, c};
    EXPECT_EQ(tx->mark_processed_batch(batch, this->kGroup),
              (std::vector<bool>{true, false, false, true, false, true, false}));
    tx->commit();
  }
  {
    auto tx = this->store_->begin();
    const std::vector<Uuid> batch{d, e, a, e};
    EXPECT_EQ(tx->mark_processed_batch(batch, this->kGroup),
              (std::vector<bool>{false, true, false, false}));
    // Another group has processed none of them.
    const std::vector<Uuid> other{c, c, b};
    EXPECT_EQ(tx->mark_processed_batch(other, "analytics-order-confirmed"),
              (std::vector<bool>{true, false, true}));
    tx->commit();
  }
  EXPECT_EQ(this->marks(), 5);
  EXPECT_EQ(this->marks("analytics-order-confirmed"), 2);
}

TYPED_TEST_P(StoreContract, BatchOf1000) {
  std::vector<Uuid> ids(1000);
  for (auto& id : ids) id = new_uuid_v7();
  {  // every third id was processed before
    std::vector<Uuid> earlier;
    for (std::size_t i = 0; i < ids.size(); i += 3) earlier.push_back(ids[i]);
    auto tx = this->store_->begin();
    const auto first = tx->mark_processed_batch(earlier, this->kGroup);
    EXPECT_EQ(std::count(first.begin(), first.end(), true), static_cast<long>(earlier.size()));
    tx->commit();
  }
  auto tx = this->store_->begin();
  const auto result = tx->mark_processed_batch(ids, this->kGroup);
  ASSERT_EQ(result.size(), ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(result[i], i % 3 != 0) << "position " << i;
  tx->commit();
  EXPECT_EQ(this->marks(), 1000);
}

TYPED_TEST_P(StoreContract, LargeBatchWithDuplicatesAcrossItsWholeLength) {
  // Larger than any single statement a backend is likely to use, with each id repeated
  // far from its first occurrence, so chunking cannot lose first-occurrence order.
  constexpr std::size_t kDistinct = 1700;
  std::vector<Uuid> distinct(kDistinct);
  for (auto& id : distinct) id = new_uuid_v7();
  std::vector<Uuid> batch(distinct.rbegin(), distinct.rend());  // descending order first
  batch.insert(batch.end(), distinct.begin(), distinct.end());  // then every id again
  auto tx = this->store_->begin();
  const auto result = tx->mark_processed_batch(batch, this->kGroup);
  ASSERT_EQ(result.size(), batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i)
    EXPECT_EQ(result[i], i < kDistinct) << "position " << i;
  tx->commit();
  EXPECT_EQ(this->marks(), static_cast<std::int64_t>(kDistinct));
}

TYPED_TEST_P(StoreContract, EmptyBatch) {
  auto tx = this->store_->begin();
  EXPECT_TRUE(tx->mark_processed_batch({}, this->kGroup).empty());
  tx->commit();
  EXPECT_EQ(this->marks(), 0);
}

TYPED_TEST_P(StoreContract, BatchRollsBackWithItsTransaction) {
  const std::vector<Uuid> ids{new_uuid_v7(), new_uuid_v7(), new_uuid_v7()};
  {
    auto tx = this->store_->begin();
    EXPECT_EQ(tx->mark_processed_batch(ids, this->kGroup), (std::vector<bool>{true, true, true}));
  }
  auto tx = this->store_->begin();
  EXPECT_EQ(tx->mark_processed_batch(ids, this->kGroup), (std::vector<bool>{true, true, true}));
}

// ---- races -------------------------------------------------------------------------

TYPED_TEST_P(StoreContract, ConcurrentMarkersExactlyOneWins) {
  constexpr int kWorkers = 8;
  constexpr int kRounds = 5;
  this->create_counter();
  std::vector<std::unique_ptr<Store>> stores;
  stores.reserve(kWorkers);
  for (int i = 0; i < kWorkers; ++i) stores.push_back(this->connect());

  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(testing::Message() << "round " << round);
    const Uuid id = new_uuid_v7();
    const std::int64_t before = this->counter();
    std::latch start(kWorkers);
    std::atomic<int> winners{0};
    std::vector<std::string> failures(kWorkers);
    std::vector<std::thread> threads;
    threads.reserve(kWorkers);
    for (int i = 0; i < kWorkers; ++i) {
      threads.emplace_back([&, i] {
        start.arrive_and_wait();  // all threads race from the same instant
        try {
          if (process_once(*stores[static_cast<std::size_t>(i)], id, this->kGroup)) ++winners;
        } catch (const std::exception& e) {
          failures[static_cast<std::size_t>(i)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& f : failures) EXPECT_EQ(f, "") << "a worker failed";
    EXPECT_EQ(winners.load(), 1);
    EXPECT_EQ(this->counter(), before + 1) << "the effect ran a number of times other than once";
  }
  EXPECT_EQ(this->marks(), kRounds);
}

TYPED_TEST_P(StoreContract, ConcurrentProcessesExactlyOneWins) {
#ifndef IDEM_TEST_CHILD_DIR
  GTEST_SKIP() << "this binary was built without IDEM_TEST_CHILD_DIR (no child programs)";
#else
  using namespace std::chrono_literals;
  constexpr int kProcesses = 8;
  this->create_counter();
  const Uuid id = new_uuid_v7();
  std::vector<ChildProcess> children;
  children.reserve(kProcesses);
  for (int i = 0; i < kProcesses; ++i) {
    children.push_back(ChildProcess::spawn(child_program("store_child"),
                                           {"race", this->url_, id.to_string(), this->kGroup}));
  }
  // A start barrier across processes: every child has opened its store and waits.
  for (auto& child : children)
    ASSERT_TRUE(expect_line(child, "ready", 60s)) << "child " << child.pid();
  for (auto& child : children) child.write_line("go");

  int won = 0;
  int lost = 0;
  for (auto& child : children) {
    const auto line = child.read_line(120s);
    ASSERT_TRUE(line.has_value()) << "child " << child.pid() << " gave no verdict";
    if (*line == "won") {
      ++won;
    } else if (*line == "lost") {
      ++lost;
    } else {
      ADD_FAILURE() << "child " << child.pid() << " said: " << *line;
    }
    EXPECT_EQ(child.wait(60s), 0);
  }
  EXPECT_EQ(won, 1);
  EXPECT_EQ(lost, kProcesses - 1);
  EXPECT_EQ(this->counter(), 1);
  EXPECT_EQ(this->marks(), 1);
#endif
}

// ---- savepoints ----------------------------------------------------------------------

TYPED_TEST_P(StoreContract, SavepointRollbackKeepsTheRestOfTheTransaction) {
  const Uuid a = new_uuid_v7(), b = new_uuid_v7(), c = new_uuid_v7();
  {
    auto tx = this->store_->begin();
    EXPECT_TRUE(tx->mark_processed(a, this->kGroup));
    {
      Savepoint sp(*tx);
      EXPECT_TRUE(tx->mark_processed(b, this->kGroup));
      tx->execute(
          "INSERT INTO orders (id, customer_id, total_amount, created_at) VALUES ($1, $2, $3, $4)",
          7, 1, "1.00", "2026-01-02T03:04:05Z");
      sp.rollback();
    }
    {
      Savepoint sp(*tx);  // destroyed without release(): rolls back too
      EXPECT_TRUE(tx->mark_processed(c, this->kGroup));
      EXPECT_FALSE(tx->mark_processed(a, this->kGroup));
    }
    EXPECT_TRUE(tx->active());
    EXPECT_TRUE(tx->mark_processed(b, this->kGroup))
        << "b's mark survived its savepoint's rollback";
    tx->commit();
  }
  EXPECT_FALSE(this->mark_committed(a));
  EXPECT_FALSE(this->mark_committed(b));
  EXPECT_TRUE(this->mark_committed(c));
  EXPECT_EQ(this->scalar(*this->store_, "SELECT count(*) FROM orders"), 0);
}

TYPED_TEST_P(StoreContract, SavepointReleaseKeepsWork) {
  const Uuid a = new_uuid_v7(), b = new_uuid_v7(), c = new_uuid_v7();
  {
    auto tx = this->store_->begin();
    Savepoint outer(*tx);
    EXPECT_TRUE(tx->mark_processed(a, this->kGroup));
    {
      Savepoint inner(*tx);
      EXPECT_TRUE(tx->mark_processed(b, this->kGroup));
      inner.release();
    }
    {
      Savepoint inner(*tx);
      EXPECT_TRUE(tx->mark_processed(c, this->kGroup));
      inner.rollback();
    }
    outer.release();
    tx->commit();
  }
  EXPECT_FALSE(this->mark_committed(a));
  EXPECT_FALSE(this->mark_committed(b));
  EXPECT_TRUE(this->mark_committed(c));
}

// ---- executing SQL -------------------------------------------------------------------

TYPED_TEST_P(StoreContract, ExecuteBindsParametersAndReturnsRows) {
  constexpr std::int64_t kBigCustomer = 9007199254740993;  // 2^53 + 1: not exact as a double
  const Amount amount = Amount::from_hundredths(1230);
  const Uuid event_id = new_uuid_v7();
  const std::string payment_id = "pay_'quoted' \"double\" ü€";
  auto tx = this->store_->begin();

  const char* insert_order =
      "INSERT INTO orders (id, customer_id, total_amount, created_at) VALUES ($1, $2, $3, $4)";
  tx->execute(insert_order, 42, kBigCustomer, amount, "2026-01-02T03:04:05Z");
  tx->execute(insert_order, 43, std::int64_t{-7}, Amount::from_hundredths(5),
              "2026-01-02T03:04:06Z");

  const Rows order = tx->execute(
      "SELECT id, customer_id, total_amount, status, confirmed_at FROM orders WHERE id = $1", 42);
  ASSERT_EQ(order.size(), 1u);
  ASSERT_EQ(order.columns(), 5u);
  EXPECT_EQ(order[0].int64(0), 42);
  EXPECT_EQ(order[0].int64(1), kBigCustomer);
  EXPECT_EQ(order[0].amount(2), amount);
  EXPECT_EQ(order[0].text(2), "12.30");
  EXPECT_EQ(order[0].text(3), "created");
  EXPECT_TRUE(order[0].is_null(4));

  // The same statement again (cached) with another value.
  const Rows small = tx->execute(
      "SELECT id, customer_id, total_amount, status, confirmed_at FROM orders WHERE id = $1", 43);
  ASSERT_EQ(small.size(), 1u);
  EXPECT_EQ(small[0].int64(1), -7);
  EXPECT_EQ(small[0].amount(2), Amount::from_hundredths(5));

  // Placeholders are bound by number, not by order of appearance.
  const Rows by_number =
      tx->execute("SELECT id FROM orders WHERE customer_id = $2 AND id = $1", 42, kBigCustomer);
  ASSERT_EQ(by_number.size(), 1u);
  EXPECT_EQ(by_number[0].int64(0), 42);

  // NULL as a parameter.
  tx->execute("UPDATE orders SET confirmed_at = $1 WHERE id = $2", nullptr, 42);
  EXPECT_TRUE(tx->execute("SELECT confirmed_at FROM orders WHERE id = $1", 42)[0].is_null(0));

  // A UUID and text through the ledger, with RETURNING.
  const Rows inserted = tx->execute(
      "INSERT INTO billing_ledger (order_id, event_id, amount, provider_payment_id) "
      "VALUES ($1, $2, $3, $4) RETURNING id",
      42, event_id, amount, payment_id);
  ASSERT_EQ(inserted.size(), 1u);
  const std::int64_t ledger_id = inserted[0].int64(0);
  const Rows ledger = tx->execute(
      "SELECT event_id, amount, provider_payment_id, created_at FROM billing_ledger WHERE id = $1",
      ledger_id);
  ASSERT_EQ(ledger.size(), 1u);
  EXPECT_EQ(ledger[0].uuid(0), event_id);
  EXPECT_EQ(ledger[0].amount(1), amount);
  EXPECT_EQ(ledger[0].text(2), payment_id);
  EXPECT_FALSE(ledger[0].is_null(3)) << "created_at has a default";
  const Rows by_uuid =
      tx->execute("SELECT count(*) FROM billing_ledger WHERE event_id = $1", event_id);
  EXPECT_EQ(by_uuid[0].int64(0), 1);

  // Booleans and reals.
  EXPECT_EQ(tx->execute("SELECT CASE WHEN $1 THEN 1 ELSE 0 END", true)[0].int64(0), 1);
  EXPECT_EQ(tx->execute("SELECT CASE WHEN $1 THEN 1 ELSE 0 END", false)[0].int64(0), 0);
  EXPECT_DOUBLE_EQ(tx->execute("SELECT CAST($1 AS double precision)", 1.5)[0].real(0), 1.5);

  // No rows is an empty result with the statement's columns.
  const Rows none = tx->execute("SELECT id, status FROM orders WHERE id = $1", 999);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.affected(), 0);
  tx->commit();
}

// A caller that does not know the schema (a binding to another language) gives each value
// its natural type from the result alone: the column names and each cell's type.
TYPED_TEST_P(StoreContract, ResultsNameTheirColumnsAndTypeTheirValues) {
  auto tx = this->store_->begin();
  tx->execute(
      "CREATE TABLE typed (n BIGINT, flag BOOLEAN, id UUID, at TIMESTAMP, doc JSON, s TEXT, "
      "absent TEXT)");
  const Uuid id = new_uuid_v7();
  tx->execute("INSERT INTO typed VALUES ($1, $2, $3, $4, $5, $6, $7)", std::int64_t{42}, true, id,
              "2026-12-05 19:50:35", R"({"fee": 0.00005})", "text", nullptr);
  const Rows rows = tx->execute("SELECT n, flag, id, at, doc, s, absent, n + 1 AS next FROM typed");
  tx->commit();
  ASSERT_EQ(rows.size(), 1U);
  std::vector<std::string> names;
  for (const Column& c : rows.column_info()) names.push_back(c.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"n", "flag", "id", "at", "doc", "s", "absent", "next"}));
  EXPECT_EQ(rows.column_index("doc"), std::optional<std::size_t>(4));
  EXPECT_EQ(rows.column_index("missing"), std::nullopt);
  const RowView row = rows[0];
  EXPECT_EQ(row.type(0), ValueType::Integer);
  EXPECT_EQ(row.type(1), ValueType::Boolean);
  EXPECT_TRUE(row.boolean(1));
  EXPECT_EQ(row.type(2), ValueType::UuidValue);
  EXPECT_EQ(row.uuid(2), id);
  EXPECT_EQ(row.type(3), ValueType::TimestampValue);
  EXPECT_EQ(row.type(4), ValueType::Json);
  EXPECT_EQ(row.type(5), ValueType::Text);
  EXPECT_EQ(row.type(6), ValueType::Null);
  EXPECT_EQ(row.type(7), ValueType::Integer);  // an expression: its value's type
  EXPECT_EQ(row.int64(7), 43);
  EXPECT_THROW(static_cast<void>(row.type(8)), Error);
}

TYPED_TEST_P(StoreContract, ExecuteReportsAffectedRows) {
  auto tx = this->store_->begin();
  const char* insert_order =
      "INSERT INTO orders (id, customer_id, total_amount, created_at) VALUES ($1, $2, $3, $4)";
  for (int id = 1; id <= 3; ++id) {
    EXPECT_EQ(tx->execute(insert_order, id, 10, "5.00", "2026-01-02T03:04:05Z").affected(), 1);
  }
  EXPECT_EQ(tx->execute("UPDATE orders SET status = 'confirmed' WHERE id <= $1", 2).affected(), 2);
  EXPECT_EQ(tx->execute("UPDATE orders SET status = 'confirmed' WHERE id = $1", 99).affected(), 0);
  EXPECT_EQ(tx->execute("DELETE FROM orders WHERE id = $1", 3).affected(), 1);
  EXPECT_EQ(tx->execute("SELECT id FROM orders").affected(), 0);
  EXPECT_EQ(tx->execute("SELECT id FROM orders").size(), 2u);
  tx->commit();
}

TYPED_TEST_P(StoreContract, ExecuteRejectsAMissingOrExtraParameter) {
  const char* sql = "SELECT id FROM orders WHERE id = $1 AND customer_id = $2";
  {
    auto tx = this->store_->begin();
    try {
      tx->execute(sql, 1);
      ADD_FAILURE() << "a statement ran with a placeholder left unbound";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("$2"), std::string::npos) << e.what();
    }
  }
  {
    auto tx = this->store_->begin();
    try {
      tx->execute(sql, 1, 2, 3);
      ADD_FAILURE() << "a statement ran with more parameters than placeholders";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    }
  }
}

TYPED_TEST_P(StoreContract, SqlErrorNamesTheProblem) {
  {
    auto tx = this->store_->begin();
    try {
      tx->execute("SELEC 1");
      ADD_FAILURE() << "bad SQL was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Query) << e.what();
      EXPECT_EQ(e.source(), TypeParam::source);
      EXPECT_NE(std::string(e.what()).find("syntax error"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("SELEC"), std::string::npos) << e.what();
    }
  }
  {
    auto tx = this->store_->begin();
    try {
      tx->execute("SELECT count(*) FROM no_such_table");
      ADD_FAILURE() << "a query on a missing table was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Query) << e.what();
      EXPECT_NE(std::string(e.what()).find("no_such_table"), std::string::npos) << e.what();
      EXPECT_FALSE(e.transient());
    }
  }
}

TYPED_TEST_P(StoreContract, ConstraintViolationIsClassified) {
  const char* insert_order =
      "INSERT INTO orders (id, customer_id, total_amount, status, created_at) VALUES ($1, $2, $3, "
      "$4, $5)";
  this->run(*this->store_, insert_order, 1, 1, "1.00", "created", "2026-01-02T03:04:05Z");
  auto expect_constraint = [&](auto&&... args) {
    auto tx = this->store_->begin();
    try {
      tx->execute(insert_order, args...);
      ADD_FAILURE() << "a constraint violation was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Constraint) << e.what();
      EXPECT_FALSE(e.transient());
      EXPECT_FALSE(e.detail().empty()) << "no native detail";
    }
  };
  expect_constraint(1, 1, "1.00", "created", "2026-01-02T03:04:05Z");  // primary key
  expect_constraint(2, 1, "1.00", "shipped", "2026-01-02T03:04:05Z");  // CHECK (status IN ...)
  expect_constraint(3, nullptr, "1.00", "created", "2026-01-02T03:04:05Z");  // NOT NULL
  EXPECT_EQ(this->scalar(*this->store_, "SELECT count(*) FROM orders"), 1);
}

// ---- migrations ----------------------------------------------------------------------

TYPED_TEST_P(StoreContract, MigrateCreatesTheSchemaOnAnEmptyDatabase) {
  const std::string url = TypeParam::fresh_url();
  if (this->IsSkipped() || this->HasFatalFailure()) return;
  auto store = open_store(url);
  EXPECT_EQ(store->schema_version(), 0);
  const MigrationReport report = store->migrate();
  EXPECT_EQ(report.from_version, 0);
  EXPECT_GE(report.to_version, 2);
  EXPECT_EQ(report.to_version, store->schema_version());
  EXPECT_GE(report.applied.size(), 2u);
  for (const char* table : {"processed_event", "idem_outbox"}) {
    EXPECT_EQ(this->scalar(*store, std::string("SELECT count(*) FROM ") + table), 0) << table;
  }
  // idem's own migrations create only idem's tables: a user's `orders` or `outbox` is never
  // touched (older releases named the outbox `outbox`; only a store they created gets the
  // compatibility view of that name), and the console's table is the console's set.
  for (const char* table : {"orders", "outbox", "idem_console_replay"}) {
    EXPECT_THROW((void)this->scalar(*store, std::string("SELECT count(*) FROM ") + table), Error)
        << table;
  }
}

TYPED_TEST_P(StoreContract, MigrationSetsAreVersionedApart) {
  const std::string url = TypeParam::fresh_url();
  if (this->IsSkipped() || this->HasFatalFailure()) return;
  auto store = open_store(url);
  const int idem_version = store->migrate().to_version;
  EXPECT_EQ(store->schema_version("reference"), 0);
  const MigrationReport report = store->migrate_set(reference_migrations());
  EXPECT_EQ(report.from_version, 0);
  EXPECT_EQ(report.to_version, store->schema_version("reference"));
  EXPECT_FALSE(report.applied.empty());
  EXPECT_EQ(store->schema_version(), idem_version) << "a set's versions are its own";
  for (const char* table : {"orders", "billing_ledger", "effect_log"}) {
    EXPECT_EQ(this->scalar(*store, std::string("SELECT count(*) FROM ") + table), 0) << table;
  }
  EXPECT_TRUE(store->migrate_set(reference_migrations()).applied.empty());
  MigrationSet unnamed = reference_migrations();
  unnamed.name = "";
  EXPECT_THROW((void)store->migrate_set(unnamed), Error);
  MigrationSet impostor = reference_migrations();
  impostor.name = std::string(kIdemMigrations);
  EXPECT_THROW((void)store->migrate_set(impostor), Error);
}

TYPED_TEST_P(StoreContract, MigrateIsIdempotent) {
  const int version = this->store_->schema_version();
  EXPECT_GE(version, 2);
  const MigrationReport again = this->store_->migrate();
  EXPECT_TRUE(again.applied.empty());
  EXPECT_EQ(again.from_version, version);
  EXPECT_EQ(again.to_version, version);
  EXPECT_EQ(this->store_->schema_version(), version);
  EXPECT_TRUE(this->mark_committed(new_uuid_v7())) << "the store works after a second migrate";
}

TYPED_TEST_P(StoreContract, ConcurrentMigratorsApplyEachMigrationOnce) {
  const std::string url = TypeParam::fresh_url();
  if (this->IsSkipped() || this->HasFatalFailure()) return;
  constexpr int kMigrators = 4;
  std::vector<std::unique_ptr<Store>> stores;
  stores.reserve(kMigrators);
  for (int i = 0; i < kMigrators; ++i) stores.push_back(open_store(url));
  std::latch start(kMigrators);
  std::vector<MigrationReport> reports(kMigrators);
  std::vector<std::string> failures(kMigrators);
  std::vector<std::thread> threads;
  threads.reserve(kMigrators);
  for (int i = 0; i < kMigrators; ++i) {
    threads.emplace_back([&, i] {
      const auto n = static_cast<std::size_t>(i);
      start.arrive_and_wait();
      try {
        reports[n] = stores[n]->migrate();
      } catch (const std::exception& e) {
        failures[n] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& f : failures) EXPECT_EQ(f, "");
  std::vector<std::string> applied;
  for (const auto& r : reports) applied.insert(applied.end(), r.applied.begin(), r.applied.end());
  std::sort(applied.begin(), applied.end());
  EXPECT_EQ(std::adjacent_find(applied.begin(), applied.end()), applied.end())
      << "a migration was applied twice";
  EXPECT_GE(applied.size(), 2u);
  const int version = stores[0]->schema_version();
  for (const auto& r : reports) EXPECT_EQ(r.to_version, version);
}

// ---- lazy savepoints (bench/RESULTS.md) ---------------------------------------------
// Both backends defer SAVEPOINT until a statement runs inside it and (PostgreSQL) send
// RELEASE with the next statement. These pin down that the semantics did not move.

namespace contract_detail {
constexpr const char* kInsertOrder =
    "INSERT INTO orders (id, customer_id, total_amount, created_at) VALUES ($1, $2, $3, $4)";
}  // namespace contract_detail

// The consumer's pattern: one batch mark, then per event a savepoint; an event whose
// handler ran no SQL, one whose second statement fails (its effect AND its mark must go,
// the rest stays), and one after it that succeeds.
TYPED_TEST_P(StoreContract, LazySavepointFailingStatementRollsBackOnlyItsEvent) {
  using contract_detail::kInsertOrder;
  const Uuid a = new_uuid_v7(), b = new_uuid_v7(), c = new_uuid_v7();
  const std::vector<Uuid> ids{a, b, c};
  this->run(*this->store_, kInsertOrder, 1, 1, "1.00", "2026-01-02T03:04:05Z");
  {
    auto tx = this->store_->begin();
    const std::vector<bool> fresh = tx->mark_processed_batch(ids, this->kGroup);
    ASSERT_EQ(fresh, (std::vector<bool>{true, true, true}));
    {
      Savepoint sp(*tx);  // a: no SQL at all
      sp.release();
    }
    {
      Savepoint sp(*tx);  // b: one good statement, then a constraint violation
      tx->execute(kInsertOrder, 20, 1, "2.00", "2026-01-02T03:04:05Z");
      try {
        tx->execute(kInsertOrder, 1, 1, "3.00", "2026-01-02T03:04:05Z");  // id 1 exists
        ADD_FAILURE() << "the duplicate key was accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::Constraint) << e.what();
      }
      sp.rollback();
      tx->execute("DELETE FROM processed_event WHERE event_id = $1 AND consumer_group = $2", b,
                  this->kGroup);
    }
    {
      Savepoint sp(*tx);  // c: works after b's failure was undone
      tx->execute(kInsertOrder, 30, 1, "4.00", "2026-01-02T03:04:05Z");
      sp.release();
    }
    tx->commit();
  }
  EXPECT_FALSE(this->mark_committed(a));
  EXPECT_TRUE(this->mark_committed(b)) << "b's mark survived the failure of its savepoint";
  EXPECT_FALSE(this->mark_committed(c));
  EXPECT_EQ(this->scalar(*this->store_, "SELECT count(*) FROM orders WHERE id = 20"), 0);
  EXPECT_EQ(this->scalar(*this->store_, "SELECT count(*) FROM orders WHERE id = 30"), 1);
}

// Savepoints with no statement inside, nested and mixed with ones that have statements:
// rolling back an outer savepoint undoes the work of an inner one even when the outer
// one had not been sent when the inner one was made; releasing keeps it.
TYPED_TEST_P(StoreContract, LazySavepointsNestAndUndoInnerWork) {
  using contract_detail::kInsertOrder;
  const Uuid a = new_uuid_v7(), b = new_uuid_v7(), c = new_uuid_v7();
  {
    auto tx = this->store_->begin();
    for (int i = 0; i < 50; ++i) {  // many empty savepoints: nothing to send, nothing to undo
      Savepoint empty(*tx);
      if (i % 2 == 0) empty.release();
    }
    {
      Savepoint outer(*tx);  // nothing inside it directly
      {
        Savepoint inner(*tx);
        EXPECT_TRUE(tx->mark_processed(a, this->kGroup));
        inner.release();
      }
      outer.rollback();  // must undo a's mark
    }
    {
      Savepoint outer(*tx);
      Savepoint inner(*tx);
      EXPECT_TRUE(tx->mark_processed(b, this->kGroup));
      inner.release();
      outer.release();
    }
    {
      Savepoint kept(*tx);
      tx->execute(kInsertOrder, 40, 1, "1.00", "2026-01-02T03:04:05Z");
      kept.release();  // deferred on PostgreSQL: rides with the next statement
      Savepoint undone(*tx);
      EXPECT_TRUE(tx->mark_processed(c, this->kGroup));
      undone.rollback();
    }
    EXPECT_TRUE(tx->active());
    tx->commit();
  }
  EXPECT_TRUE(this->mark_committed(a)) << "the outer rollback did not undo the inner work";
  EXPECT_FALSE(this->mark_committed(b));
  EXPECT_TRUE(this->mark_committed(c));
  EXPECT_EQ(this->scalar(*this->store_, "SELECT count(*) FROM orders WHERE id = 40"), 1);
}

// A failure right after a deferred RELEASE belongs to the savepoint open when the
// failing statement ran, not to the one released before: rolling that one back keeps
// the released savepoint's work, and the transaction commits it.
TYPED_TEST_P(StoreContract, LazySavepointErrorIsAttributedToTheOpenSavepoint) {
  using contract_detail::kInsertOrder;
  {
    auto tx = this->store_->begin();
    {
      Savepoint first(*tx);
      tx->execute(kInsertOrder, 50, 1, "1.00", "2026-01-02T03:04:05Z");
      first.release();
    }
    {
      Savepoint second(*tx);
      EXPECT_THROW(tx->execute("SELECT no_such_column FROM orders"), Error);
      second.rollback();
    }
    {
      Savepoint third(*tx);
      tx->execute(kInsertOrder, 51, 1, "1.00", "2026-01-02T03:04:05Z");
      // destroyed without release(): rolls back
    }
    tx->commit();
  }
  EXPECT_EQ(this->scalar(*this->store_, "SELECT count(*) FROM orders WHERE id = 50"), 1);
  EXPECT_EQ(this->scalar(*this->store_, "SELECT count(*) FROM orders WHERE id = 51"), 0);
}

// A transaction whose only content is empty savepoints commits (nothing to do) and
// leaves the store ready for the next one.
TYPED_TEST_P(StoreContract, TransactionWithOnlyEmptySavepointsCommits) {
  {
    auto tx = this->store_->begin();
    Savepoint sp(*tx);
    sp.release();
    tx->commit();
  }
  EXPECT_TRUE(this->mark_committed(new_uuid_v7()));
}

// ---- deferred statements (execute_deferred) ------------------------------------------
// PostgreSQL queues them for the next round trip; SQLite runs them at once. The contract
// both keep: order with synchronous statements, an error surfaces no later than sync()
// or commit(), and rolling back discards them.

// A deferred statement's effect is visible to the next synchronous statement of the same
// transaction, and deferred statements run in the order they were issued.
TYPED_TEST_P(StoreContract, DeferredStatementsKeepTheirOrderWithSynchronousOnes) {
  using contract_detail::kInsertOrder;
  {
    auto tx = this->store_->begin();
    EXPECT_TRUE(tx->mark_processed(new_uuid_v7(), this->kGroup));
    tx->execute_deferred(kInsertOrder, 60, 1, "1.00", "2026-01-02T03:04:05Z");
    tx->execute_deferred("UPDATE orders SET total_amount = $1 WHERE id = $2", "2.50", 60);
    const Rows rows = tx->execute("SELECT total_amount FROM orders WHERE id = $1", 60);
    ASSERT_EQ(rows.size(), 1u) << "the deferred INSERT had not run before the SELECT";
    EXPECT_EQ(rows[0].amount(0), Amount::from_hundredths(250)) << "the UPDATE ran out of order";
    for (int id = 61; id < 161; ++id) {
      tx->execute_deferred(kInsertOrder, id, 1, "1.00", "2026-01-02T03:04:05Z");
    }
    tx->execute_deferred("DELETE FROM orders WHERE id = $1", 160);  // after its INSERT
    tx->sync();
    tx->commit();
  }
  EXPECT_EQ(this->scalar(*this->store_, "SELECT count(*) FROM orders WHERE id >= 60"), 100);
  EXPECT_EQ(this->scalar(*this->store_, "SELECT count(*) FROM orders WHERE id = 160"), 0);
}

// A failing deferred statement is reported (as a classified Error naming the statement)
// no later than sync(); the transaction then rolls back whole.
TYPED_TEST_P(StoreContract, DeferredStatementErrorSurfacesBySync) {
  using contract_detail::kInsertOrder;
  this->run(*this->store_, kInsertOrder, 1, 1, "1.00", "2026-01-02T03:04:05Z");
  const Uuid id = new_uuid_v7();
  {
    auto tx = this->store_->begin();
    EXPECT_TRUE(tx->mark_processed(id, this->kGroup));
    tx->execute_deferred(kInsertOrder, 70, 1, "1.00", "2026-01-02T03:04:05Z");
    try {
      tx->execute_deferred(kInsertOrder, 1, 1, "3.00", "2026-01-02T03:04:05Z");  // id 1 exists
      tx->execute_deferred(kInsertOrder, 71, 1, "1.00", "2026-01-02T03:04:05Z");
      tx->sync();
      ADD_FAILURE() << "the duplicate key was not reported by sync()";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Constraint) << e.what();
      EXPECT_NE(std::string(e.what()).find("orders"), std::string::npos) << e.what();
    }
    tx->rollback();
  }
  EXPECT_TRUE(this->mark_committed(id)) << "the rolled-back mark survived";
  EXPECT_EQ(this->scalar(*this->store_, "SELECT count(*) FROM orders"), 1);
}

// Without sync(), commit() reports the failure and commits nothing.
TYPED_TEST_P(StoreContract, DeferredStatementErrorFailsCommit) {
  using contract_detail::kInsertOrder;
  this->run(*this->store_, kInsertOrder, 1, 1, "1.00", "2026-01-02T03:04:05Z");
  const Uuid id = new_uuid_v7();
  {
    auto tx = this->store_->begin();
    EXPECT_TRUE(tx->mark_processed(id, this->kGroup));
    tx->execute_deferred(kInsertOrder, 80, 1, "1.00", "2026-01-02T03:04:05Z");
    try {
      tx->execute_deferred(kInsertOrder, 1, 1, "3.00", "2026-01-02T03:04:05Z");
      tx->commit();
      ADD_FAILURE() << "commit() accepted a failed deferred statement";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Constraint) << e.what();
    }
  }
  EXPECT_TRUE(this->mark_committed(id));
  EXPECT_EQ(this->scalar(*this->store_, "SELECT count(*) FROM orders WHERE id = 80"), 0);
}

// Rolling back to a savepoint discards the deferred statements issued inside it, a
// failing one included, whether or not the savepoint had reached the server; the rest
// of the transaction commits.
TYPED_TEST_P(StoreContract, DeferredStatementsUndoneBySavepointRollback) {
  using contract_detail::kInsertOrder;
  this->run(*this->store_, kInsertOrder, 1, 1, "1.00", "2026-01-02T03:04:05Z");
  const auto defer_duplicate = [&](Transaction& tx) {
    try {
      tx.execute_deferred(kInsertOrder, 1, 1, "3.00", "2026-01-02T03:04:05Z");
    } catch (const Error& e) {  // SQLite reports it at once
      EXPECT_EQ(e.code(), ErrorCode::Constraint) << e.what();
    }
  };
  {
    auto tx = this->store_->begin();
    tx->execute_deferred(kInsertOrder, 90, 1, "1.00", "2026-01-02T03:04:05Z");
    {
      Savepoint sp(*tx);  // only deferred work inside: nothing of it left the client yet
      tx->execute_deferred(kInsertOrder, 91, 1, "1.00", "2026-01-02T03:04:05Z");
      defer_duplicate(*tx);
      sp.rollback();
    }
    {
      Savepoint sp(*tx);  // a synchronous statement first: the savepoint is on the server
      EXPECT_EQ(tx->execute("SELECT count(*) FROM orders WHERE id = 91")[0].int64(0), 0);
      tx->execute_deferred(kInsertOrder, 92, 1, "1.00", "2026-01-02T03:04:05Z");
      defer_duplicate(*tx);
      sp.rollback();
    }
    {
      Savepoint sp(*tx);
      tx->execute_deferred(kInsertOrder, 93, 1, "1.00", "2026-01-02T03:04:05Z");
      sp.release();
    }
    EXPECT_NO_THROW(tx->sync());
    tx->commit();
  }
  EXPECT_EQ(this->scalar(*this->store_, "SELECT count(*) FROM orders WHERE id IN (90, 93)"), 2);
  EXPECT_EQ(this->scalar(*this->store_, "SELECT count(*) FROM orders WHERE id IN (91, 92)"), 0);
}

// A wrong parameter count for a statement the connection already knows fails at once,
// before anything is queued, and leaves the transaction usable.
TYPED_TEST_P(StoreContract, DeferredStatementRejectsAWrongParameterCountAtOnce) {
  using contract_detail::kInsertOrder;
  auto tx = this->store_->begin();
  tx->execute(kInsertOrder, 95, 1, "1.00", "2026-01-02T03:04:05Z");
  try {
    tx->execute_deferred(kInsertOrder, 96, 1, "1.00");
    ADD_FAILURE() << "a missing parameter was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
  }
  tx->execute_deferred(kInsertOrder, 97, 1, "1.00", "2026-01-02T03:04:05Z");
  tx->commit();
  EXPECT_EQ(this->scalar(*this->store_, "SELECT count(*) FROM orders WHERE id IN (95, 97)"), 2);
}

REGISTER_TYPED_TEST_SUITE_P(
    StoreContract, ReportsItsBackend, MarkReturnsTrueOnlyTheFirstTime, MarkIsScopedPerConsumerGroup,
    MarkRejectsAnEmptyConsumerGroup, MarkIsInvisibleToOthersUntilCommit, RollbackUndoesTheMark,
    ExplicitRollbackIsIdempotent, DestructorRollsBack, SecondBeginWhileOpenThrows,
    FinishedTransactionRejectsFurtherWork, BatchReturnsFirstOccurrencesOfNewIdsOnly, BatchOf1000,
    LargeBatchWithDuplicatesAcrossItsWholeLength, EmptyBatch, BatchRollsBackWithItsTransaction,
    ConcurrentMarkersExactlyOneWins, ConcurrentProcessesExactlyOneWins,
    SavepointRollbackKeepsTheRestOfTheTransaction, SavepointReleaseKeepsWork,
    ExecuteBindsParametersAndReturnsRows, ResultsNameTheirColumnsAndTypeTheirValues,
    ExecuteReportsAffectedRows, ExecuteRejectsAMissingOrExtraParameter, SqlErrorNamesTheProblem,
    ConstraintViolationIsClassified, MigrateCreatesTheSchemaOnAnEmptyDatabase,
    MigrationSetsAreVersionedApart, MigrateIsIdempotent, ConcurrentMigratorsApplyEachMigrationOnce,
    LazySavepointFailingStatementRollsBackOnlyItsEvent, LazySavepointsNestAndUndoInnerWork,
    LazySavepointErrorIsAttributedToTheOpenSavepoint, TransactionWithOnlyEmptySavepointsCommits,
    DeferredStatementsKeepTheirOrderWithSynchronousOnes, DeferredStatementErrorSurfacesBySync,
    DeferredStatementErrorFailsCommit, DeferredStatementsUndoneBySavepointRollback,
    DeferredStatementRejectsAWrongParameterCountAtOnce);

}  // namespace idem::test
