// The outbox on SQLite: the event_id is born once, in enqueue, and is the same in the
// payload and the row; a rolled-back transaction leaves no row; shards are stable.
#include "idem/outbox.hpp"
#include "idem/reference/schema.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "idem/error.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/order_service.hpp"
#include "idem/store.hpp"
#include "support/store_backends.hpp"

namespace idem {
namespace outbox_test {

class OutboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = open_store(test::fresh_sqlite_url());
    idem::migrate_reference_system(*store_);
  }
  std::int64_t count(const std::string& sql) {
    return test::SqliteBackend::read_scalar(*store_, sql);
  }
  std::unique_ptr<Store> store_;
};

TEST_F(OutboxTest, EnqueueGeneratesTheIdOnceAndWritesItToPayloadAndRow) {
  Outbox outbox;
  int factory_calls = 0;
  Uuid seen;
  auto tx = store_->begin();
  const Uuid id = outbox.enqueue(*tx, [&](const Uuid& event_id) {
    ++factory_calls;
    seen = event_id;
    OutboxMessage m;
    m.aggregate_type = "order";
    m.aggregate_id = "42";
    m.topic = "t";
    m.payload = "{\"event_id\":\"" + event_id.to_string() + "\"}";
    m.headers = {{"traceparent", "00-abc-def-01"}, {"x\"quoted", "a\\b\n"}};
    return m;
  });
  tx->commit();
  EXPECT_EQ(factory_calls, 1);
  EXPECT_EQ(id, seen);
  EXPECT_TRUE(id.is_v7());

  auto read = store_->begin();
  const Rows rows = read->execute(
      "SELECT event_id, payload, message_key, shard, headers, published_at IS NULL FROM "
      "idem_outbox");
  ASSERT_EQ(rows.size(), 1U);
  EXPECT_EQ(rows[0].uuid(0), id);
  EXPECT_EQ(rows[0].text(1), "{\"event_id\":\"" + id.to_string() + "\"}");
  EXPECT_EQ(rows[0].text(2), "42");
  EXPECT_EQ(rows[0].int64(3), outbox_shard("42"));
  const auto headers = outbox_headers_from_json(rows[0].text(4));
  ASSERT_EQ(headers.size(), 2U);
  EXPECT_EQ(headers[0].second, "00-abc-def-01");
  EXPECT_EQ(headers[1].first, "x\"quoted");
  EXPECT_EQ(headers[1].second, "a\\b\n");
  EXPECT_TRUE(rows[0].boolean(5));
}

TEST_F(OutboxTest, RolledBackBusinessTransactionLeavesNoOrderChangeAndNoRow) {
  Outbox outbox;
  OrderService service(outbox);
  {
    auto tx = store_->begin();
    service.create(*tx, 1, 7, Amount::from_hundredths(1234));
    tx->commit();
  }
  {
    auto tx = store_->begin();
    ASSERT_TRUE(service.confirm(*tx, 1).has_value());
    tx->rollback();
  }
  EXPECT_EQ(count("SELECT count(*) FROM idem_outbox"), 0);
  EXPECT_EQ(count("SELECT count(*) FROM orders WHERE status = 'created'"), 1);
  const auto c = service.confirm(*store_, 1);
  ASSERT_TRUE(c.has_value());
  EXPECT_FALSE(service.confirm(*store_, 1).has_value()) << "a second confirm is a no-op";
  EXPECT_EQ(count("SELECT count(*) FROM idem_outbox"), 1);
  auto read = store_->begin();
  const Rows rows = read->execute("SELECT payload FROM idem_outbox");
  const auto event = parse_order_confirmed(rows[0].text(0));
  ASSERT_TRUE(event.ok());
  EXPECT_EQ(event.value().event_id, c->event_id);
  EXPECT_EQ(event.value().order_id, 1);
  EXPECT_EQ(event.value().customer_id, 7);
  EXPECT_EQ(event.value().total_amount, Amount::from_hundredths(1234));
}

TEST_F(OutboxTest, RejectsAnEventIdHeaderAndEmptyTopic) {
  Outbox outbox;
  auto tx = store_->begin();
  EXPECT_THROW(
      outbox.enqueue(*tx,
                     [](const Uuid&) {
                       return OutboxMessage{"order", "1", "t", "{}", {{"event_id", "x"}}, {}};
                     }),
      Error);
  EXPECT_THROW(outbox.enqueue(
                   *tx, [](const Uuid&) { return OutboxMessage{"order", "1", "", "{}", {}, {}}; }),
               Error);
}

// A writer with a connection of its own (idem for Python) inserts what prepare() makes with
// outbox_insert_statement(): the row is the one enqueue() would have written.
TEST_F(OutboxTest, PreparedRowInsertedWithTheStatementIsWhatEnqueueWrites) {
  Outbox outbox;
  OutboxRow row = outbox.prepare([](const Uuid& event_id) {
    OutboxMessage m;
    m.aggregate_type = "order";
    m.aggregate_id = "42";
    m.message_key = "customer-7";
    m.topic = "t";
    m.payload = event_id.to_string();
    return m;
  });
  EXPECT_TRUE(row.event_id.is_v7());
  EXPECT_EQ(row.message.payload, row.event_id.to_string());
  EXPECT_EQ(row.message_key, "customer-7");
  EXPECT_EQ(row.shard, outbox_shard("customer-7"));
  ASSERT_EQ(row.message.headers.size(), 1U);  // the trace starts with the event
  EXPECT_EQ(row.message.headers[0].first, "traceparent");
  EXPECT_EQ(row.headers_json, outbox_headers_to_json(row.message.headers));

  auto tx = store_->begin();
  tx->execute(outbox_insert_statement(), row.event_id, row.message.aggregate_type,
              row.message.aggregate_id, row.message.topic, row.message_key,
              static_cast<std::int64_t>(row.shard), row.message.payload, row.headers_json);
  tx->commit();
  auto read = store_->begin();
  const Rows rows = read->execute("SELECT event_id, message_key, shard, headers FROM idem_outbox");
  ASSERT_EQ(rows.size(), 1U);
  EXPECT_EQ(rows[0].uuid(0), row.event_id);
  EXPECT_EQ(rows[0].text(1), "customer-7");
  EXPECT_EQ(rows[0].int64(2), row.shard);
  EXPECT_EQ(outbox_headers_from_json(rows[0].text(3)), row.message.headers);
}

TEST_F(OutboxTest, PrepareRefusesWhatEnqueueRefusesBeforeWriting) {
  Outbox outbox;
  const auto message = [](std::string topic, std::string header) {
    return [topic = std::move(topic), header = std::move(header)](const Uuid&) {
      OutboxMessage m;
      m.aggregate_type = "order";
      m.aggregate_id = "1";
      m.topic = topic;
      if (!header.empty()) m.headers = {{header, "x"}};
      return m;
    };
  };
  EXPECT_THROW(static_cast<void>(outbox.prepare(message("", ""))), Error);
  EXPECT_THROW(static_cast<void>(outbox.prepare(message("t", "event_id"))), Error);
  EXPECT_NO_THROW(static_cast<void>(outbox.prepare(message("t", "tenant"))));
}

// The statements a run's audit reads the outbox with: the rows after an id, the events a
// group marked among them, and a resend that makes the relay publish rows again.
TEST_F(OutboxTest, RunSliceCountsRowsMarksAndResends) {
  Outbox outbox;
  std::vector<Uuid> ids;
  {
    auto tx = store_->begin();
    EXPECT_EQ(outbox_last_row_id(*tx), 0);
    for (int i = 0; i < 3; ++i) {
      ids.push_back(outbox.enqueue(*tx, [](const Uuid& event_id) {
        OutboxMessage m;
        m.aggregate_type = "order";
        m.aggregate_id = "1";
        m.topic = "t";
        m.payload = "{\"event_id\":\"" + event_id.to_string() + "\"}";
        return m;
      }));
    }
    tx->execute("UPDATE idem_outbox SET published_at = CURRENT_TIMESTAMP");
    const std::vector<Uuid> marked = {ids[1]};
    static_cast<void>(tx->mark_processed_batch(marked, "billing"));
    tx->commit();
  }
  auto tx = store_->begin();
  const std::int64_t last = outbox_last_row_id(*tx);
  EXPECT_EQ(outbox_rows_after(*tx, last - 3).rows, 3);
  EXPECT_EQ(outbox_rows_after(*tx, last - 3).unpublished, 0);
  EXPECT_EQ(outbox_rows_after(*tx, last - 1).rows, 1);
  EXPECT_EQ(outbox_events_processed(*tx, "billing", last - 3), 1);
  EXPECT_EQ(outbox_events_processed(*tx, "billing", last - 1), 0) << "the marked row is before";
  EXPECT_EQ(outbox_events_processed(*tx, "analytics", last - 3), 0);
  EXPECT_EQ(republish_outbox_rows(*tx, last - 1, last + 1), 2);
  EXPECT_EQ(outbox_rows_after(*tx, last - 3).unpublished, 2);
}

TEST(OutboxShard, IsAStableHashOfTheKey) {
  // FNV-1a 32: these values are stored in rows, so they must never change.
  EXPECT_EQ(outbox_shard(""), static_cast<int>(2166136261U % 64));
  EXPECT_EQ(outbox_shard("a"), static_cast<int>(0xe40c292cU % 64));
  for (int i = 0; i < 1000; ++i) {
    const int s = outbox_shard(std::to_string(i));
    EXPECT_GE(s, 0);
    EXPECT_LT(s, kOutboxShards);
  }
}

}  // namespace outbox_test
}  // namespace idem
