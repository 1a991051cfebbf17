// Configured sinks keep money exact from end to end, on both backends: a provider's
// answer read by `idem config test` and by `idem consume` (a fee of 0.00005 is stored as
// 0.00005, not refused as 5e-05), a structured CloudEvent whose amount is the JSON number
// 99999999999999.99 sent on as the call's body and stored, both unchanged (a double would
// make it 99999999999999.98); and a topic in migration read with format "auto", where
// the same event sent as plain JSON, in binary and in structured mode is applied once.
// `idem consume` runs on the dev broker the tests share, with the mock group timing.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "support/cli_run.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/mock_group.hpp"
#include "support/process.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem {
namespace configured_sinks_exact_test {

using namespace std::chrono_literals;

/// An endpoint on loopback that records every body it is sent and answers `answer`.
class CapturingEndpoint {
 public:
  explicit CapturingEndpoint(std::string answer) : answer_(std::move(answer)) {
    server_.Post("/charge", [this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard lock(mutex_);
        bodies_.push_back(req.body);
      }
      res.set_content(answer_, "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    serving_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~CapturingEndpoint() {
    server_.stop();
    serving_.join();
  }
  CapturingEndpoint(const CapturingEndpoint&) = delete;
  CapturingEndpoint& operator=(const CapturingEndpoint&) = delete;

  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] std::vector<std::string> bodies() {
    std::lock_guard lock(mutex_);
    return bodies_;
  }

 private:
  std::string answer_;
  httplib::Server server_;
  int port_ = 0;
  std::thread serving_;
  std::mutex mutex_;
  std::vector<std::string> bodies_;
};

template <class B>
class ConfiguredSinksExact : public test::DevBrokerSuite {
 protected:
  void SetUp() override {
    IDEM_REQUIRE_CLI();
    url_ = B::fresh_url();
    if (url_.empty()) return;
    store_ = open_store(url_);
    topic_ = test::unique_name("exact");
    group_ = test::unique_name("exact");
  }

  [[nodiscard]] static bool sqlite() { return B::kind == Backend::Sqlite; }

  void run(const std::vector<std::string>& statements) {
    auto tx = store_->begin();
    for (const std::string& sql : statements) tx->execute(sql);
    tx->commit();
  }

  /// The first cell of `query`'s first row, as the database writes it.
  std::string text(const std::string& query) {
    auto tx = store_->begin();
    const Rows rows = tx->execute(query);
    tx->commit();
    return rows.empty() ? std::string("(no row)") : std::string(rows[0].text(0));
  }
  std::int64_t scalar(const std::string& sql) { return B::read_scalar(*store_, sql); }

  /// The file: core settings, then the routes.
  std::string write_config(const std::string& routes) {
    const auto path = test::scratch_dir() / (test::unique_name("exact") + ".toml");
    std::ofstream(path) << fmt::format(
        "store.url = \"{}\"\nconsumer.group = \"{}\"\n"
        "[kafka]\n\"bootstrap.servers\" = \"{}\"\n\"auto.offset.reset\" = \"earliest\"\n{}",
        url_, group_, broker_->bootstrap_servers(), routes);
    return path.string();
  }

  test::ChildProcess consume(const std::string& file) {
    return test::ChildProcess::spawn(IDEM_CLI_PATH,
                                     test::with_mock_group({"consume", "--config", file}));
  }

  std::string url_;
  std::unique_ptr<Store> store_;
  std::string topic_;
  std::string group_;
};

TYPED_TEST_SUITE(ConfiguredSinksExact, test::AllBackends, test::BackendName);

// `idem config test` on the configured store: each number of the answer lands in its
// column as the answer wrote it, the exponent form included.
TYPED_TEST(ConfiguredSinksExact, AnAnswersNumbersAreStoredAsWritten) {
  if (this->url_.empty()) return;
  const bool sqlite = this->sqlite();
  this->run({sqlite ? "CREATE TABLE charge_log (order_id INTEGER, fee INTEGER, settled INTEGER, "
                      "big INTEGER, rate INTEGER)"
                    : "CREATE TABLE charge_log (order_id bigint, fee numeric(18,8), settled "
                      "numeric(18,2), big numeric(18,1), rate numeric(18,4))"});
  const std::string file = this->write_config(fmt::format(
      R"toml(
[routes.charge]
topic = "{topic}"
type = "order.confirmed.v1"
sql = ["INSERT INTO charge_log (order_id, fee, settled, big, rate) VALUES ($order_id, $fee, $settled, $big, $rate)"]
[routes.charge.params]
order_id = {{ from = "/order_id", type = "integer" }}
fee = {{ from = "response:/fee", type = "numeric", precision = 18, scale = 8 }}
settled = {{ from = "response:/settled", type = "numeric", precision = 18, scale = 2 }}
big = {{ from = "response:/big", type = "numeric", precision = 18, scale = 1 }}
rate = {{ from = "response:/rate", type = "numeric", precision = 18, scale = 4 }}
[routes.charge.http]
url = "https://provider.example/charge"
body = '{{"order_id": {{order_id}}}}'

[[tests]]
name = "the answer's numbers"
[[tests.events]]
json = {{ event_id = "{id}", event_type = "order.confirmed.v1", order_id = 7 }}
respond = {{ body = '{{"fee": 0.00005, "settled": 99999999999999.99, "big": 1234567890123456.7, "rate": 1.5E-3}}' }}
[[tests.expect_rows]]
query = "SELECT fee, settled, big, rate FROM charge_log"
rows = [[{rows}]]
)toml",
      fmt::arg("topic", this->topic_), fmt::arg("id", new_uuid_v7().to_string()),
      fmt::arg("rows", sqlite ? R"("5000", "9999999999999999", "12345678901234567", "15")"
                              : R"("0.00005000", "99999999999999.99", "1234567890123456.7", )"
                                R"("0.0015")")));
  const auto r =
      test::run_to_completion(IDEM_CLI_PATH, {"config", "test", "--config", file}, {}, 60s);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("1 test(s): 1 passed"), std::string::npos) << r.output;
}

// A structured CloudEvent whose amount is a JSON number, through `idem consume`: the
// provider gets the data as the producer wrote it, and the row holds the same amount;
// the fee of the answer is stored as written.
TYPED_TEST(ConfiguredSinksExact, AStructuredEventsAmountReachesTheProviderAndTheRowUnchanged) {
  if (this->url_.empty()) return;
  const bool sqlite = this->sqlite();
  this->run({sqlite ? "CREATE TABLE charge_log (event_id BLOB, amount INTEGER, fee INTEGER)"
                    : "CREATE TABLE charge_log (event_id uuid, amount numeric(18,2), fee "
                      "numeric(18,8))"});
  this->broker_->create_topic(this->topic_, 1);
  this->broker_->create_topic(this->topic_ + ".dlq", 1);
  CapturingEndpoint endpoint(R"({"payment_id": "p-1", "fee": 0.00005})");
  const std::string data = R"({"order_id": 7, "amount": 99999999999999.99})";
  {
    test::KafkaTestProducer producer(this->broker_->bootstrap_servers());
    producer.send({this->topic_,
                   "7",
                   fmt::format(R"({{"specversion": "1.0", "id": "{}", "source": "/shop", )"
                               R"("type": "order.confirmed.v1", "data": {}}})",
                               new_uuid_v7().to_string(), data),
                   {{"content-type", "application/cloudevents+json; charset=utf-8"}}});
    producer.flush();
  }
  test::ChildProcess cli = this->consume(this->write_config(fmt::format(
      R"toml(
[routes]
format = "cloudevents"
[routes.charge]
topic = "{}"
type = "order.confirmed.v1"
sql = ["INSERT INTO charge_log (event_id, amount, fee) VALUES ($event_id, $amount, $fee)"]
[routes.charge.params]
amount = {{ from = "/amount", type = "numeric", precision = 18, scale = 2 }}
fee = {{ from = "response:/fee", type = "numeric", precision = 18, scale = 8 }}
[routes.charge.http]
url = "http://127.0.0.1:{}/charge"
body = "event"
)toml",
      this->topic_, endpoint.port())));
  ASSERT_TRUE(
      test::eventually([&] { return this->scalar("SELECT count(*) FROM charge_log") == 1; }, 60s))
      << "the event was not applied; calls: " << endpoint.bodies().size();
  cli.kill(SIGTERM);
  EXPECT_EQ(cli.wait(30s), 0);
  ASSERT_FALSE(endpoint.bodies().empty());
  for (const std::string& body : endpoint.bodies()) EXPECT_EQ(body, data);
  EXPECT_EQ(this->text("SELECT amount FROM charge_log"),
            sqlite ? "9999999999999999" : "99999999999999.99");
  EXPECT_EQ(this->text("SELECT fee FROM charge_log"), sqlite ? "5000" : "0.00005000");
}

// A topic whose producers move to CloudEvents one at a time: under format "auto" each
// record is read as its headers say, and an event resent in another form is a duplicate.
TYPED_TEST(ConfiguredSinksExact, AutoReadsAMixedTopicAndAppliesAResendOnce) {
  if (this->url_.empty()) return;
  const bool sqlite = this->sqlite();
  this->run({sqlite ? "CREATE TABLE movement (event_id BLOB NOT NULL, amount INTEGER NOT NULL)"
                    : "CREATE TABLE movement (event_id uuid NOT NULL, amount numeric(18,2) NOT "
                      "NULL)"});
  this->broker_->create_topic(this->topic_, 1);
  this->broker_->create_topic(this->topic_ + ".dlq", 1);
  const auto plain = [](const std::string& id, const std::string& amount) {
    return fmt::format(R"({{"event_id":"{}","event_type":"payment.received.v1","amount":{}}})", id,
                       amount);
  };
  const auto structured = [](const std::string& id, const std::string& amount) {
    return fmt::format(
        R"({{"specversion":"1.0","id":"{}","source":"/pay","type":"payment.received.v1",)"
        R"("data":{{"amount":{}}}}})",
        id, amount);
  };
  const auto binary_headers = [](const std::string& id) -> test::Headers {
    return {{"ce_specversion", "1.0"},
            {"ce_id", id},
            {"ce_source", "/pay"},
            {"ce_type", "payment.received.v1"},
            {"content-type", "application/json"}};
  };
  const test::Headers structured_headers = {{"Content-Type", "application/cloudevents+json"}};
  const std::string resent = new_uuid_v7().to_string();
  const std::string last = new_uuid_v7().to_string();
  {
    test::KafkaTestProducer producer(this->broker_->bootstrap_servers());
    const auto send = [&](std::string payload, test::Headers headers) {
      producer.send({this->topic_, "k", std::move(payload), std::move(headers)});
    };
    // One event in every form: applied once.
    send(plain(resent, "\"1.00\""), {});
    send(R"({"amount":"1.00"})", binary_headers(resent));
    send(structured(resent, "1.00"), structured_headers);
    // Others, one per form (amounts as strings and numbers).
    send(plain(new_uuid_v7().to_string(), "2.00"), {{"content-type", "application/json"}});
    send(R"({"amount":4.00})", binary_headers(new_uuid_v7().to_string()));
    send(structured(new_uuid_v7().to_string(), "\"8.00\""), structured_headers);
    // A content type of the CloudEvents family that cannot be read: dead-lettered.
    send(plain(new_uuid_v7().to_string(), "1000"),
         {{"content-type", "application/cloudevents-batch+json"}});
    send(plain(last, "16.00"), {});
    producer.flush();
  }
  test::ChildProcess cli = this->consume(this->write_config(fmt::format(
      R"toml(
[routes]
format = "auto"
[routes.balance]
topic = "{}"
type = "payment.received.v1"
sql = ["INSERT INTO movement (event_id, amount) VALUES ($event_id, $amount)"]
[routes.balance.params]
amount = {{ from = "/amount", type = "numeric", precision = 18, scale = 2 }}
)toml",
      this->topic_)));
  // The last record is applied after every other (one partition, in offset order).
  std::string last_key = fmt::format("'{}'", last);  // a UUID is 16 bytes on SQLite
  if (sqlite) {
    std::erase(last_key, '-');
    last_key.insert(0, "X");
  }
  ASSERT_TRUE(test::eventually(
      [&] {
        return this->scalar("SELECT count(*) FROM movement WHERE event_id = " + last_key) == 1;
      },
      60s));
  cli.kill(SIGTERM);
  EXPECT_EQ(cli.wait(30s), 0);
  EXPECT_EQ(this->scalar("SELECT count(*) FROM movement"), 5);
  EXPECT_EQ(this->scalar(sqlite ? "SELECT sum(amount) FROM movement"
                                : "SELECT (sum(amount) * 100)::bigint FROM movement"),
            3100);
  EXPECT_EQ(this->scalar("SELECT count(DISTINCT event_id) FROM movement"), 5);
}

}  // namespace configured_sinks_exact_test
}  // namespace idem
