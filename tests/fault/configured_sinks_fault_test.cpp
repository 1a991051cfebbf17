// A sink declared in a file, tested from outside, on both backends: a producer that is
// not idem (python3-confluent-kafka, tests/fault/sink_producer.py) sends payments as plain
// JSON, as CloudEvents in binary mode and in structured mode, each with 10% duplicates
// (same event id, new offset) and malformed records; `idem consume --config` runs the
// account-balance sink (UPDATE account SET balance = balance + $amount, one movement row
// per event) and is SIGKILLed once per mode while it consumes (three kills per backend;
// each restart costs a group join, the test's main cost), then restarted. Each mode
// must end with every balance equal to the sum of its distinct events, exact to the cent,
// one movement row per event, and the malformed records in the DLQ, the same as the
// others: the three formats give the same results. On the dev broker the tests share,
// with a topic and a group per mode.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <map>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/store.hpp"
#include "support/mock_group.hpp"
#include "support/outside_python.hpp"
#include "support/process.hpp"
#include "support/shared_broker.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem {
namespace {

using namespace std::chrono_literals;

constexpr int kEvents = 200;

template <class B>
class ConfiguredSinksFault : public ::testing::Test {};
TYPED_TEST_SUITE(ConfiguredSinksFault, test::AllBackends, test::BackendName);

TYPED_TEST(ConfiguredSinksFault, BalancesEndExactInEveryFormatThroughSigkills) {
  IDEM_REQUIRE_CLI();
  const auto python = test::find_python_with_confluent_kafka();
  const auto script = test::fault_test_script("sink_producer.py", "IDEM_TEST_SINK_PRODUCER");
  if (!python || !script) {
    test::skip_or_fail("no python3 with confluent_kafka (apt-get install python3-confluent-kafka)");
    return;
  }
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
        *python,
        {script->string(), "--bootstrap", broker.bootstrap_servers(), "--topic", topic, "--mode",
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
    // The first consumer dies by SIGKILL mid-stream (after some effects committed, before
    // all); the second runs to the end.
    for (int life = 0; life < 2; ++life) {
      test::ChildProcess cli = test::ChildProcess::spawn(
          IDEM_CLI_PATH, test::with_mock_group({"consume", "--config", config.string()}));
      if (life == 0) {
        const std::int64_t before = movements();
        ASSERT_TRUE(
            test::eventually([&] { return movements() > before || movements() == kEvents; }, 90s));
        cli.kill(SIGKILL);
        (void)cli.wait(30s);
        continue;
      }
      ASSERT_TRUE(test::eventually([&] { return movements() == kEvents; }, 120s))
          << movements() << " movements";
      cli.kill(SIGTERM);
      EXPECT_EQ(cli.wait(30s), 0);
    }
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

}  // namespace
}  // namespace idem
