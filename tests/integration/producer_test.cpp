// idem::Producer against the shared dev broker (the mock cluster): key, event_id and traceparent
// headers; delivery reports; a fatal idempotence error rebuilds the handle and resends
// what was not acknowledged with the same event ids.
#include "idem/producer.hpp"

#include <chrono>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/error.hpp"
#include "idem/uuid.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/shared_broker.hpp"

namespace idem {
namespace producer_test {

using namespace std::chrono_literals;

std::string unique_topic(std::string_view prefix) {
  static std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}-{:012x}", prefix, rng() & 0xffffffffffffULL);
}

test::SharedBroker& broker() {
  return test::shared_broker();
}

ProducerConfig config_for_tests() {
  ProducerConfig c;
  c.bootstrap_servers = broker().bootstrap_servers();
  c.kafka = {{"log_level", "2"}};
  return c;
}

TEST(Producer, DeliversWithKeyEventIdAndTraceparentHeaders) {
  const std::string topic = unique_topic("producer-headers");
  broker().create_topic(topic, 3);
  Producer producer(config_for_tests());
  std::map<std::uint64_t, Uuid> sent;
  for (int i = 0; i < 20; ++i) {
    ProducerMessage m;
    m.topic = topic;
    m.key = std::to_string(i);
    m.event_id = new_uuid_v7();
    m.payload = fmt::format("{{\"event_id\":\"{}\"}}", m.event_id.to_string());
    if (i % 2 == 0) m.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const Uuid id = m.event_id;
    sent[producer.send(std::move(m))] = id;
  }
  std::vector<Delivery> reports;
  ASSERT_TRUE(producer.flush(20s, reports));
  ASSERT_EQ(reports.size(), sent.size());
  for (const Delivery& d : reports) {
    EXPECT_TRUE(d.ok) << d.error;
    EXPECT_GE(d.offset, 0);
    EXPECT_TRUE(sent.count(d.ticket));
  }
  EXPECT_EQ(producer.pending(), 0U);

  const auto records = test::read_topic(broker().bootstrap_servers(), topic, 3, 20, 20s);
  ASSERT_EQ(records.size(), 20U);
  for (const auto& r : records) {
    const int i = std::stoi(r.key);
    const auto header = r.header("event_id");
    ASSERT_TRUE(header.has_value());
    EXPECT_NE(r.payload.find(*header), std::string::npos) << "header id == payload id";
    EXPECT_EQ(r.header("traceparent").has_value(), i % 2 == 0);
  }
}

TEST(Producer, FatalErrorRebuildsAndResendsUnacknowledgedWithSameEventIds) {
  const std::string topic = unique_topic("producer-fatal");
  broker().create_topic(topic, 3);
  std::vector<std::string> logs;
  ProducerConfig c = config_for_tests();
  c.log = [&](std::string_view line) { logs.emplace_back(line); };
  Producer producer(c);
  std::set<std::string> ids;
  constexpr int kCount = 200;
  for (int i = 0; i < kCount; ++i) {
    ProducerMessage m;
    m.topic = topic;
    m.key = std::to_string(i % 7);
    m.event_id = new_uuid_v7();
    m.payload = m.event_id.to_string();
    ids.insert(m.payload);
    static_cast<void>(producer.send(std::move(m)));
    if (i == kCount / 2) producer.raise_fatal_error_for_testing("test: simulated fatal error");
  }
  std::vector<Delivery> reports;
  ASSERT_TRUE(producer.flush(30s, reports));
  EXPECT_EQ(producer.rebuilds(), 1U);
  std::set<std::uint64_t> tickets;
  for (const Delivery& d : reports) {
    EXPECT_TRUE(d.ok) << d.error;
    tickets.insert(d.ticket);
  }
  EXPECT_EQ(tickets.size(), static_cast<std::size_t>(kCount)) << "every ticket reported once";

  // Every event is on the topic (some perhaps twice: the mock broker does not dedupe a
  // resend), and every copy carries the id it was born with.
  const auto hw = test::end_offsets(broker().bootstrap_servers(), topic, 3);
  std::size_t total = 0;
  for (const auto o : hw) total += static_cast<std::size_t>(o);
  const auto records = test::read_topic(broker().bootstrap_servers(), topic, 3, total, 20s);
  std::set<std::string> seen;
  for (const auto& r : records) {
    EXPECT_EQ(r.header("event_id").value_or(""), r.payload);
    EXPECT_TRUE(ids.count(r.payload)) << "a resend made a new id: " << r.payload;
    seen.insert(r.payload);
  }
  EXPECT_EQ(seen, ids);
}

TEST(Producer, RejectsMissingBootstrapServers) {
  EXPECT_THROW(Producer(ProducerConfig{}), Error);
}

}  // namespace producer_test
}  // namespace idem
