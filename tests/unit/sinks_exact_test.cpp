// Configured sinks at the edges of reading an event: numbers stay the digits they were
// written with on every path (a numeric in exponent form, a json parameter, a structured
// CloudEvent's data sent on as the call's body), CloudEvents' content type compared as
// RFC 9110 says, and a topic in migration read with format "auto", each record as its
// headers say.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "events/json_literals.hpp"
#include "idem/sinks/sink_config.hpp"
#include "idem/uuid.hpp"
#include "sinks/event_reader.hpp"
#include "sinks/param_values.hpp"
#include "support/wait.hpp"

namespace idem::sinks {
namespace sinks_exact_test {

std::string write_file(const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / test::unique_name("sinks-exact");
  std::filesystem::create_directories(dir);
  const auto path = dir / "routes.toml";
  std::ofstream(path) << text;
  return path.string();
}

Validated<detail::Decimal> decimal(std::string_view text, int precision, int scale) {
  return detail::parse_decimal(text, precision, scale, "/amount");
}

TEST(SinkExponent, ANumberInExponentFormIsReadFromItsDigits) {
  EXPECT_EQ(decimal("1E+2", 18, 2).value().text(), "100.00");
  EXPECT_EQ(decimal("1E+2", 18, 2).value().scaled(), 10000);
  EXPECT_EQ(decimal("1.5e-3", 18, 4).value().text(), "0.0015");
  EXPECT_EQ(decimal("5e-05", 18, 8).value().text(), "0.00005000");
  EXPECT_EQ(decimal("-2.50E1", 18, 2).value().text(), "-25.00");
  EXPECT_EQ(decimal("12345e-2", 18, 2).value().text(), "123.45");
  EXPECT_EQ(decimal("9999999999999999e-2", 18, 2).value().text(), "99999999999999.99");
  EXPECT_EQ(decimal("1.2345678901234567e+15", 18, 1).value().text(), "1234567890123456.7");
  EXPECT_EQ(decimal("0e-2", 18, 2).value().text(), "0.00");
  EXPECT_EQ(decimal("-0E+5", 18, 2).value().text(), "0.00");
  EXPECT_EQ(decimal("7E0", 18, 0).value().text(), "7");
  EXPECT_EQ(decimal("7E+0000", 18, 0).value().text(), "7");
}

TEST(SinkExponent, TheRulesApplyToTheValueWrittenOut) {
  // 1.5e-3 is 0.0015: four digits after the point.
  const auto fraction = decimal("1.5e-3", 18, 2);
  ASSERT_FALSE(fraction.ok());
  EXPECT_EQ(fraction.error().reason, ValidationReason::TooManyFractionDigits);
  EXPECT_NE(fraction.error().message.find("written out: 0.0015"), std::string::npos)
      << fraction.error().message;
  // 1.230e1 is 12.30 (two), as the plain 12.30 is; 1.2300e1 is 12.300 (three).
  EXPECT_EQ(decimal("1.230e1", 18, 2).value().text(), "12.30");
  EXPECT_EQ(decimal("1.2300e1", 18, 2).error().reason, ValidationReason::TooManyFractionDigits);
  EXPECT_EQ(decimal("1E+17", 18, 2).error().reason, ValidationReason::OutOfRange);
  EXPECT_EQ(decimal("1E+15", 18, 2).value().text(), "1000000000000000.00");
}

TEST(SinkExponent, AnExponentBeyondTheCapIsRefusedUnread) {
  EXPECT_EQ(decimal("0e-1000", 18, 2).error().reason, ValidationReason::TooManyFractionDigits);
  for (const std::string_view text : {"1e1001", "0e-1001", "1e99999999999999999999"}) {
    const auto refused = decimal(text, 18, 2);
    ASSERT_FALSE(refused.ok()) << text;
    EXPECT_EQ(refused.error().reason, ValidationReason::OutOfRange) << text;
    EXPECT_NE(refused.error().message.find("exponent beyond 1000"), std::string::npos)
        << refused.error().message;
  }
}

TEST(SinkExponent, AMalformedExponentIsNotADecimal) {
  for (const std::string_view text : {"1e", "1e+", "1E-", "e5", "1.e5", ".5e1", "1e5.0", "1e+-5",
                                      "1ee5", "1e 5", "+1e5", "1e0x10"}) {
    const auto refused = decimal(text, 18, 2);
    ASSERT_FALSE(refused.ok()) << text;
    EXPECT_EQ(refused.error().reason, ValidationReason::NotDecimal) << text;
  }
}

TEST(SinkLiterals, FindsAValueAsItWasWritten) {
  const simdjson::padded_string json(
      std::string_view(R"({"a" : { "fee" : 0.00005 , "list": [ 1 , {"x": 1.50E+2}, "s\"t" ] },)"
                       R"( "a~b/c": 99999999999999.99, "k\u0065y": true, "a": 2 })"));
  idem::detail::JsonLiterals literals;
  EXPECT_EQ(literals.find(json, "/a/fee"), "0.00005");
  EXPECT_EQ(literals.find(json, "/a/list/1/x"), "1.50E+2");
  EXPECT_EQ(literals.find(json, "/a/list/2"), R"("s\"t")");
  EXPECT_EQ(literals.find(json, "/a/list/1"), R"({"x": 1.50E+2})");
  EXPECT_EQ(literals.find(json, "/a/list"), R"([ 1 , {"x": 1.50E+2}, "s\"t" ])");
  EXPECT_EQ(literals.find(json, "/a~0b~1c"), "99999999999999.99");
  EXPECT_EQ(literals.find(json, "/key"), "true");       // keys compared unescaped, as the DOM does
  EXPECT_EQ(literals.find(json, "/a/fee"), "0.00005");  // the first "a", as the DOM finds it
  EXPECT_EQ(literals.find(json, "/a/missing"), std::nullopt);
  EXPECT_EQ(literals.find(json, "/a/list/3"), std::nullopt);
  EXPECT_EQ(literals.find(json, "/a/list/01"), std::nullopt);
}

constexpr std::string_view kRoute = R"toml(
[routes.charge]
topic = "payments"
type = "payment.received.v1"
sql = "INSERT INTO ledger (amount, details, fee) VALUES ($amount, $details, $fee)"
[routes.charge.params]
amount = { from = "/amount", type = "numeric", precision = 18, scale = 2 }
details = { from = "/details", type = "json", required = false }
fee = { from = "response:/fee", type = "numeric", precision = 18, scale = 8 }
[routes.charge.http]
url = "http://127.0.0.1:1/charge"
)toml";

/// Reads records of topic "payments" with the charge route (body = "event").
class SinkExactReader : public ::testing::Test {
 protected:
  void use(const std::string& format, Backend backend) {
    config_ = *load_sink_config(
        write_file(fmt::format("[routes]\nformat = \"{}\"\n{}", format, kRoute)), {});
    route_.config = &config_.routes[0];
    reader_ = std::make_unique<detail::EventReader>(
        "payments", config_.topics.at("payments"),
        std::vector<const detail::CompiledRoute*>{&route_}, backend);
  }

  Validated<detail::SinkEvent> read(std::string payload, std::vector<RecordHeader> headers = {}) {
    payload_ = std::move(payload);
    headers_ = std::move(headers);
    RecordInfo info;
    info.topic = "payments";
    info.payload = payload_;
    info.headers = headers_;
    info.consumer_group = "g";
    return reader_->read(info, ParseLimits{});
  }

  [[nodiscard]] std::string structured(const std::string& data) const {
    return fmt::format(
        R"({{"specversion":"1.0","id":"{}","source":"/shop","type":"payment.received.v1",)"
        R"("data" : {} }})",
        id_, data);
  }
  [[nodiscard]] std::vector<RecordHeader> binary_headers() const {
    return {{"ce_specversion", "1.0"},
            {"ce_id", id_},
            {"ce_source", "/shop"},
            {"ce_type", "payment.received.v1"}};
  }
  [[nodiscard]] std::string plain(const std::string& fields) const {
    return fmt::format(R"({{"event_id":"{}","event_type":"payment.received.v1",{}}})", id_, fields);
  }

  SinkConfig config_;
  detail::CompiledRoute route_;
  std::unique_ptr<detail::EventReader> reader_;
  std::string payload_;
  std::vector<RecordHeader> headers_;
  const std::string id_ = new_uuid_v7().to_string();
};

TEST_F(SinkExactReader, AStructuredEventsDataIsSentAsItCame) {
  use("cloudevents", Backend::Postgres);
  // Written back out from a double, 99999999999999.99 would be 99999999999999.98.
  const std::string data = R"({"amount": 99999999999999.99, "details": {"fee": 0.00005}})";
  const auto e = read(structured(data), {{"content-type", "application/cloudevents+json"}});
  ASSERT_TRUE(e.ok()) << e.error().message;
  EXPECT_EQ(e.value().request->body, data);
  EXPECT_EQ(std::get<std::string>(e.value().values[0].value()), "99999999999999.99");
  EXPECT_EQ(std::get<std::string>(e.value().values[1].value()), R"({"fee":0.00005})");
}

TEST_F(SinkExactReader, AJsonParameterKeepsItsDigits) {
  use("json", Backend::Sqlite);
  const auto e = read(plain(
      R"("amount": 1E+2, "details": { "fee" : 0.00005, "big": 1234567890123456.7, "n": [1.0, "a b"] })"));
  ASSERT_TRUE(e.ok()) << e.error().message;
  EXPECT_EQ(std::get<std::int64_t>(e.value().values[0].value()), 10000);  // 1E+2, scale 2
  EXPECT_EQ(std::get<std::string>(e.value().values[1].value()),
            R"({"fee":0.00005,"big":1234567890123456.7,"n":[1.0,"a b"]})");
}

TEST_F(SinkExactReader, ExponentNumbersReachTheStatementExactly) {
  use("cloudevents", Backend::Postgres);
  const auto e = read(R"({"amount": 1.2345E+3})", binary_headers());
  ASSERT_TRUE(e.ok()) << e.error().message;
  EXPECT_EQ(std::get<std::string>(e.value().values[0].value()), "1234.50");
  const auto too_fine = read(R"({"amount": 1.2345E+1})", binary_headers());
  ASSERT_FALSE(too_fine.ok());
  EXPECT_EQ(too_fine.error().reason, ValidationReason::TooManyFractionDigits);
}

TEST_F(SinkExactReader, TheContentTypeIsComparedAsRfc9110Says) {
  use("cloudevents", Backend::Sqlite);
  const std::string record = structured(R"({"amount": "1.00"})");
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"content-type", "application/cloudevents+json"},
           {"Content-Type", "Application/CloudEvents+JSON"},
           {"CONTENT-TYPE", "application/cloudevents+json; charset=utf-8"},
           {"content-type", " application/cloudevents+json ;charset=UTF-8"},
           {"content-type", "application/cloudevents+json\t"}}) {
    const auto e = read(record, {{name, value}});
    EXPECT_TRUE(e.ok()) << name << ": " << value << ": " << e.error().message;
  }
  for (const std::string value :
       {"application/cloudevents+jsonx", "application/cloudevents-batch+json",
        "APPLICATION/CLOUDEVENTS", "application/cloudevents+json2; charset=utf-8"}) {
    const auto e = read(record, {{"content-type", value}});
    ASSERT_FALSE(e.ok()) << value;
    EXPECT_EQ(e.error().reason, ValidationReason::NotCloudEvent) << value;
    EXPECT_EQ(e.error().field, "content-type") << value;
  }
  // Another media type is not structured mode, whatever the body holds.
  const auto json = read(record, {{"content-type", "application/json"}});
  ASSERT_FALSE(json.ok());
  EXPECT_EQ(json.error().reason, ValidationReason::NotCloudEvent);
}

TEST_F(SinkExactReader, AutoReadsEachRecordAsItsHeadersSay) {
  use("auto", Backend::Sqlite);
  const std::string json_record = plain(R"("amount": "12.30")");
  const auto as_json = read(json_record);
  const auto as_binary = read(R"({"amount": "12.30"})", binary_headers());
  const auto as_structured = read(structured(R"({"amount": "12.30"})"),
                                  {{"Content-Type", "application/cloudevents+json"}});
  for (const auto* e : {&as_json, &as_binary, &as_structured}) {
    ASSERT_TRUE(e->ok()) << e->error().message;
    EXPECT_EQ(e->value().id.to_string(), id_);  // the dedup key whichever form it takes
    EXPECT_EQ(std::get<std::int64_t>(e->value().values[0].value()), 1230);
  }
  EXPECT_EQ(as_json.value().request->body, json_record);
  // Never by looking inside the body: an envelope without the headers is a plain event,
  // read with the configured pointers.
  const auto envelope_only = read(structured(R"({"amount": "12.30"})"));
  ASSERT_FALSE(envelope_only.ok());
  EXPECT_EQ(envelope_only.error().reason, ValidationReason::Missing);
  EXPECT_EQ(envelope_only.error().field, "/event_id");
  // A content type of the CloudEvents family that is not readable is refused, not read
  // as plain JSON.
  const auto batch =
      read(plain(R"("amount": "1")"), {{"content-type", "application/cloudevents-batch+json"}});
  ASSERT_FALSE(batch.ok());
  EXPECT_EQ(batch.error().reason, ValidationReason::NotCloudEvent);
  // Errors name the field of the form the record has.
  const auto bad_binary_id = read(R"({"amount": "1"})", {{"ce_specversion", "1.0"},
                                                         {"ce_id", "order-1"},
                                                         {"ce_source", "/shop"},
                                                         {"ce_type", "payment.received.v1"}});
  ASSERT_FALSE(bad_binary_id.ok());
  EXPECT_EQ(bad_binary_id.error().field, "id");
}

TEST_F(SinkExactReader, JsonAndCloudEventsFormatsReadOnlyTheirOwnForms) {
  use("json", Backend::Sqlite);
  const auto binary = read(R"({"amount": "1"})", binary_headers());
  ASSERT_FALSE(binary.ok());
  EXPECT_EQ(binary.error().field, "/event_id");
  use("cloudevents", Backend::Sqlite);
  const auto json = read(plain(R"("amount": "1")"));
  ASSERT_FALSE(json.ok());
  EXPECT_EQ(json.error().reason, ValidationReason::NotCloudEvent);
}

TEST(SinkFormatKey, AutoIsAFormatAndOthersAreRefused) {
  const auto config = load_sink_config(
      write_file("[routes]\nformat = \"auto\"\n[routes.r]\ntopic = \"t\"\ntype = \"x.v1\"\n"
                 "sql = \"DELETE FROM t\"\n"),
      {});
  ASSERT_TRUE(config);
  EXPECT_EQ(config->topics.at("t").format, EventFormat::Auto);
  try {
    (void)load_sink_config(
        write_file("[routes]\nformat = \"avro\"\n[routes.r]\ntopic = \"t\"\ntype = \"x.v1\"\n"
                   "sql = \"DELETE FROM t\"\n"),
        {});
    FAIL() << "avro is no format";
  } catch (const ConfigError& e) {
    ASSERT_FALSE(e.problems().empty());
    EXPECT_NE(e.problems()[0].message.find(R"(expected "json", "cloudevents" or "auto")"),
              std::string::npos)
        << e.problems()[0].message;
  }
}

}  // namespace sinks_exact_test
}  // namespace idem::sinks
