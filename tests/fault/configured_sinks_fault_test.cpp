// A sink declared in a file, tested from outside, on both backends: a producer that is
// not idem (python3-confluent-kafka, tests/fault/sink_producer.py) sends payments as plain
// JSON, as CloudEvents in binary mode and in structured mode, each with 10% duplicates
// (same event id, new offset) and malformed records; `idem consume --config` runs the
// account-balance sink (UPDATE account SET balance = balance + $amount, one movement row
// per event) and is SIGKILLed once per mode while it consumes (three kills per backend;
// each restart costs a group join, the test's main cost), then restarted. Each mode
// must end with every balance equal to the sum of its distinct events, exact to the cent,
// one movement row per event, and the malformed records in the DLQ, the same as the
// others: the three formats give the same results.
//
// An HTTP sink the same way: orders from the Python producer (plain JSON, then CloudEvents
// with binary and structured mode alternating on one topic), 10% duplicates and malformed
// records, charged through `idem provider` with latency and faults (resets after the
// charge is stored, 503s, 409s "a request with this key is in progress") by `idem consume
// --config`, SIGKILLed mid-stream once per format: one charge per event, the charges of
// one key in offset order, one recorded response row per event holding the provider's
// payment id, and every malformed record in the DLQ.
//
// On the dev broker the tests share, with a topic and a group per run; every `idem
// consume` has the mock group timing.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/store.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/mock_group.hpp"
#include "support/outside_python.hpp"
#include "support/process.hpp"
#include "support/provider_process.hpp"
#include "support/shared_broker.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem {
namespace configured_sinks_fault_test {

using namespace std::chrono_literals;

constexpr int kEvents = 200;

// `idem consume --config` SIGKILLed once `rows()` reaches `kill_at` (or all), then
// restarted and stopped by SIGTERM once `rows()` is `all`.
template <class Rows>
void consume_through_a_sigkill(const std::filesystem::path& config, Rows rows, std::int64_t kill_at,
                               std::int64_t all) {
  {
    test::ChildProcess cli = test::ChildProcess::spawn(
        IDEM_CLI_PATH, test::with_mock_group({"consume", "--config", config.string()}));
    ASSERT_TRUE(test::eventually(
        [&] {
          const std::int64_t n = rows();
          return n >= kill_at || n == all;
        },
        90s));
    cli.kill(SIGKILL);
    (void)cli.wait(30s);
  }
  test::ChildProcess cli = test::ChildProcess::spawn(
      IDEM_CLI_PATH, test::with_mock_group({"consume", "--config", config.string()}));
  // Its stop signals are handled once it says so (the first life may have done it all).
  ASSERT_TRUE(test::read_line_starting_with(cli, "consuming ", 60s));
  ASSERT_TRUE(test::eventually([&] { return rows() == all; }, 120s))
      << rows() << " rows of " << all;
  cli.kill(SIGTERM);
  EXPECT_EQ(cli.wait(30s), 0);
}

// The Python interpreter with confluent_kafka and tests/fault/sink_producer.py; nullopt
// (the test skipped, or failed under CI) without them.
std::optional<std::pair<std::string, std::filesystem::path>> sink_producer() {
  const auto python = test::find_python_with_confluent_kafka();
  const auto script = test::fault_test_script("sink_producer.py", "IDEM_TEST_SINK_PRODUCER");
  if (!python || !script) {
    test::skip_or_fail("no python3 with confluent_kafka (apt-get install python3-confluent-kafka)");
    return std::nullopt;
  }
  return std::pair(*python, *script);
}

template <class B>
class ConfiguredSinksFault : public ::testing::Test {};
TYPED_TEST_SUITE(ConfiguredSinksFault, test::AllBackends, test::BackendName);

TYPED_TEST(ConfiguredSinksFault, BalancesEndExactInEveryFormatThroughSigkills) {
  IDEM_REQUIRE_CLI();
  const auto producer = sink_producer();
  if (!producer) return;
  const auto& [python, script] = *producer;
  test::SharedBroker& broker = test::shared_broker();
  std::map<std::string, std::map<std::string, std::int64_t>> results;  // mode -> balances
  for (const std::string mode : {"json", "binary", "structured"}) {
    SCOPED_TRACE(mode);
    const std::string url = TypeParam::fresh_url();
    if (url.empty()) return;
    auto store = open_store(url);
    {
      auto tx = store->begin();
      const bool sqlite = TypeParam::kind == Backend::Sqlite;
      tx->execute(
          sqlite ? "CREATE TABLE account (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)"
                 : "CREATE TABLE account (id text PRIMARY KEY, balance numeric(18,2) NOT NULL)");
      tx->execute(sqlite ? "CREATE TABLE movement (event_id BLOB NOT NULL, account TEXT NOT NULL, "
                           "amount INTEGER NOT NULL)"
                         : "CREATE TABLE movement (event_id uuid NOT NULL, account text NOT NULL, "
                           "amount numeric(18,2) NOT NULL)");
      for (int a = 0; a < 5; ++a)
        tx->execute("INSERT INTO account (id, balance) VALUES ($1, 0)", fmt::format("acct-{}", a));
      tx->commit();
    }
    const std::string topic = test::unique_name("pay-" + mode);
    broker.create_topic(topic, 3);
    broker.create_topic(topic + ".dlq", 1);
    const auto sent = test::run_to_completion(
        python,
        {script.string(), "--bootstrap", broker.bootstrap_servers(), "--topic", topic, "--mode",
         mode, "--events", std::to_string(kEvents)},
        {}, 120s);
    ASSERT_EQ(sent.status, 0) << sent.output;
    const auto report = nlohmann::json::parse(
        sent.output.substr(sent.output.rfind('{', sent.output.rfind("\"balances\""))));
    const auto config = test::scratch_dir() / (topic + ".toml");
    std::ofstream(config) << fmt::format(
        // Static membership: a consumer restarted after a SIGKILL gets its partitions back
        // at once instead of after the dead member's session timeout (the mock group
        // timing's, given as flags).
        "store.url = \"{}\"\nconsumer.group = \"{}\"\nconsumer.batch_size = 20\n"
        "consumer.instance_id = \"sink-1\"\n"
        "[kafka]\n\"bootstrap.servers\" = \"{}\"\n\"auto.offset.reset\" = \"earliest\"\n"
        "[routes]\nformat = \"{}\"\n"
        "[routes.balance]\ntopic = \"{}\"\ntype = \"payment.received.v1\"\n"
        "sql = [\"UPDATE account SET balance = balance + $amount WHERE id = $account\",\n"
        "  \"INSERT INTO movement (event_id, account, amount) VALUES ($event_id, $account, "
        "$amount)\"]\n"
        "[routes.balance.params]\naccount = {{ from = \"/account\", type = \"text\" }}\n"
        "amount = {{ from = \"/amount\", type = \"numeric\", precision = 18, scale = 2 }}\n",
        url, topic, broker.bootstrap_servers(), mode == "json" ? "json" : "cloudevents", topic);
    const auto movements = [&] {
      return TypeParam::read_scalar(*store, "SELECT count(*) FROM movement");
    };
    // Killed after some effects committed, before all.
    ASSERT_NO_FATAL_FAILURE(consume_through_a_sigkill(config, movements, 1, kEvents));
    EXPECT_EQ(TypeParam::read_scalar(*store, "SELECT count(DISTINCT event_id) FROM movement"),
              kEvents);
    for (const auto& [account, cents] : report.at("balances").items()) {
      const std::int64_t balance = TypeParam::read_scalar(
          *store, TypeParam::kind == Backend::Sqlite
                      ? fmt::format("SELECT balance FROM account WHERE id = '{}'", account)
                      : fmt::format("SELECT (balance * 100)::bigint FROM account WHERE id = '{}'",
                                    account));
      EXPECT_EQ(balance, cents.template get<std::int64_t>()) << account;
      results[mode][account] = balance;
    }
  }
  EXPECT_EQ(results["binary"], results["json"]);
  EXPECT_EQ(results["structured"], results["json"]);
}

constexpr int kOrders = 120;

// The routes of the HTTP sink: charge, then record the provider's payment id in the
// transaction of the mark. Amounts are numeric: minor units on SQLite.
constexpr std::string_view kChargeRoutes = R"toml(
[routes]
format = "{format}"
[routes.charge]
topic = "{topic}"
type = "order.confirmed.v1"
sql = ["INSERT INTO charge_log (order_id, event_id, amount, payment_id) VALUES ($order_id, $event_id, $amount, $payment_id)"]
[routes.charge.params]
order_id = {{ from = "/order_id", type = "integer" }}
amount = {{ from = "/total_amount", type = "numeric", precision = 18, scale = 2 }}
payment_id = {{ from = "response:/payment_id", type = "text" }}
[routes.charge.http]
url = "{provider}/payments/charge"
body = '{{"order_id": {{order_id}}, "amount": {{amount}}}}'
)toml";

TYPED_TEST(ConfiguredSinksFault, HttpSinkChargesOncePerEventThroughProviderFaultsAndSigkills) {
  IDEM_REQUIRE_CLI();
  const auto producer = sink_producer();
  if (!producer) return;
  const auto& [python, script] = *producer;
  test::SharedBroker& broker = test::shared_broker();
  for (const std::string format : {"json", "cloudevents"}) {
    SCOPED_TRACE(format);
    const std::string url = TypeParam::fresh_url();
    if (url.empty()) return;
    auto store = open_store(url);
    {
      auto tx = store->begin();
      tx->execute(TypeParam::kind == Backend::Sqlite
                      ? "CREATE TABLE charge_log (order_id INTEGER NOT NULL, event_id BLOB NOT "
                        "NULL, amount INTEGER NOT NULL, payment_id TEXT NOT NULL)"
                      : "CREATE TABLE charge_log (order_id bigint NOT NULL, event_id uuid NOT "
                        "NULL, amount numeric(18,2) NOT NULL, payment_id text NOT NULL)");
      tx->commit();
    }
    const std::string provider_db = test::fresh_sqlite_url();
    test::ProviderProcess provider(IDEM_CLI_PATH, provider_db,
                                   {"--reset-after-commit", "0.1", "--unavailable", "0.1",
                                    "--in-progress", "0.1", "--latency", "20ms"});
    const std::string topic = test::unique_name("orders-" + format);
    broker.create_topic(topic, 3);
    broker.create_topic(topic + ".dlq", 1);
    const auto sent = test::run_to_completion(
        python,
        {script.string(), "--bootstrap", broker.bootstrap_servers(), "--topic", topic, "--mode",
         format, "--kind", "orders", "--events", std::to_string(kOrders)},
        {}, 120s);
    ASSERT_EQ(sent.status, 0) << sent.output;
    const auto report = nlohmann::json::parse(sent.output.substr(sent.output.rfind("{\"events\"")));
    const auto config = test::scratch_dir() / (topic + ".toml");
    std::ofstream(config) << fmt::format(
        "store.url = \"{}\"\nconsumer.group = \"{}\"\nconsumer.batch_size = 20\n"
        "consumer.max_in_flight = 32\nconsumer.instance_id = \"charge-1\"\n"
        "[kafka]\n\"bootstrap.servers\" = \"{}\"\n\"auto.offset.reset\" = \"earliest\"\n{}",
        url, topic, broker.bootstrap_servers(),
        fmt::format(fmt::runtime(std::string(kChargeRoutes)), fmt::arg("format", format),
                    fmt::arg("topic", topic), fmt::arg("provider", provider.url())));
    const auto recorded = [&] {
      return TypeParam::read_scalar(*store, "SELECT count(*) FROM charge_log");
    };
    // Killed with calls in flight, a quarter of the orders recorded.
    ASSERT_NO_FATAL_FAILURE(consume_through_a_sigkill(config, recorded, kOrders / 4, kOrders));
    // The faults did happen: the sink met every kind and still charged once per event.
    const auto summary = test::http_get(provider.url(), "/payments/summary");
    ASSERT_EQ(summary.status, 200);
    for (const char* fault : {"resets_after_commit", "unavailable", "in_progress"})
      EXPECT_GT(summary.body.value(fault, 0), 0) << fault << ": " << summary.body.dump();
    // One recorded response row per event, each with the payment id the provider gave it.
    EXPECT_EQ(TypeParam::read_scalar(*store, "SELECT count(DISTINCT event_id) FROM charge_log"),
              kOrders);
    const auto charges = test::provider_charges(provider_db);
    EXPECT_EQ(charges.size(), static_cast<std::size_t>(kOrders));
    std::map<std::int64_t, std::string> payment_of;
    std::map<std::int64_t, std::int64_t> last_of_key;  // charges of one key in offset order
    for (const auto& c : charges) {
      EXPECT_TRUE(payment_of.emplace(c.order_id, c.payment_id).second)
          << "order " << c.order_id << " charged twice";
      std::int64_t& last = last_of_key[c.order_id % 7];
      EXPECT_LT(last, c.order_id) << "customer " << c.order_id % 7;
      last = c.order_id;
    }
    {
      auto tx = store->begin();
      const Rows rows = tx->execute("SELECT order_id, payment_id FROM charge_log");
      for (std::size_t r = 0; r < rows.size(); ++r) {
        const auto it = payment_of.find(rows[r].int64(0));
        ASSERT_NE(it, payment_of.end()) << "order " << rows[r].int64(0) << " never charged";
        EXPECT_EQ(rows[r].text(1), it->second) << "order " << it->first;
      }
      tx->rollback();
    }
    // Every malformed record in the DLQ (a SIGKILL may have sent one twice: count offsets).
    const std::size_t malformed = report.at("malformed").template get<std::size_t>();
    std::set<std::string> dead;
    ASSERT_TRUE(test::eventually(
        [&] {
          for (const auto& letter :
               read_topic(broker.bootstrap_servers(), topic + ".dlq", 1, malformed, 10s)) {
            const auto partition = letter.header("idem.original.partition");
            const auto offset = letter.header("idem.original.offset");
            if (partition && offset) dead.insert(*partition + ":" + *offset);
          }
          return dead.size() == malformed;
        },
        60s))
        << dead.size() << " of " << malformed << " malformed records in the DLQ";
  }
}

}  // namespace configured_sinks_fault_test
}  // namespace idem
