// `idem consume --config FILE` with routes declared in the file (docs/configured-sinks.md),
// on both backends: an account-balance sink whose balances end exact to the cent with
// duplicates and malformed records in the stream, counted per route on /metrics; bad
// configurations refused before anything is consumed; a table that disappears while
// running stops the consumer instead of dead-lettering the stream; an HTTP route whose
// endpoint refuses every call pauses, on /readyz and /metrics. On the dev broker the
// tests share, with a topic and a group of each test's own; every `idem consume` has the
// mock group timing.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "support/charge_route.hpp"
#include "support/cli_run.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/mock_group.hpp"
#include "support/process.hpp"
#include "support/provider_process.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem {
namespace configured_sinks_test {

using namespace std::chrono_literals;

constexpr int kAccounts = 4;
constexpr int kEvents = 120;

// The user's own tables: money as an exact type of each backend (SQLite has none, so
// cents in an INTEGER, which the route's scale 2 binds into).
std::string account_tables(Backend backend) {
  return backend == Backend::Sqlite
             ? "CREATE TABLE account (id TEXT PRIMARY KEY, balance INTEGER NOT NULL);"
               "CREATE TABLE movement (event_id BLOB NOT NULL, account TEXT NOT NULL REFERENCES "
               "account(id), amount INTEGER NOT NULL)"
             : "CREATE TABLE account (id text PRIMARY KEY, balance numeric(18,2) NOT NULL);"
               "CREATE TABLE movement (event_id uuid NOT NULL, account text NOT NULL REFERENCES "
               "account(id), amount numeric(18,2) NOT NULL)";
}

constexpr std::string_view kRoutes = R"toml(
[routes.balance]
topic = "{topic}"
type = "payment.received.v1"
sql = [
  "UPDATE account SET balance = balance + $amount WHERE id = $account",
  "INSERT INTO movement (event_id, account, amount) VALUES ($event_id, $account, $amount)",
]
[routes.balance.params]
account = {{ from = "/account", type = "text" }}
amount = {{ from = "/amount", type = "numeric", precision = 18, scale = 2 }}
)toml";

template <class B>
class ConfiguredSinksTest : public test::DevBrokerSuite {
 protected:
  void SetUp() override {
    IDEM_REQUIRE_CLI();
    url_ = B::fresh_url();
    if (url_.empty()) return;
    store_ = open_store(url_);
    auto tx = store_->begin();
    std::string sql = account_tables(B::kind);
    for (std::size_t at = 0; at < sql.size();) {
      const std::size_t end = sql.find(';', at);
      tx->execute(sql.substr(at, end - at));
      at = end == std::string::npos ? sql.size() : end + 1;
    }
    for (int a = 0; a < kAccounts; ++a)
      tx->execute("INSERT INTO account (id, balance) VALUES ($1, 0)", fmt::format("acct-{}", a));
    tx->commit();
    topic_ = test::unique_name("payments");
    broker_->create_topic(topic_, 3);
    broker_->create_topic(topic_ + ".dlq", 1);
    group_ = test::unique_name("balance");
  }

  /// The file: core settings, then the routes (`extra` goes into the route's table).
  std::string write_config(const std::string& routes) {
    const auto path = test::scratch_dir() / (test::unique_name("sink") + ".toml");
    std::ofstream(path) << fmt::format(
        "store.url = \"{}\"\nconsumer.group = \"{}\"\nconsumer.batch_size = 50\n"
        "[kafka]\n\"bootstrap.servers\" = \"{}\"\n\"auto.offset.reset\" = \"earliest\"\n{}",
        url_, group_, broker_->bootstrap_servers(), routes);
    return path.string();
  }
  [[nodiscard]] std::string routes() const {
    return fmt::format(fmt::runtime(std::string(kRoutes)), fmt::arg("topic", topic_));
  }

  /// Produces kEvents payments (amounts with every cent value), a resend of every 10th
  /// (same event id, new offset) and three records that can never be valid. Returns the
  /// expected balance of each account in cents.
  std::map<std::string, std::int64_t> produce() {
    std::map<std::string, std::int64_t> expected;
    test::KafkaTestProducer producer(broker_->bootstrap_servers());
    for (int i = 0; i < kEvents; ++i) {
      const std::string account = fmt::format("acct-{}", i % kAccounts);
      const std::int64_t cents = 1 + (i * 37) % 1000;
      expected[account] += cents;
      const std::string payload = fmt::format(
          R"({{"event_id":"{}","event_type":"payment.received.v1","account":"{}","amount":"{}.{:02}"}})",
          new_uuid_v7().to_string(), account, cents / 100, cents % 100);
      producer.send({topic_, account, payload, {}});
      if (i % 10 == 0) producer.send({topic_, account, payload, {}});
    }
    producer.send({topic_, "x", R"({"event_type":"payment.received.v1"})", {}});
    producer.send({topic_,
                   "x",
                   fmt::format(R"({{"event_id":"{}","event_type":"payment.received.v1",)"
                               R"("account":"acct-0","amount":"1.234"}})",
                               new_uuid_v7().to_string()),
                   {}});
    producer.send(
        {topic_,
         "x",
         fmt::format(R"({{"event_id":"{}","event_type":"refund.v1"}})", new_uuid_v7().to_string()),
         {}});
    producer.flush();
    return expected;
  }

  std::int64_t scalar(const std::string& sql) { return B::read_scalar(*store_, sql); }
  std::int64_t cents_of(const std::string& account) {
    return scalar(
        B::kind == Backend::Sqlite
            ? fmt::format("SELECT balance FROM account WHERE id = '{}'", account)
            : fmt::format("SELECT (balance * 100)::bigint FROM account WHERE id = '{}'", account));
  }

  /// `idem consume --config FILE` with the mock group timing.
  test::ChildProcess consume(const std::string& file) {
    return test::ChildProcess::spawn(IDEM_CLI_PATH,
                                     test::with_mock_group({"consume", "--config", file}));
  }

  /// The endpoint answers `status` to every call until it accepts them: the route must
  /// pause (its /readyz line holds `paused_because`), dead-letter nothing, and go on
  /// once the endpoint accepts.
  void expect_paused_until_the_endpoint_accepts(int status, std::string_view paused_because) {
    {
      auto tx = store_->begin();
      tx->execute("CREATE TABLE charge_log (order_id INTEGER NOT NULL, payment_id TEXT NOT NULL)");
      tx->commit();
    }
    std::atomic<bool> refusing{true};
    std::atomic<int> calls{0};
    httplib::Server endpoint;
    endpoint.Post("/charge", [&](const httplib::Request& req, httplib::Response& res) {
      ++calls;
      if (refusing) {
        res.status = status;
        res.set_content(R"({"title":"refused"})", "application/json");
        return;
      }
      res.set_content(fmt::format(R"({{"payment_id":"pay-{}"}})", req.get_header_value("X-Order")),
                      "application/json");
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

    constexpr int kOrders = 5;
    {
      test::KafkaTestProducer producer(broker_->bootstrap_servers());
      for (int i = 1; i <= kOrders; ++i) {
        producer.send(
            {topic_,
             std::to_string(i),
             fmt::format(R"({{"event_id":"{}","event_type":"order.confirmed.v1","order_id":{}}})",
                         new_uuid_v7().to_string(), i),
             {}});
      }
      producer.flush();
    }
    const std::string routes =
        "[admin]\nlisten = \"127.0.0.1:0\"\n" + test::charge_route_toml(topic_, port);
    test::ChildProcess cli = consume(write_config(routes));
    const auto admin_line = test::read_line_starting_with(cli, "admin server on port ", 30s);
    ASSERT_TRUE(admin_line) << "no admin port line";
    httplib::Client admin(
        "127.0.0.1", std::stoi(admin_line->substr(std::string("admin server on port ").size())));
    const std::string labels = fmt::format(R"(group="{}",route="charge")", group_);
    const auto metric_line = [&](const std::string& line) {
      const auto res = admin.Get("/metrics");
      return res && res->status == 200 && res->body.find(line) != std::string::npos;
    };

    std::string readyz;
    ASSERT_TRUE(test::eventually(
        [&] {
          const auto res = admin.Get("/readyz");
          readyz = res ? fmt::format("{} {}", res->status, res->body) : "no answer";
          return res && res->status == 503 && res->body.find("charge") != std::string::npos &&
                 res->body.find(paused_because) != std::string::npos;
        },
        60s))
        << "/readyz while every call is refused: " << readyz;
    EXPECT_TRUE(metric_line(fmt::format("idem_route_paused{{{}}} 1", labels)));
    // Paused, not dead-lettered: nothing applied, nothing marked, and the calls go on.
    EXPECT_EQ(scalar("SELECT count(*) FROM charge_log"), 0);
    EXPECT_EQ(scalar("SELECT count(*) FROM processed_event"), 0);
    EXPECT_EQ(test::end_offsets(broker_->bootstrap_servers(), topic_ + ".dlq", 1).at(0), 0)
        << "dead letters";
    const int refused = calls.load();
    EXPECT_TRUE(test::eventually([&] { return calls.load() > refused; }, 30s))
        << "a paused route stopped trying";

    refusing = false;
    ASSERT_TRUE(test::eventually(
        [&] { return scalar("SELECT count(*) FROM charge_log") == kOrders; }, 60s));
    EXPECT_TRUE(test::eventually(
        [&] {
          const auto res = admin.Get("/readyz");
          return res && res->status == 200;
        },
        30s))
        << "still not ready after the route resumed";
    EXPECT_TRUE(metric_line(fmt::format("idem_route_paused{{{}}} 0", labels)));
    // Every call, refused or not, is in the route's latency histogram.
    const std::string count_prefix =
        fmt::format("idem_route_call_duration_seconds_count{{{}}} ", labels);
    std::string metrics;
    ASSERT_TRUE(test::eventually(
        [&] {
          const auto res = admin.Get("/metrics");
          metrics = res ? res->body : "";
          return metrics.find(count_prefix) != std::string::npos;
        },
        30s))
        << metrics;
    const std::size_t at = metrics.find(count_prefix) + count_prefix.size();
    // A refused call ends (and is counted); a call held by the breaker ends only once.
    EXPECT_GE(std::stoll(metrics.substr(at, metrics.find('\n', at) - at)),
              status == 503 ? kOrders : kOrders + 1)
        << metrics.substr(at - count_prefix.size(), 200);
    EXPECT_EQ(scalar("SELECT count(DISTINCT payment_id) FROM charge_log"), kOrders);
    cli.kill(SIGTERM);
    EXPECT_EQ(cli.wait(30s), 0);
  }

  std::string url_;
  std::unique_ptr<Store> store_;
  std::string topic_;
  std::string group_;
};

TYPED_TEST_SUITE(ConfiguredSinksTest, test::AllBackends, test::BackendName);

TYPED_TEST(ConfiguredSinksTest, BalancesEndExactWithDuplicatesAndMalformedRecords) {
  if (this->url_.empty()) return;
  const auto expected = this->produce();
  test::ChildProcess cli =
      this->consume(this->write_config("[admin]\nlisten = \"127.0.0.1:0\"\n" + this->routes()));
  const auto admin_line = test::read_line_starting_with(cli, "admin server on port ", 30s);
  ASSERT_TRUE(admin_line) << "no admin port line";
  ASSERT_TRUE(test::eventually(
      [&] { return this->scalar("SELECT count(*) FROM movement") == kEvents; }, 60s));
  // The route's own counts: the record with a bad amount is the route's; the one without
  // an id and the one of an unrouted type are counted only in the consumer's totals.
  httplib::Client http("127.0.0.1",
                       std::stoi(admin_line->substr(std::string("admin server on port ").size())));
  const std::string labels = fmt::format(R"(group="{}",route="balance")", this->group_);
  const std::vector<std::string> wanted = {
      fmt::format("idem_route_events_applied_total{{{}}} {}", labels, kEvents),
      fmt::format("idem_route_duplicates_skipped_total{{{}}} {}", labels, kEvents / 10),
      fmt::format(R"(idem_route_dead_lettered_total{{{},reason="validation.)", labels)};
  std::string metrics;
  EXPECT_TRUE(test::eventually(
      [&] {
        const auto res = http.Get("/metrics");
        metrics = res ? res->body : "";
        return std::all_of(wanted.begin(), wanted.end(), [&](const std::string& line) {
          return metrics.find(line) != std::string::npos;
        });
      },
      30s))
      << metrics;
  const std::size_t dlq = metrics.find(wanted.back());
  if (dlq != std::string::npos) {
    EXPECT_EQ(metrics.substr(metrics.find('}', dlq), 4), "} 1\n") << metrics.substr(dlq, 200);
  }
  cli.kill(SIGTERM);
  std::vector<std::string> lines;
  (void)test::expect_line(cli, "never", 30s, &lines);
  EXPECT_EQ(cli.wait(30s), 0);
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.back().find("dead_lettered=3"), std::string::npos) << lines.back();
  EXPECT_NE(lines.back().find("processed=120"), std::string::npos) << lines.back();
  for (const auto& [account, cents] : expected)
    EXPECT_EQ(this->cents_of(account), cents) << account;
  EXPECT_EQ(this->scalar("SELECT count(DISTINCT event_id) FROM movement"), kEvents);
  // Only idem's own tables were created: none of the reference system's.
  EXPECT_EQ(this->scalar(TypeParam::kind == Backend::Sqlite
                             ? "SELECT count(*) FROM sqlite_master WHERE name = 'orders'"
                             : "SELECT count(*) FROM pg_tables WHERE tablename = 'orders'"),
            0);
}

TYPED_TEST(ConfiguredSinksTest, BadConfigurationsFailBeforeAnythingIsConsumed) {
  if (this->url_.empty()) return;
  (void)this->produce();
  const std::string good = this->routes();
  const auto replaced = [&](std::string_view from, std::string_view to) {
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {replaced("type = \"payment.received.v1\"", "type = \"payment.received.v1\"\ncolour = 1"),
       "routes.balance.colour"},
      {replaced("\"/account\"", "\"account\""), "is neither a JSON pointer"},
      {replaced("type = \"text\"", "type = \"string\""), "unknown type 'string'"},
      {replaced("UPDATE account", "UPDATE acount"), "routes.balance.sql[0]"},
  };
  for (const auto& [routes, expected] : cases) {
    const std::string path = this->write_config(routes);
    for (const std::vector<std::string>& command :
         {std::vector<std::string>{"consume"}, {"config", "check"}, {"config", "test"}}) {
      std::vector<std::string> args = command;
      args.insert(args.end(), {"--config", path});
      const auto r = test::run_to_completion(IDEM_CLI_PATH, args, {}, 60s);
      EXPECT_NE(r.status, 0) << command.back() << ": " << r.output;
      EXPECT_NE(r.output.find(expected), std::string::npos) << command.back() << ": " << r.output;
    }
  }
  EXPECT_EQ(this->scalar("SELECT count(*) FROM movement"), 0);
  EXPECT_EQ(this->scalar("SELECT count(*) FROM processed_event"), 0);
}

TYPED_TEST(ConfiguredSinksTest, ATableThatDisappearsStopsTheConsumerInsteadOfDeadLettering) {
  if (this->url_.empty()) return;
  (void)this->produce();
  test::ChildProcess cli = this->consume(this->write_config(this->routes()));
  ASSERT_TRUE(test::eventually(
      [&] { return this->scalar("SELECT count(*) FROM movement") == kEvents; }, 60s));
  {
    auto tx = this->store_->begin();
    tx->execute("DROP TABLE movement");
    tx->commit();
  }
  test::KafkaTestProducer producer(this->broker_->bootstrap_servers());
  producer.send({this->topic_,
                 "acct-1",
                 fmt::format(R"({{"event_id":"{}","event_type":"payment.received.v1",)"
                             R"("account":"acct-1","amount":"1.00"}})",
                             new_uuid_v7().to_string()),
                 {}});
  producer.flush();
  const auto status = cli.wait_for(60s);
  ASSERT_TRUE(status) << "the consumer went on without its table";
  EXPECT_NE(*status, 0);
  // The event was neither applied nor dead-lettered: it waits for the table to return.
  EXPECT_EQ(this->scalar("SELECT count(*) FROM processed_event"), kEvents);
}

TYPED_TEST(ConfiguredSinksTest, HttpSinkChargesOnceInKeyOrderWithProviderFaults) {
  if (this->url_.empty()) return;
  {
    auto tx = this->store_->begin();
    tx->execute(TypeParam::kind == Backend::Sqlite
                    ? "CREATE TABLE charge_log (order_id INTEGER NOT NULL, event_id BLOB NOT NULL, "
                      "amount TEXT NOT NULL, payment_id TEXT NOT NULL)"
                    : "CREATE TABLE charge_log (order_id bigint NOT NULL, event_id uuid NOT NULL, "
                      "amount numeric(18,2) NOT NULL, payment_id text NOT NULL)");
    tx->commit();
  }
  // Resets after the charge is stored and 503s; a short latency keeps calls overlapping.
  const std::string provider_db = test::fresh_sqlite_url();
  test::ProviderProcess provider(
      IDEM_CLI_PATH, provider_db,
      {"--reset-after-commit", "0.1", "--unavailable", "0.1", "--latency", "5ms"});
  constexpr int kOrders = 60;
  {
    test::KafkaTestProducer producer(this->broker_->bootstrap_servers());
    for (int i = 1; i <= kOrders; ++i) {
      const std::string payload = fmt::format(
          R"({{"event_id":"{}","event_type":"order.confirmed.v1","order_id":{},"total_amount":"{}.{:02}"}})",
          new_uuid_v7().to_string(), i, i, i % 100);
      producer.send({this->topic_, std::to_string(i % 7), payload, {}});
      if (i % 10 == 0) producer.send({this->topic_, std::to_string(i % 7), payload, {}});
    }
    producer.flush();
  }
  const std::string amount_type = TypeParam::kind == Backend::Sqlite ? "text" : "numeric";
  const std::string routes =
      fmt::format(R"toml(
[routes.charge]
topic = "{}"
type = "order.confirmed.v1"
sql = ["INSERT INTO charge_log (order_id, event_id, amount, payment_id) VALUES ($order_id, $event_id, $amount, $payment_id)"]
[routes.charge.params]
order_id = {{ from = "/order_id", type = "integer" }}
amount = {{ from = "/total_amount", type = "{}"{} }}
payment_id = {{ from = "response:/payment_id", type = "text" }}
[routes.charge.http]
url = "{}/payments/charge"
body = '{{"order_id": {{order_id}}, "amount": {{amount}}}}'
headers = {{ X-Order = "{{order_id}}" }}
)toml",
                  this->topic_, amount_type,
                  amount_type == "numeric" ? ", precision = 18, scale = 2" : "", provider.url());
  test::ChildProcess cli = this->consume(this->write_config(routes));
  ASSERT_TRUE(test::eventually(
      [&] { return this->scalar("SELECT count(*) FROM charge_log") == kOrders; }, 90s));
  cli.kill(SIGTERM);
  EXPECT_EQ(cli.wait(30s), 0);
  EXPECT_EQ(this->scalar("SELECT count(DISTINCT order_id) FROM charge_log"), kOrders);
  // One charge per order at the provider, made with the event id as the key.
  const auto charges = test::provider_charges(provider_db);
  EXPECT_EQ(charges.size(), static_cast<std::size_t>(kOrders));
  std::set<std::int64_t> orders;
  std::map<std::int64_t, std::int64_t> last_of_key;  // charges of one key in offset order
  for (const auto& c : charges) {
    EXPECT_TRUE(orders.insert(c.order_id).second) << "order " << c.order_id << " charged twice";
    std::int64_t& last = last_of_key[c.order_id % 7];
    EXPECT_LT(last, c.order_id) << "key " << c.order_id % 7;
    last = c.order_id;
  }
}

// An endpoint that refuses every call alike (401: the route's credentials) pauses the
// route instead of dead-lettering the stream: /readyz answers 503 naming the route and
// idem_route_paused is 1 while it lasts. Once the endpoint accepts, the same events are
// charged, /readyz is 200 again, idem_route_paused 0, and the route's call latency
// histogram counts its calls. The endpoint is a real HTTP server in this process; the
// consumer is `idem consume --config` in its own.
TYPED_TEST(ConfiguredSinksTest, ARouteRefusedByItsEndpointPausesAndShowsOnReadyzAndMetrics) {
  if (this->url_.empty()) return;
  this->expect_paused_until_the_endpoint_accepts(401, "HTTP 401");
}

// An endpoint that is down (503 to every call, as a load balancer answers for a provider
// that is gone) pauses the route through the HTTP client's circuit breaker: its calls
// wait for the endpoint instead of spending their attempts, and no record is retried
// through the consumer's backoff or dead-lettered for the outage.
TYPED_TEST(ConfiguredSinksTest, AnEndpointThatIsDownPausesItsRouteBehindTheBreaker) {
  if (this->url_.empty()) return;
  this->expect_paused_until_the_endpoint_accepts(503, "is down (HTTP 503)");
}

}  // namespace configured_sinks_test
}  // namespace idem
