// Configured sinks without a broker: the `routes` table of a file, events read at the
// boundary (JSON, CloudEvents binary and structured mode) into typed values, and the
// statement check against a real SQLite database.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "idem/sinks/configured_sinks.hpp"
#include "idem/sinks/sink_config.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "sinks/event_reader.hpp"
#include "sinks/param_values.hpp"
#include "sinks/sql_text.hpp"
#include "support/wait.hpp"

namespace idem::sinks {
namespace sinks_test {

std::string write_file(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / test::unique_name("sinks");
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path) << text;
  return path.string();
}

std::string messages(const ConfigError& e) {
  std::string out;
  for (const auto& p : e.problems())
    out += fmt::format("{} ({}): {}\n", p.key, p.origin.describe(), p.message);
  return out;
}

constexpr std::string_view kBalance = R"toml(
[routes.balance]
topic = "payments"
type = "payment.received.v1"
sql = [
  "UPDATE account SET balance = balance + $amount WHERE id = $account",
  "INSERT INTO movement (event_id, account, amount) VALUES ($event_id, $account, $amount)",
]
[routes.balance.params]
account = { from = "/account", type = "text" }
amount = { from = "/amount", type = "numeric", precision = 18, scale = 2 }
)toml";

TEST(SinkSql, NamedParametersBecomePositionalOnesInOrderOfFirstUse) {
  const auto named = detail::positional_sql(
      "UPDATE a SET b = b + $amount, note = '$not_a_param' -- $nor_this\n"
      "WHERE id = $account AND x = $amount::numeric /* $no */");
  ASSERT_TRUE(named.problem.empty()) << named.problem;
  EXPECT_EQ(named.sql,
            "UPDATE a SET b = b + $1, note = '$not_a_param' -- $nor_this\n"
            "WHERE id = $2 AND x = $1::numeric /* $no */");
  EXPECT_EQ(named.names, (std::vector<std::string>{"amount", "account"}));
}

TEST(SinkSql, RefusesPositionalParametersAndDollarQuotes) {
  EXPECT_NE(detail::positional_sql("SELECT $1").problem.find("positional"), std::string::npos);
  EXPECT_NE(detail::positional_sql("SELECT $$x$$").problem.find("dollar-quoted"),
            std::string::npos);
  EXPECT_NE(detail::positional_sql("SELECT $tag$x$tag$").problem.find("dollar-quoted"),
            std::string::npos);
}

TEST(SinkConfigFile, ReadsRoutesParamsAndStatements) {
  const auto config = load_sink_config(write_file("balance.toml", std::string(kBalance)), {});
  ASSERT_TRUE(config);
  ASSERT_EQ(config->routes.size(), 1U);
  const Route& route = config->routes[0];
  EXPECT_EQ(route.topic, "payments");
  ASSERT_EQ(route.sql.size(), 2U);
  EXPECT_EQ(route.sql[0].sql, "UPDATE account SET balance = balance + $1 WHERE id = $2");
  EXPECT_EQ(route.sql[1].sql,
            "INSERT INTO movement (event_id, account, amount) VALUES ($1, $2, $3)");
  EXPECT_EQ(route.params[route.sql[1].params[0]].name, "event_id");  // built in
  EXPECT_EQ(config->topic_names(), std::vector<std::string>{"payments"});
}

TEST(SinkConfigFile, AFileWithoutRoutesHasNone) {
  EXPECT_FALSE(
      load_sink_config(write_file("plain.toml", "store.url = \"sqlite://:memory:\"\n"), {}));
}

TEST(SinkConfigFile, AFileThatIsNotTomlIsRefusedWithItsLine) {
  const std::string path = write_file("broken.toml", "[routes.r]\ntopic = \"t\"\ntype = \n");
  try {
    (void)load_sink_config(path, {});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(messages(e).find("cannot parse TOML file (line 3)"), std::string::npos)
        << messages(e);
  }
}

TEST(SinkConfigFile, EveryProblemNamesTheFileLineAndKey) {
  const std::string path = write_file("bad.toml", R"toml([routes.r]
topic = "t"
type = "x.v1"
colour = "blue"
sql = "INSERT INTO t (a, b) VALUES ($a, $undeclared)"
[routes.r.params]
a = { from = "amount", type = "money" }
)toml");
  try {
    (void)load_sink_config(path, {});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string text = messages(e);
    EXPECT_NE(text.find(fmt::format("routes.r.colour (file {}:4): unknown key", path)),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("routes.r.params.a.from"), std::string::npos) << text;
    EXPECT_NE(text.find("is neither a JSON pointer"), std::string::npos) << text;
    EXPECT_NE(text.find("unknown type 'money'"), std::string::npos) << text;
    EXPECT_NE(text.find("$undeclared is not declared"), std::string::npos) << text;
    EXPECT_EQ(e.problems().size(), 4U) << text;
  }
}

TEST(SinkDecimal, KeepsEveryDigitAndChecksPrecisionAndScale) {
  auto d = detail::parse_decimal("12.3", 18, 2, "/a");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().text(), "12.30");
  EXPECT_EQ(d.value().scaled(), 1230);
  EXPECT_EQ(detail::parse_decimal("-0.00", 5, 2, "/a").value().text(), "0.00");
  EXPECT_EQ(detail::parse_decimal("1.234", 18, 2, "/a").error().reason,
            ValidationReason::TooManyFractionDigits);
  EXPECT_EQ(detail::parse_decimal("1234", 5, 2, "/a").error().reason, ValidationReason::OutOfRange);
  EXPECT_EQ(detail::parse_decimal("1e5", 18, 2, "/a").value().text(), "100000.00");
  EXPECT_EQ(detail::parse_decimal("1e", 18, 2, "/a").error().reason, ValidationReason::NotDecimal);
  EXPECT_EQ(detail::parse_decimal("", 18, 2, "/a").error().reason, ValidationReason::NotDecimal);
}

/// Reads records of topic "payments" with the balance route.
class SinkReader : public ::testing::Test {
 protected:
  void SetUp() override { use(std::string(kBalance), Backend::Sqlite); }

  void use(const std::string& toml, Backend backend) {
    config_ = *load_sink_config(write_file("r.toml", toml), {});
    sinks_ = std::make_unique<ConfiguredSinks>(config_, backend);
    route_.config = &config_.routes[0];
    reader_ = std::make_unique<detail::EventReader>(
        "payments", config_.topics.at("payments"),
        std::vector<const detail::CompiledRoute*>{&route_}, backend);
  }

  Validated<detail::SinkEvent> read(std::string payload, std::vector<RecordHeader> headers = {}) {
    payload_ = std::move(payload);
    RecordInfo info;
    info.topic = "payments";
    info.payload = payload_;
    info.headers = headers;
    info.consumer_group = "g";
    return reader_->read(info, ParseLimits{});
  }

  SinkConfig config_;
  std::unique_ptr<ConfiguredSinks> sinks_;
  detail::CompiledRoute route_;
  std::unique_ptr<detail::EventReader> reader_;
  std::string payload_;
  const std::string id_ = new_uuid_v7().to_string();
};

TEST_F(SinkReader, ReadsAJsonEventIntoTheStatementsValues) {
  const auto e = read(fmt::format(
      R"({{"event_id":"{}","event_type":"payment.received.v1","account":"a1","amount":"12.3"}})",
      id_));
  ASSERT_TRUE(e.ok()) << e.error().message;
  EXPECT_EQ(e.value().id.to_string(), id_);
  const auto& v = e.value().values;
  ASSERT_EQ(v.size(), 5U);  // amount, account | event_id, account, amount
  EXPECT_EQ(std::get<std::int64_t>(v[0].value()), 1230);  // SQLite: scaled by 10^2
  EXPECT_EQ(std::get<std::string>(v[1].value()), "a1");
  EXPECT_EQ(std::get<Uuid>(v[2].value()).to_string(), id_);
}

TEST_F(SinkReader, ANumberLiteralStaysExact) {
  const auto e = read(fmt::format(
      R"({{"event_id":"{}","event_type":"payment.received.v1","account":"a","amount":0.29}})",
      id_));
  ASSERT_TRUE(e.ok()) << e.error().message;
  EXPECT_EQ(std::get<std::int64_t>(e.value().values[0].value()), 29);
}

TEST_F(SinkReader, PostgresGetsExactDecimalText) {
  use(std::string(kBalance), Backend::Postgres);
  const auto e = read(fmt::format(
      R"({{"event_id":"{}","event_type":"payment.received.v1","account":"a","amount":"7"}})", id_));
  ASSERT_TRUE(e.ok()) << e.error().message;
  EXPECT_EQ(std::get<std::string>(e.value().values[0].value()), "7.00");
}

TEST_F(SinkReader, AnInvalidRecordSaysWhichFieldAndRule) {
  const auto missing = read(
      fmt::format(R"({{"event_id":"{}","event_type":"payment.received.v1","account":"a"}})", id_));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().reason, ValidationReason::Missing);
  EXPECT_NE(missing.error().message.find("'/amount' (parameter $amount, numeric): is missing"),
            std::string::npos)
      << missing.error().message;

  const auto v4 = read(R"({"event_id":"8e03978e-40d5-43e8-bc93-6894a57f9324",)"
                       R"("event_type":"payment.received.v1","account":"a","amount":"1"})");
  ASSERT_FALSE(v4.ok());
  EXPECT_EQ(v4.error().reason, ValidationReason::NotUuidV7);
  EXPECT_NE(v4.error().message.find("IDEM-1"), std::string::npos);

  const auto unknown = read(fmt::format(R"({{"event_id":"{}","event_type":"refund.v1"}})", id_));
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().reason, ValidationReason::UnknownEventType);

  const auto twice = read(fmt::format(
      R"({{"event_id":"{}","event_type":"payment.received.v1","account":"a","amount":"1","amount":"2"}})",
      id_));
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.error().reason, ValidationReason::DuplicateField);
  EXPECT_EQ(twice.error().field, "/amount");

  // Deeper down, the error names the whole path (objects and array positions).
  const auto nested_twice = read(fmt::format(
      R"({{"event_id":"{}","event_type":"payment.received.v1","account":"a","amount":"1",)"
      R"("meta":{{"lines":[{{"sku":1}},{{"sku":2,"sku":3}}]}}}})",
      id_));
  ASSERT_FALSE(nested_twice.ok());
  EXPECT_EQ(nested_twice.error().reason, ValidationReason::DuplicateField);
  EXPECT_EQ(nested_twice.error().field, "/meta/lines/1/sku");
  EXPECT_NE(nested_twice.error().message.find("field '/meta/lines/1/sku' occurs twice"),
            std::string::npos)
      << nested_twice.error().message;

  const auto wrong = read(fmt::format(
      R"({{"event_id":"{}","event_type":"payment.received.v1","account":5,"amount":"1"}})", id_));
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().reason, ValidationReason::WrongType);
}

TEST_F(SinkReader, AnUnknownTypeIsSkippedWhenTheRoutesSaySo) {
  use("[routes]\nunknown_type = \"skip\"\n" + std::string(kBalance), Backend::Sqlite);
  const auto e = read(fmt::format(R"({{"event_id":"{}","event_type":"refund.v1"}})", id_));
  ASSERT_TRUE(e.ok()) << e.error().message;
  EXPECT_EQ(e.value().route, nullptr);
}

TEST_F(SinkReader, CloudEventsInBothModesGiveTheValuesOfPlainJson) {
  use("[routes]\nformat = \"cloudevents\"\n" + std::string(kBalance), Backend::Sqlite);
  const std::string data = R"({"account":"a1","amount":"12.3"})";
  const auto binary = read(data, {{"ce_specversion", "1.0"},
                                  {"ce_id", id_},
                                  {"ce_source", "/shop"},
                                  {"ce_type", "payment.received.v1"},
                                  {"content-type", "application/json"}});
  ASSERT_TRUE(binary.ok()) << binary.error().message;
  const auto structured =
      read(fmt::format(
               R"({{"specversion":"1.0","id":"{}","source":"/shop","type":"payment.received.v1",)"
               R"("datacontenttype":"application/json","data":{}}})",
               id_, data),
           {{"content-type", "application/cloudevents+json; charset=utf-8"}});
  ASSERT_TRUE(structured.ok()) << structured.error().message;
  for (const auto* e : {&binary.value(), &structured.value()}) {
    EXPECT_EQ(e->id.to_string(), id_);
    EXPECT_EQ(std::get<std::int64_t>(e->values[0].value()), 1230);
    EXPECT_EQ(std::get<std::string>(e->values[1].value()), "a1");
  }
  const auto plain = read(data);
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.error().reason, ValidationReason::NotCloudEvent);
  const auto not_v7 = read(data, {{"ce_specversion", "1.0"},
                                  {"ce_id", "order-17"},
                                  {"ce_source", "/shop"},
                                  {"ce_type", "payment.received.v1"}});
  ASSERT_FALSE(not_v7.ok());
  EXPECT_EQ(not_v7.error().reason, ValidationReason::NotUuid);
}

constexpr std::string_view kCharge = R"toml(
[routes.charge]
topic = "payments"
type = "payment.received.v1"
sql = "INSERT INTO ledger (account, payment_id) VALUES ($account, $payment_id)"
[routes.charge.params]
account = { from = "/account", type = "text" }
amount = { from = "/amount", type = "numeric", precision = 18, scale = 2 }
payment_id = { from = "response:/payment_id", type = "text" }
[routes.charge.http]
method = "PUT"
url = "http://127.0.0.1:1/accounts/{account}/charges"
headers = { Authorization = "Bearer ${TOKEN}", X-Account = "{account}" }
body = '{"account": {account}, "amount": {amount}}'
)toml";

TEST(SinkConfigFile, SecretsFromTheEnvironmentAreNeverShown) {
  const auto config =
      load_sink_config(write_file("charge.toml", std::string(kCharge)), {{"TOKEN", "s3cr3t"}});
  ASSERT_TRUE(config);
  const std::string shown = config->describe();
  EXPECT_EQ(shown.find("s3cr3t"), std::string::npos) << shown;
  EXPECT_NE(shown.find("header: Authorization: <redacted>"), std::string::npos) << shown;
  EXPECT_NE(shown.find("http: PUT http://127.0.0.1:1/accounts/{account}/charges"),
            std::string::npos)
      << shown;
  try {
    (void)load_sink_config(write_file("charge.toml", std::string(kCharge)), {});
    FAIL() << "TOKEN is not set";
  } catch (const ConfigError& e) {
    EXPECT_NE(messages(e).find("the environment variable TOKEN is not set"), std::string::npos)
        << messages(e);
  }
}

TEST_F(SinkReader, TemplatesAreSafeByConstruction) {
  config_ = *load_sink_config(write_file("charge.toml", std::string(kCharge)), {{"TOKEN", "t"}});
  route_.config = &config_.routes[0];
  reader_ = std::make_unique<detail::EventReader>(
      "payments", config_.topics.at("payments"), std::vector<const detail::CompiledRoute*>{&route_},
      Backend::Sqlite);
  const auto e = read(fmt::format(
      R"({{"event_id":"{}","event_type":"payment.received.v1","account":"a/b \"c\"","amount":"5"}})",
      id_));
  ASSERT_TRUE(e.ok()) << e.error().message;
  const http::Request& r = *e.value().request;
  EXPECT_EQ(r.method, "PUT");
  EXPECT_EQ(r.url, "http://127.0.0.1:1/accounts/a%2Fb%20%22c%22/charges");
  EXPECT_EQ(r.body, R"({"account": "a/b \"c\"", "amount": "5.00"})");
  EXPECT_EQ(r.idempotency_key, id_);
  ASSERT_EQ(e.value().from_answer.size(), 1U);  // $payment_id waits for the answer

  const auto injected = read(fmt::format(
      R"({{"event_id":"{}","event_type":"payment.received.v1","account":"a\r\nX-Evil: 1","amount":"5"}})",
      id_));
  ASSERT_FALSE(injected.ok());
  EXPECT_NE(injected.error().message.find("control character"), std::string::npos)
      << injected.error().message;
}

TEST(SinkCheck, StatementsArePreparedAgainstTheDatabase) {
  auto store = open_store("sqlite://:memory:");
  const auto config = load_sink_config(write_file("b.toml", std::string(kBalance)), {});
  ConfiguredSinks sinks(*config, store->backend());
  try {
    sinks.check(*store);
    FAIL() << "the tables do not exist";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 2U) << messages(e);
    EXPECT_EQ(e.problems()[0].key, "routes.balance.sql[0]");
    EXPECT_NE(e.problems()[0].message.find("no such table: account"), std::string::npos)
        << messages(e);
  }
  {
    auto tx = store->begin();
    tx->execute("CREATE TABLE account (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)");
    tx->execute(
        "CREATE TABLE movement (event_id BLOB NOT NULL, account TEXT NOT NULL, amount INTEGER)");
    tx->commit();
  }
  EXPECT_NO_THROW(sinks.check(*store));  // NOT NULL broken by the NULLs is not a problem
}

}  // namespace sinks_test
}  // namespace idem::sinks
