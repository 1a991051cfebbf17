// Parts of the relay on their own, without a broker: the claim reader and the markers
// against a SQLite file, and the in-flight batches' acknowledgement bookkeeping.
#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "idem/outbox.hpp"
#include "idem/store.hpp"
#include "outbox/claim_reader.hpp"
#include "outbox/in_flight_batches.hpp"
#include "outbox/markers.hpp"
#include "outbox/shared_connection.hpp"
#include "stores/outbox_queries.hpp"
#include "support/store_backends.hpp"

namespace idem {
namespace relay_parts_test {

using std::chrono::milliseconds;

Delivery delivery(std::uint64_t ticket, bool ok, std::string error = {}) {
  Delivery d;
  d.ticket = ticket;
  d.ok = ok;
  d.error = std::move(error);
  return d;
}

class ClaimReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = test::fresh_sqlite_url();
    connection_ = std::make_unique<detail::SharedConnection>(open_store(url_));
    connection_->store().migrate();
  }

  Uuid enqueue(const std::string& key,
               std::vector<std::pair<std::string, std::string>> headers = {}) {
    auto tx = connection_->store().begin();
    const Uuid id = Outbox().enqueue(*tx, [&](const Uuid& event_id) {
      OutboxMessage m;
      m.aggregate_type = "order";
      m.aggregate_id = key;
      m.topic = "orders";
      m.payload = "{\"event_id\":\"" + event_id.to_string() + "\"}";
      m.headers = headers;
      return m;
    });
    tx->commit();
    return id;
  }

  detail::ClaimedBatch claim(detail::ClaimReader& reader, std::int64_t after_id) {
    reader.request(after_id, queries().shard_filter({}));
    EXPECT_TRUE(reader.outstanding());
    std::optional<detail::ClaimedBatch> batch;
    for (int i = 0; i < 1000 && !batch; ++i) {
      reader.wait(milliseconds(10));
      batch = reader.take();
    }
    EXPECT_TRUE(batch.has_value()) << "the claim thread never answered";
    EXPECT_FALSE(reader.outstanding());
    if (batch && batch->error) std::rethrow_exception(batch->error);
    return batch ? std::move(*batch) : detail::ClaimedBatch{};
  }

  const detail::OutboxQueries& queries() { return detail::outbox_queries(connection_->store()); }

  std::string url_;
  std::unique_ptr<detail::SharedConnection> connection_;
};

TEST_F(ClaimReaderTest, ReadsUnpublishedRowsInIdOrderWithTheirOwnEventIds) {
  const Uuid first = enqueue("a", {{"traceparent", "00-abc-def-01"}, {"tenant", "t1"}});
  const Uuid second = enqueue("b");
  detail::ClaimReader reader(*connection_, queries(), 10);

  const detail::ClaimedBatch batch = claim(reader, 0);
  ASSERT_EQ(batch.ids.size(), 2U);
  ASSERT_EQ(batch.messages.size(), 2U);
  EXPECT_LT(batch.ids[0], batch.ids[1]);
  EXPECT_EQ(batch.session, 0);  // SQLite: ownership has no session
  EXPECT_EQ(batch.messages[0].event_id, first);
  EXPECT_EQ(batch.messages[1].event_id, second);
  EXPECT_EQ(batch.messages[0].topic, "orders");
  EXPECT_EQ(batch.messages[0].key, "a");
  EXPECT_EQ(batch.messages[0].traceparent, "00-abc-def-01");
  ASSERT_EQ(batch.messages[0].headers.size(), 1U);
  EXPECT_EQ(batch.messages[0].headers[0].first, "tenant");
  EXPECT_TRUE(batch.messages[1].headers.empty());
}

TEST_F(ClaimReaderTest, ClaimsPastTheCursorInBatchesOfTheConfiguredSize) {
  for (int i = 0; i < 5; ++i) enqueue(std::string("k").append(std::to_string(i)));
  detail::ClaimReader reader(*connection_, queries(), 2);

  const detail::ClaimedBatch one = claim(reader, 0);
  ASSERT_EQ(one.ids.size(), 2U);
  const detail::ClaimedBatch two = claim(reader, one.ids.back());
  ASSERT_EQ(two.ids.size(), 2U);
  EXPECT_GT(two.ids.front(), one.ids.back());
  const detail::ClaimedBatch three = claim(reader, two.ids.back());
  EXPECT_EQ(three.ids.size(), 1U);
  EXPECT_TRUE(claim(reader, three.ids.back()).ids.empty());
}

TEST_F(ClaimReaderTest, MarkedRowsAreNotClaimedAgain) {
  for (int i = 0; i < 3; ++i) enqueue(std::string("k").append(std::to_string(i)));
  detail::ClaimReader reader(*connection_, queries(), 10);
  detail::ClaimedBatch batch = claim(reader, 0);
  ASSERT_EQ(batch.ids.size(), 3U);

  // No connection of their own: the markers mark inline, on the shared connection.
  detail::Markers markers({}, *connection_, queries(), 2);
  markers.submit(
      detail::MarkJob{.ids = {batch.ids[0], batch.ids[1]}, .rejected = {}, .batches = 1});
  EXPECT_EQ(markers.pending(), 1U);
  const auto results = markers.collect(true);
  ASSERT_EQ(results.size(), 1U);
  EXPECT_TRUE(results[0].ok);
  EXPECT_EQ(results[0].rows, 2U);
  EXPECT_EQ(markers.pending(), 0U);

  const detail::ClaimedBatch rest = claim(reader, 0);
  ASSERT_EQ(rest.ids.size(), 1U);
  EXPECT_EQ(rest.ids[0], batch.ids[2]);
}

TEST_F(ClaimReaderTest, MarkerThreadsMarkOnTheirOwnConnection) {
  for (int i = 0; i < 4; ++i) enqueue(std::string("k").append(std::to_string(i)));
  detail::ClaimReader reader(*connection_, queries(), 10);
  const detail::ClaimedBatch batch = claim(reader, 0);
  ASSERT_EQ(batch.ids.size(), 4U);

  std::vector<std::unique_ptr<Store>> own;
  own.push_back(open_store(url_));
  detail::Markers markers(std::move(own), *connection_, queries(), 3);
  markers.submit(detail::MarkJob{.ids = batch.ids, .rejected = {}, .batches = 2});
  std::size_t marked = 0;
  for (const auto& r : markers.collect(true)) {
    if (!r.ok) std::rethrow_exception(r.error);  // the test fails with the mark's error
    marked += r.rows;
  }
  EXPECT_EQ(marked, 4U);
  EXPECT_TRUE(claim(reader, 0).ids.empty());
}

TEST(InFlightBatches, OnlyAFullyAcknowledgedPrefixIsTakenForMarking) {
  detail::InFlightBatches in_flight;
  in_flight.push({1, 2}, 10);  // tickets 10, 11
  in_flight.push({3}, 12);     // ticket 12
  const std::vector<Delivery> later_first = {delivery(12, true), delivery(10, true)};
  in_flight.apply(later_first);
  EXPECT_EQ(in_flight.take_settled().batches, 0U);  // batch 1 still waits for ticket 11

  const std::vector<Delivery> rest = {delivery(11, true)};
  in_flight.apply(rest);
  const detail::MarkJob job = in_flight.take_settled();
  EXPECT_EQ(job.batches, 2U);
  EXPECT_EQ(job.ids, (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_TRUE(in_flight.empty());
}

TEST(InFlightBatches, AFailedDeliveryBlocksItsBatchAndEverythingAfterIt) {
  detail::InFlightBatches in_flight;
  in_flight.push({1}, 0);
  in_flight.push({2}, 1);
  const std::vector<Delivery> deliveries = {delivery(0, false, "broker said no"),
                                            delivery(1, true)};
  in_flight.apply(deliveries);
  EXPECT_EQ(in_flight.take_settled().batches, 0U);
  ASSERT_NE(in_flight.front_failure(), nullptr);
  EXPECT_EQ(*in_flight.front_failure(), "broker said no");
  EXPECT_EQ(in_flight.clear(), 2U);  // both are sent again
  EXPECT_EQ(in_flight.front_failure(), nullptr);
}

TEST(InFlightBatches, ARowRefusedForGoodIsSetAsideAndDoesNotBlockTheRest) {
  detail::InFlightBatches in_flight;
  in_flight.push({1, 2, 3}, 10);  // tickets 10, 11, 12
  in_flight.push({4}, 13);
  Delivery refused = delivery(11, false, "MSG_SIZE_TOO_LARGE: Broker: Message size too large");
  refused.permanent = true;
  const std::vector<Delivery> deliveries = {delivery(10, true), refused, delivery(12, true),
                                            delivery(13, true)};
  in_flight.apply(deliveries);
  EXPECT_EQ(in_flight.front_failure(), nullptr) << "a permanent refusal is no pipeline failure";
  const detail::MarkJob job = in_flight.take_settled();
  EXPECT_EQ(job.batches, 2U);
  EXPECT_EQ(job.ids, (std::vector<std::int64_t>{1, 3, 4}));
  ASSERT_EQ(job.rejected.size(), 1U);
  EXPECT_EQ(job.rejected[0].id, 2);
  EXPECT_EQ(job.rejected[0].reason, refused.error);
  EXPECT_TRUE(in_flight.empty());
}

}  // namespace relay_parts_test
}  // namespace idem
