// The templates of a configured HTTP route through the CLI: `idem config test` shows that
// a value making a segment of the URL's path `..`, `.` or empty is dead-lettered
// (validation.url_segment) instead of calling another path; `idem config check` refuses a
// secret the URL or a header cannot hold (a file-backed token ending with a newline),
// naming the key and never printing the value; a dead letter's reason never carries the
// value of a ${VAR}.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <fmt/format.h>

#include "idem/uuid.hpp"
#include "support/cli_run.hpp"
#include "support/kafka_test_producer.hpp"  // unique_name
#include "support/store_backends.hpp"
#include "support/test_env.hpp"

namespace idem {
namespace route_templates_cli_test {

using namespace std::chrono_literals;

constexpr std::string_view kRoute = R"toml(
[routes.charge]
topic = "orders"
type = "order.confirmed.v1"
[routes.charge.params]
account = { from = "/account", type = "text" }
[routes.charge.http]
url = "https://provider.example/accounts/{account}/charges?account={account}"
headers = { Authorization = "Bearer ${PROVIDER_TOKEN}" }
body = '{"account": {account}}'
)toml";

std::string write_file(const std::string& text) {
  const auto path = test::scratch_dir() / (test::unique_name("templates") + ".toml");
  std::ofstream(path) << text;
  return path.string();
}

std::string charge(const std::string& account) {
  return fmt::format(
      R"(topic = "orders"
json = {{ event_id = "{}", event_type = "order.confirmed.v1", account = "{}" }})",
      new_uuid_v7().to_string(), account);
}

TEST(RouteTemplatesCli, AValueThatWouldChangeTheUrlsPathIsDeadLettered) {
  IDEM_REQUIRE_CLI();
  const std::string tests = fmt::format(
      R"toml(
[[tests]]
name = "values stay inside their segment"
[[tests.events]]
{dotdot}
expect = "dead_letter"
reason = "validation.url_segment"
message = "$account"
[[tests.events]]
{dot}
expect = "dead_letter"
reason = "validation.url_segment"
[[tests.events]]
{empty}
expect = "dead_letter"
reason = "validation.url_segment"
[[tests.events]]
{slashes}
[[tests.events]]
{dots}
[[tests.expect_calls]]
path = "/accounts/..%2F..%2Fadmin/charges?account=..%2F..%2Fadmin"
[[tests.expect_calls]]
path = "/accounts/.../charges?account=..."
)toml",
      fmt::arg("dotdot", charge("..")), fmt::arg("dot", charge(".")), fmt::arg("empty", charge("")),
      fmt::arg("slashes", charge("../../admin")), fmt::arg("dots", charge("...")));
  const auto r = test::run_to_completion(
      IDEM_CLI_PATH, {"config", "test", "--config", write_file(std::string(kRoute) + tests)},
      {{"PROVIDER_TOKEN", "tok-12345"}}, 60s);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("1 test(s): 1 passed, 0 failed"), std::string::npos) << r.output;
}

TEST(RouteTemplatesCli, ConfigCheckRefusesASecretEndingWithANewlineWithoutPrintingIt) {
  IDEM_REQUIRE_CLI();
  const std::string file = write_file(std::string(kRoute));
  const auto r = test::run_to_completion(IDEM_CLI_PATH, {"config", "check", "--config", file},
                                         {{"PROVIDER_TOKEN", "tok-12345\n"}}, 60s);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("routes.charge.http.headers.Authorization"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("PROVIDER_TOKEN has a line feed (LF) at its end"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("tok-12345"), std::string::npos) << r.output;

  // The same secret without its newline is fine, and still not printed.
  const auto fine = test::run_to_completion(IDEM_CLI_PATH, {"config", "check", "--config", file},
                                            {{"PROVIDER_TOKEN", "tok-12345"}}, 60s);
  EXPECT_EQ(fine.status, 0) << fine.output;
  EXPECT_EQ(fine.output.find("tok-12345"), std::string::npos) << fine.output;
}

TEST(RouteTemplatesCli, ConfigCheckRefusesAUrlLibcurlCannotSendToWithoutPrintingIt) {
  IDEM_REQUIRE_CLI();
  std::string route(kRoute);
  route.replace(route.find("https://provider.example"), 24, "${PROVIDER_URL}");
  const auto r = test::run_to_completion(
      IDEM_CLI_PATH, {"config", "check", "--config", write_file(route)},
      {{"PROVIDER_TOKEN", "t"}, {"PROVIDER_URL", "ftp://hooks.example/secret-path"}}, 60s);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("routes.charge.http.url"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("only http and https"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("secret-path"), std::string::npos) << r.output;
}

TEST(RouteTemplatesCli, ADeadLettersReasonNeverCarriesASecret) {
  IDEM_REQUIRE_CLI();
  // The provider echoes the token in its refusal; the reason shows it redacted.
  const std::string tests = fmt::format(
      R"toml(
[[tests]]
name = "the echoed token is redacted"
[[tests.events]]
{}
respond = {{ status = 422, content_type = "application/problem+json", body = '{{"title": "token tok-12345 is not valid here"}}' }}
expect = "dead_letter"
message = "token <redacted> is not valid here"
)toml",
      charge("acct-1"));
  const auto r = test::run_to_completion(
      IDEM_CLI_PATH, {"config", "test", "--config", write_file(std::string(kRoute) + tests)},
      {{"PROVIDER_TOKEN", "tok-12345"}}, 60s);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("1 test(s): 1 passed, 0 failed"), std::string::npos) << r.output;
}

TEST(RouteTemplatesCli, ConfigCheckOfASinkFileShowsTheSettingsOfAConsumerWithRoutes) {
  IDEM_REQUIRE_CLI();
  const std::string file =
      write_file("consumer.group = \"charges\"\nkafka.\"bootstrap.servers\" = \"kafka:9092\"\n" +
                 std::string(kRoute));
  const auto r = test::run_to_completion(IDEM_CLI_PATH, {"config", "check", "--config", file},
                                         {{"PROVIDER_TOKEN", "tok-12345"}}, 60s);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const std::string shown :
       {"consumer.group = charges",
        "consumer.batch_size = ", "store.url = ", "kafka.bootstrap.servers = kafka:9092",
        "admin.listen = ", "# routes of ", "#   route charge: topic orders type order.confirmed.v1",
        "#     header: Authorization: <redacted>"})
    EXPECT_NE(r.output.find("\n" + shown), std::string::npos) << shown << " in:\n" << r.output;
  for (const std::string hidden :
       {"\ndemo.", "\nprovider.", "\nconsole.", "\nrelay.", "\nconsumer.handler", "tok-12345"})
    EXPECT_EQ(r.output.find(hidden), std::string::npos) << hidden << " in:\n" << r.output;
}

}  // namespace route_templates_cli_test
}  // namespace idem
