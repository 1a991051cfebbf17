// The web console's API over plain HTTP (no browser), on the in-process mock cluster and
// a SQLite store: a replay without the token, with a wrong one, from another origin or
// through another Host name is refused and sends nothing; a dry run sends nothing; a
// replay with the token sends the letter once, through the code of `idem dlq replay`, and
// is in the audit table with its operator; inputs are validated; the page forbids inline
// scripts. The browser test (console_browser_test.cpp) drives the same console in Chromium.
#include "idem/console/console.hpp"
#include "idem/console/schema.hpp"

#include <httplib.h>

#include <chrono>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "idem/metrics/metrics.hpp"
#include "idem/store.hpp"
#include "support/dead_letters.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/store_backends.hpp"
#include "support/wait.hpp"

namespace idem {
namespace console_test {

using namespace std::chrono_literals;
using nlohmann::json;

class ConsoleHttpTest : public test::DevBrokerSuite {
 protected:
  void SetUp() override {
    db_url_ = test::fresh_sqlite_url();
    auto store = open_store(db_url_);
    static_cast<void>(store->migrate());
    static_cast<void>(store->migrate_set(console_migrations()));
    topic_ = test::unique_name("orders");
    broker_->create_topic(topic_, 1);
    broker_->create_topic(dlq(), 1);
    event_ = test::console_order(1);
    test::KafkaTestProducer producer(broker_->bootstrap_servers());
    producer.send(test::dead_letter_of(event_, dlq(), topic_, "billing", 41, "handler.dead_letter",
                                       "provider said <script>alert(1)</script>"));
    producer.flush();
  }

  [[nodiscard]] std::string dlq() const { return topic_ + ".dlq"; }

  std::unique_ptr<Console> start(const std::string& token) {
    auto console = std::make_unique<Console>(
        test::console_options(broker_->bootstrap_servers(), db_url_, token));
    client_ = test::console_client(*console);
    origin_ = fmt::format("http://127.0.0.1:{}", console->port());
    return console;
  }

  httplib::Result replay(const std::string& token, bool dry_run, httplib::Headers extra = {},
                         const std::string& content_type = "application/json") {
    httplib::Headers h = std::move(extra);
    if (!h.contains("Origin")) h.emplace("Origin", origin_);
    if (!token.empty()) h.emplace("X-Idem-Token", token);
    const json body = {{"topic", dlq()},
                       {"partition", 0},
                       {"offset", 0},
                       {"dry_run", dry_run},
                       {"operator", "ada"}};
    return client_->Post("/api/dlq/replay", h, body.dump(), content_type.c_str());
  }

  [[nodiscard]] std::int64_t sent_to_topic() const {
    return test::end_offsets(broker_->bootstrap_servers(), topic_, 1).at(0);
  }

  [[nodiscard]] json audit() {
    const auto res = client_->Get("/api/audit");
    EXPECT_TRUE(res && res->status == 200);
    return res ? json::parse(res->body)["entries"] : json::array();
  }

  std::string db_url_;
  std::string topic_;
  OrderConfirmed event_;
  std::unique_ptr<httplib::Client> client_;
  std::string origin_;
};

TEST_F(ConsoleHttpTest, AReplayWithoutTheRightTokenOrFromElsewhereIsRefusedAndSendsNothing) {
  const auto console = start("t0ken");
  const auto status = [](const httplib::Result& r) { return r ? r->status : -1; };
  EXPECT_EQ(status(replay("", false)), 403);
  EXPECT_EQ(status(replay("wrong", false)), 403);
  EXPECT_EQ(status(replay("t0ken", false, {{"Origin", "http://evil.example"}})), 403);
  EXPECT_EQ(status(replay("t0ken", false, {}, "text/plain")), 403);
  EXPECT_EQ(status(replay("t0ken", false, {{"Host", "evil.example"}})), 421);
  // A token in a cookie is no token: the browser would attach it to a forged request.
  EXPECT_EQ(status(replay("", false, {{"Cookie", "X-Idem-Token=t0ken"}})), 403);
  const auto refused = replay("", false);
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->body.find("X-Idem-Token"), std::string::npos) << refused->body;
  EXPECT_EQ(sent_to_topic(), 0);
  EXPECT_TRUE(audit().empty()) << "a refused replay is not an attempt";
}

TEST_F(ConsoleHttpTest, ADryRunSaysWhatWouldBeSentAndSendsNothing) {
  const auto console = start("t0ken");
  const auto res = replay("", true);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json r = json::parse(res->body);
  EXPECT_EQ(r["action"], "replayed");
  EXPECT_EQ(r["target_topic"], topic_);
  EXPECT_EQ(r["event_id"], event_.event_id.to_string());
  EXPECT_EQ(sent_to_topic(), 0);
  EXPECT_TRUE(audit().empty());
}

TEST_F(ConsoleHttpTest, AReplayWithTheTokenSendsTheLetterOnceAndIsAudited) {
  const auto console = start("t0ken");
  const auto res = replay("t0ken", false);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["action"], "replayed");
  EXPECT_EQ(sent_to_topic(), 1);
  const auto records = test::read_topic(broker_->bootstrap_servers(), topic_, 1, 1, 10s);
  ASSERT_EQ(records.size(), 1U);
  EXPECT_EQ(records[0].payload, to_json(event_));
  const json entries = audit();
  ASSERT_EQ(entries.size(), 1U);
  EXPECT_EQ(entries[0]["operator"], "ada");
  EXPECT_EQ(entries[0]["outcome"], "replayed");
  EXPECT_EQ(entries[0]["event_id"], event_.event_id.to_string());
  EXPECT_EQ(entries[0]["dlq_topic"], dlq());
  EXPECT_EQ(entries[0]["target_topic"], topic_);
  EXPECT_EQ(entries[0]["remote_addr"], "127.0.0.1");
}

TEST_F(ConsoleHttpTest, WithoutAConfiguredTokenReplayIsOff) {
  const auto console = start("");
  const auto res = replay("anything", false);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  EXPECT_NE(res->body.find("no console.token"), std::string::npos) << res->body;
  EXPECT_EQ(sent_to_topic(), 0);
}

TEST_F(ConsoleHttpTest, InputsAreValidatedAndMessagesComeBackAsData) {
  const auto console = start("t0ken");
  EXPECT_EQ(client_->Get(fmt::format("/api/dlq/letters?topic={}", topic_))->status, 400)
      << "only dead-letter topics";
  EXPECT_EQ(client_->Get("/api/dlq/letters?topic=a%20b.dlq")->status, 400);
  EXPECT_EQ(
      client_->Get(fmt::format("/api/dlq/letter?topic={}&partition=x&offset=0", dlq()))->status,
      400);
  EXPECT_EQ(
      client_->Get(fmt::format("/api/dlq/letter?topic={}&partition=0&offset=7", dlq()))->status,
      404);
  EXPECT_EQ(
      client_->Get(fmt::format("/api/dlq/letters?topic={}&q={}", dlq(), std::string(201, 'a')))
          ->status,
      400);
  const auto list = client_->Get(fmt::format("/api/dlq/letters?topic={}&q=SCRIPT", dlq()));
  ASSERT_TRUE(list);
  ASSERT_EQ(list->status, 200) << list->body;
  const json letters = json::parse(list->body)["letters"];
  ASSERT_EQ(letters.size(), 1U);
  EXPECT_EQ(letters[0]["message"], "provider said <script>alert(1)</script>");
  EXPECT_EQ(list->get_header_value("Content-Type"), "application/json; charset=utf-8");
  EXPECT_EQ(list->get_header_value("X-Content-Type-Options"), "nosniff");

  const auto page = client_->Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("script-src 'self'"),
            std::string::npos);
  EXPECT_EQ(page->body.find("<script>"), std::string::npos) << "no inline script";
  EXPECT_EQ(client_->Get("/app.js")->status, 200);
  EXPECT_EQ(client_->Get("/", {{"Host", "attacker.example"}})->status, 421);
}

TEST_F(ConsoleHttpTest, OnAnAdminPortItAlsoServesMetricsHealthAndReadiness) {
  Metrics metrics;
  ConsoleOptions o;
  o.listen = "127.0.0.1:0";
  o.kafka = DlqConnection{broker_->bootstrap_servers(), {}, 20s};
  o.store_url = db_url_;
  o.admin_metrics = &metrics;
  o.readiness = {{"always", [] { return std::optional<std::string>(); }},
                 {"never", [] { return std::optional<std::string>("not today"); }}};
  Console console(std::move(o));
  httplib::Client http("127.0.0.1", console.port());
  EXPECT_EQ(http.Get("/metrics")->status, 200);
  EXPECT_EQ(http.Get("/healthz")->body, "ok\n");
  const auto ready = http.Get("/readyz");
  EXPECT_EQ(ready->status, 503);
  EXPECT_NE(ready->body.find("never: not today"), std::string::npos) << ready->body;
  EXPECT_EQ(http.Get("/")->status, 200);

  const auto plain = start("");
  EXPECT_EQ(client_->Get("/metrics")->status, 404) << "only on an admin port";
}

}  // namespace console_test
}  // namespace idem
