// `idem config test --config FILE`: the `[[tests]]` a configuration file carries for its
// routes, run as a user would run them. On a throwaway SQLite store with calls answered
// by the stub endpoint, every outcome a route can give (applied, duplicate, dead letter
// with its reason, retry, paused) is what the test expects, the rows and the calls
// (Idempotency-Key, the body) match; a test that expects something else fails with its
// key and exit 1; on the configured store of either backend nothing stays behind.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <fmt/format.h>

#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "support/cli_run.hpp"
#include "support/kafka_test_producer.hpp"  // unique_name
#include "support/store_backends.hpp"
#include "support/test_env.hpp"

namespace idem {
namespace config_test_command_test {

using namespace std::chrono_literals;

// Two routes: a balance sink (SQL only) and a charge (an HTTP call whose answer the
// statement records).
constexpr std::string_view kRoutes = R"toml(
[routes.balance]
topic = "payments"
type = "payment.received.v1"
sql = [
  "UPDATE account SET balance = balance + $amount WHERE id = $account",
  "INSERT INTO movement (event_id, account, amount) VALUES ($event_id, $account, $amount)",
]
[routes.balance.params]
account = {{ from = "/account", type = "text" }}
amount = {{ from = "/amount", type = "numeric", precision = 18, scale = 2 }}
)toml";

constexpr std::string_view kChargeRoute = R"toml(
[routes.charge]
topic = "orders"
type = "order.confirmed.v1"
sql = ["INSERT INTO charge_log (order_id, payment_id) VALUES ($order_id, $payment_id)"]
[routes.charge.params]
order_id = {{ from = "/order_id", type = "integer" }}
payment_id = {{ from = "response:/payment_id", type = "text" }}
[routes.charge.http]
url = "https://provider.example/payments/charge?order={{order_id}}"
body = '{{"order_id": {{order_id}}}}'
)toml";

std::string write_file(const std::string& text) {
  const auto path = test::scratch_dir() / (test::unique_name("routes-test") + ".toml");
  std::ofstream(path) << text;
  return path.string();
}

std::string payment(const std::string& id, const std::string& account, const std::string& amount) {
  return fmt::format(
      R"(json = {{ event_id = "{}", event_type = "payment.received.v1", account = "{}"{} }})", id,
      account, amount.empty() ? "" : fmt::format(R"(, amount = "{}")", amount));
}

std::string order(const std::string& id, int order_id) {
  return fmt::format(
      R"(topic = "orders"
json = {{ event_id = "{}", event_type = "order.confirmed.v1", order_id = {} }})",
      id, order_id);
}

// Every outcome, as the consumer would decide it, on a throwaway store.
std::string passing_tests() {
  const std::string first = new_uuid_v7().to_string();
  return fmt::format(
      R"toml(
[[tests]]
name = "a payment raises the balance once"
setup = [
  "CREATE TABLE account (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)",
  "CREATE TABLE movement (event_id BLOB NOT NULL, account TEXT NOT NULL, amount INTEGER NOT NULL)",
  "CREATE TABLE charge_log (order_id INTEGER NOT NULL, payment_id TEXT NOT NULL)",
  "INSERT INTO account (id, balance) VALUES ('acct-1', 0)",
]
[[tests.events]]
topic = "payments"
{first}
[[tests.events]]
topic = "payments"
{first}
expect = "duplicate"
[[tests.events]]
topic = "payments"
{missing}
expect = "dead_letter"
reason = "validation.missing"
message = "/amount"
[[tests.expect_rows]]
query = "SELECT balance FROM account WHERE id = 'acct-1'"
rows = [[1230]]
[[tests.expect_rows]]
query = "SELECT count(*) FROM movement"
rows = [[1]]

[[tests]]
name = "the provider's answers"
setup = ["CREATE TABLE charge_log (order_id INTEGER NOT NULL, payment_id TEXT NOT NULL)"]
[[tests.events]]
{charged}
respond = {{ status = 201, body = '{{"payment_id": "pay-7"}}' }}
[[tests.events]]
{invalid}
respond = {{ status = 422, body = '{{"title": "amount too large"}}' }}
expect = "dead_letter"
message = "422"
[[tests.events]]
{busy}
respond = {{ status = 503 }}
expect = "retry"
[[tests.expect_rows]]
query = "SELECT order_id, payment_id FROM charge_log"
rows = [[7, "pay-7"]]
[[tests.expect_calls]]
method = "POST"
path = "/payments/charge?order=7"
headers = {{ Idempotency-Key = "{charged_id}" }}
json = {{ order_id = 7 }}
[[tests.expect_calls]]
path = "/payments/charge?order=8"
[[tests.expect_calls]]
path = "/payments/charge?order=9"

[[tests]]
name = "a wrong token pauses the route"
[[tests.events]]
{unauthorized}
respond = {{ status = 401 }}
expect = "paused"
)toml",
      fmt::arg("first", payment(first, "acct-1", "12.30")),
      fmt::arg("missing", payment(new_uuid_v7().to_string(), "acct-1", "")),
      fmt::arg("charged", order(first, 7)), fmt::arg("charged_id", first),
      fmt::arg("invalid", order(new_uuid_v7().to_string(), 8)),
      fmt::arg("busy", order(new_uuid_v7().to_string(), 9)),
      fmt::arg("unauthorized", order(new_uuid_v7().to_string(), 10)));
}

std::string routes() {
  return fmt::format(fmt::runtime(std::string(kRoutes))) +
         fmt::format(fmt::runtime(std::string(kChargeRoute)));
}

TEST(ConfigTestCommand, EveryOutcomeOfARouteIsWhatItsTestExpects) {
  IDEM_REQUIRE_CLI();
  const auto r = test::run_to_completion(
      IDEM_CLI_PATH, {"config", "test", "--config", write_file(routes() + passing_tests())}, {},
      60s);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("test a payment raises the balance once ... passed"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("test the provider's answers ... passed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("test a wrong token pauses the route ... passed"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("3 test(s): 3 passed, 0 failed"), std::string::npos) << r.output;
}

TEST(ConfigTestCommand, ATestThatExpectsOtherwiseFailsWithItsKey) {
  IDEM_REQUIRE_CLI();
  const std::string tests = fmt::format(
      R"toml(
[[tests]]
name = "wrong expectations"
setup = [
  "CREATE TABLE account (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)",
  "CREATE TABLE movement (event_id BLOB NOT NULL, account TEXT NOT NULL, amount INTEGER NOT NULL)",
  "INSERT INTO account (id, balance) VALUES ('acct-1', 0)",
]
[[tests.events]]
topic = "payments"
{}
expect = "dead_letter"
[[tests.expect_rows]]
query = "SELECT balance FROM account WHERE id = 'acct-1'"
rows = [[999]]
)toml",
      payment(new_uuid_v7().to_string(), "acct-1", "12.30"));
  const auto r = test::run_to_completion(
      IDEM_CLI_PATH, {"config", "test", "--config", write_file(routes() + tests)}, {}, 60s);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("test wrong expectations ... FAILED"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tests[0].events[0]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("expected dead_letter, got applied"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("expected [[999]], got [[1230]]"), std::string::npos) << r.output;
}

TEST(ConfigTestCommand, AMalformedTestOrNoTestIsAConfigurationError) {
  IDEM_REQUIRE_CLI();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "declares no tests"},
      {"[[tests]]\n[[tests.events]]\ntopic = \"payments\"\nvalue = \"{}\"\nexpect = \"done\"\n",
       "unknown outcome 'done'"},
      {"[[tests]]\n[[tests.events]]\ntopic = \"refunds\"\nvalue = \"{}\"\n",
       "topic 'refunds' is read by no route"},
      {"[[tests]]\ncolour = 1\n[[tests.events]]\ntopic = \"payments\"\nvalue = \"{}\"\n",
       "tests[0].colour"},
  };
  for (const auto& [tests, expected] : cases) {
    const auto r = test::run_to_completion(
        IDEM_CLI_PATH, {"config", "test", "--config", write_file(routes() + tests)}, {}, 60s);
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
  }
}

template <class B>
class ConfigTestOnStore : public ::testing::Test {};
TYPED_TEST_SUITE(ConfigTestOnStore, test::AllBackends, test::BackendName);

// On the configured store the statements run against the user's own tables and every
// test is rolled back: the balance is what the test saw inside, and 0 after.
TYPED_TEST(ConfigTestOnStore, RunsOnTheConfiguredStoreAndLeavesNothingBehind) {
  IDEM_REQUIRE_CLI();
  const std::string url = TypeParam::fresh_url();
  if (url.empty()) return;
  const bool sqlite = TypeParam::kind == Backend::Sqlite;
  auto store = open_store(url);
  {
    auto tx = store->begin();
    tx->execute(sqlite ? "CREATE TABLE account (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)"
                       : "CREATE TABLE account (id text PRIMARY KEY, balance numeric(18,2) NOT "
                         "NULL)");
    tx->execute(sqlite ? "CREATE TABLE movement (event_id BLOB NOT NULL, account TEXT NOT NULL, "
                         "amount INTEGER NOT NULL)"
                       : "CREATE TABLE movement (event_id uuid NOT NULL, account text NOT NULL, "
                         "amount numeric(18,2) NOT NULL)");
    tx->execute("INSERT INTO account (id, balance) VALUES ('acct-1', 0)");
    tx->commit();
  }
  const std::string tests = fmt::format(
      R"toml(store.url = "{}"
{}
[[tests]]
name = "on the store"
[[tests.events]]
{}
[[tests.expect_rows]]
query = "SELECT balance FROM account WHERE id = 'acct-1'"
rows = [["{}"]]
)toml",
      url, fmt::format(fmt::runtime(std::string(kRoutes))),
      payment(new_uuid_v7().to_string(), "acct-1", "12.30"), sqlite ? "1230" : "12.30");
  const auto r = test::run_to_completion(
      IDEM_CLI_PATH, {"config", "test", "--config", write_file(tests)}, {}, 60s);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("1 test(s): 1 passed"), std::string::npos) << r.output;
  EXPECT_EQ(TypeParam::read_scalar(*store, "SELECT count(*) FROM movement"), 0);
  EXPECT_EQ(TypeParam::read_scalar(*store, sqlite ? "SELECT balance FROM account"
                                                  : "SELECT balance::bigint FROM account"),
            0);

  // A statement the store cannot prepare is refused before any test runs.
  std::string broken = tests;
  broken.replace(broken.find("UPDATE account"), 14, "UPDATE acount");
  const auto refused = test::run_to_completion(
      IDEM_CLI_PATH, {"config", "test", "--config", write_file(broken)}, {}, 60s);
  EXPECT_EQ(refused.status, 1) << refused.output;
  EXPECT_NE(refused.output.find("routes.balance.sql[0]"), std::string::npos) << refused.output;
  EXPECT_EQ(refused.output.find("test on the store"), std::string::npos) << refused.output;
}

}  // namespace config_test_command_test
}  // namespace idem
