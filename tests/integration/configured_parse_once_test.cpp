// A configured HTTP route's record is parsed once per delivery: the effect path reads it
// when it is polled, its call is made on that event, and its apply transaction (which
// binds the statement's values) reads nothing again. The count is the core's own count of
// JSON documents parsed in this process, so any reader that parsed the record again (the
// sinks', the consumer's, a schema's) would show. In this process: idem::Consumer with
// ConfiguredSinks on the shared dev broker, a SQLite file store, and a real HTTP server on
// loopback that answers every call.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "events/parse_count.hpp"
#include "idem/consumer.hpp"
#include "idem/sinks/configured_sinks.hpp"
#include "idem/sinks/sink_config.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/store_backends.hpp"
#include "support/wait.hpp"

namespace idem {
namespace configured_parse_once_test {

using namespace std::chrono_literals;

class ConfiguredParseOnce : public test::DevBrokerSuite {};

TEST_F(ConfiguredParseOnce, AnHttpRoutesRecordIsParsedOncePerDelivery) {
  const std::string topic = test::unique_name("orders");
  const std::string group = test::unique_name("charges");
  broker_->create_topic(topic, 2);
  broker_->create_topic(topic + ".dlq", 1);

  std::atomic<int> calls{0};
  httplib::Server endpoint;
  endpoint.Post("/charge", [&](const httplib::Request&, httplib::Response& res) {
    ++calls;
    res.set_content(R"({"status":"charged"})", "application/json");
  });
  const int port = endpoint.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { endpoint.listen_after_bind(); });
  struct StopServer {
    httplib::Server& server;
    std::thread& thread;
    ~StopServer() {
      server.stop();
      thread.join();
    }
  } stop_server{endpoint, serving};

  // Values for the statement from the event (an exact amount read from its digits), none
  // from the answer: the answer's body is not parsed, so every parse counted is a record's.
  const std::string file = (test::scratch_dir() / (topic + ".toml")).string();
  std::ofstream(file) << fmt::format(R"toml(
[routes.charge]
topic = "{}"
type = "order.confirmed.v1"
sql = ["INSERT INTO charge_log (order_id, amount, event_id) VALUES ($order_id, $amount, $event_id)"]
[routes.charge.params]
order_id = {{ from = "/order_id", type = "integer" }}
amount = {{ from = "/total_amount", type = "numeric", precision = 18, scale = 2 }}
[routes.charge.http]
url = "http://127.0.0.1:{}/charge"
body = '{{"order_id": {{order_id}}, "amount": {{amount}}}}'
)toml",
                                     topic, port);
  std::optional<sinks::SinkConfig> config = sinks::load_sink_config(file, {});
  ASSERT_TRUE(config);

  const std::string url = test::fresh_sqlite_url();
  {
    auto store = open_store(url);
    store->migrate();
    auto tx = store->begin();
    tx->execute(
        "CREATE TABLE charge_log (order_id INTEGER NOT NULL, amount INTEGER NOT NULL, "
        "event_id BLOB NOT NULL)");
    tx->commit();
  }

  // 30 orders, every fifth sent twice (a producer's resend), and two malformed records.
  constexpr int kOrders = 30;
  int records = 0;
  {
    test::KafkaTestProducer producer(broker_->bootstrap_servers());
    for (int i = 1; i <= kOrders; ++i) {
      const std::string payload = fmt::format(
          R"({{"event_id":"{}","event_type":"order.confirmed.v1","order_id":{},"total_amount":{}.25}})",
          new_uuid_v7().to_string(), i, i);
      for (int copy = 0; copy < (i % 5 == 0 ? 2 : 1); ++copy, ++records)
        producer.send({topic, std::to_string(i), payload, {}});
    }
    producer.send({topic, "x", "{not json", {}});
    producer.send(
        {topic, "y", R"({"event_id":"not-a-uuid","event_type":"order.confirmed.v1"})", {}});
    records += 2;
    producer.flush();
  }

  sinks::ConfiguredSinks routes(std::move(*config), Backend::Sqlite);
  auto consumer = std::make_unique<Consumer>(
      test::mock_consumer_config(broker_->bootstrap_servers(), group, {topic}), open_store(url));
  routes.install(*consumer);
  const std::uint64_t parsed_before = detail::json_documents_parsed();
  test::RunningConsumer running(std::move(consumer));
  ASSERT_TRUE(test::eventually(
      [&] {
        const ConsumerStats s = running->stats();
        return s.processed + s.duplicates + s.dead_lettered == static_cast<std::uint64_t>(records);
      },
      60s));
  ASSERT_TRUE(running.stop());
  const ConsumerStats stats = running->stats();
  const std::uint64_t parsed = detail::json_documents_parsed() - parsed_before;

  EXPECT_EQ(stats.processed, static_cast<std::uint64_t>(kOrders));
  EXPECT_EQ(stats.dead_lettered, 2u);
  EXPECT_GE(calls.load(), kOrders);
  // Per delivery: a record fetched again after a rebalance is a delivery of its own.
  EXPECT_EQ(parsed, stats.delivered) << "records delivered: " << stats.delivered;
  EXPECT_GE(stats.delivered, static_cast<std::uint64_t>(records));
}

}  // namespace configured_parse_once_test
}  // namespace idem
