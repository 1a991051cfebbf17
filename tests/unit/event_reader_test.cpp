// The core's event reader (idem/events/event_reader.hpp): a record's envelope read as
// plain JSON, CloudEvents binary or structured mode, or as its headers say; every reason
// a record is refused; the data as a tree whose integers are integers and whose other
// numbers keep the digits they were written with; one parse per record, however many
// values are read from it, in the reader and in the configured sinks on top of it.
#include "idem/events/event_reader.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "events/parse_count.hpp"
#include "idem/sinks/sink_config.hpp"
#include "idem/uuid.hpp"
#include "sinks/event_reader.hpp"
#include "support/wait.hpp"

namespace idem {
namespace event_reader_test {

/// A record of topic "t" that owns its bytes and headers, as a RecordInfo views them.
struct Record {
  std::string payload;
  std::vector<RecordHeader> headers;
  RecordInfo info;

  Record(std::string value, std::vector<RecordHeader> record_headers)
      : payload(std::move(value)), headers(std::move(record_headers)) {
    info.topic = "t";
    info.payload = payload;
    info.headers = headers;
  }
  Record(const Record&) = delete;  // `info` views the members
  Record& operator=(const Record&) = delete;
};

class EventReaderTest : public ::testing::Test {
 protected:
  Validated<EventView> read(std::string payload, std::vector<RecordHeader> headers = {},
                            ParseLimits limits = {}) {
    record_ = std::make_unique<Record>(std::move(payload), std::move(headers));
    return reader_->read(record_->info, limits);
  }

  /// The error of reading `payload` with `headers`, which must be refused.
  ValidationError refused(std::string payload, std::vector<RecordHeader> headers = {},
                          ParseLimits limits = {}) {
    auto result = read(std::move(payload), std::move(headers), limits);
    EXPECT_FALSE(result.ok());
    if (result.ok()) return {};
    return result.error();
  }

  void use(EventFormat format) {
    EventReaderOptions options;
    options.format = format;
    reader_ = std::make_unique<EventReader>(options);
  }

  [[nodiscard]] std::string plain(const std::string& fields) const {
    return fmt::format(R"({{"event_id":"{}","event_type":"payment.received.v1",{}}})", id_, fields);
  }
  [[nodiscard]] std::string structured(const std::string& data) const {
    return fmt::format(
        R"({{"specversion":"1.0","id":"{}","source":"/shop","type":"payment.received.v1",)"
        R"("sequence": 12.50, "data" : {} }})",
        id_, data);
  }
  [[nodiscard]] std::vector<RecordHeader> binary_headers() const {
    return {{"ce_specversion", "1.0"},
            {"ce_id", id_},
            {"ce_source", "/shop"},
            {"ce_type", "payment.received.v1"}};
  }

  const std::string id_ = new_uuid_v7().to_string();
  std::unique_ptr<EventReader> reader_ = std::make_unique<EventReader>(EventReaderOptions{});
  std::unique_ptr<Record> record_;
};

const std::vector<RecordHeader> kStructured = {
    {"content-type", "application/cloudevents+json; charset=utf-8"}};

TEST_F(EventReaderTest, ReadsAPlainJsonEvent) {
  const auto event = read(plain(R"("amount": 12.30, "account": "a-1")"));
  ASSERT_TRUE(event.ok()) << event.error().message;
  const EventView& e = event.value();
  EXPECT_EQ(e.mode(), EventMode::Json);
  EXPECT_EQ(e.id().to_string(), id_);
  EXPECT_EQ(e.id_text(), id_);
  EXPECT_EQ(e.type(), "payment.received.v1");
  EXPECT_EQ(e.data_text(), record_->payload);
  EXPECT_EQ(e.at("/account")->as_string(), "a-1");
  EXPECT_EQ(e.at("/amount")->literal(), "12.30");
  EXPECT_FALSE(e.at("/missing"));
  EXPECT_FALSE(e.attribute("source"));  // a plain JSON event has no attributes
}

TEST_F(EventReaderTest, TheIdAndTypeAreWhereTheOptionsSay) {
  EventReaderOptions options;
  options.id_pointer = "/meta/id";
  options.type_pointer = "/meta/kind";
  EventReader reader(options);
  const Record record(fmt::format(R"({{"meta":{{"id":"{}","kind":"k.v1"}}}})", id_), {});
  const auto event = reader.read(record.info, {});
  ASSERT_TRUE(event.ok()) << event.error().message;
  EXPECT_EQ(event.value().id_text(), id_);
  EXPECT_EQ(event.value().type(), "k.v1");
  const auto missing = reader.read(Record(plain(R"("a":1)"), {}).info, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().field, "/meta/id");
  EXPECT_EQ(missing.error().message, "no event id: /meta/id is missing or not a string");
}

TEST_F(EventReaderTest, ReadsACloudEventInBinaryMode) {
  use(EventFormat::CloudEvents);
  const auto event = read(R"({"amount": 1e2})", binary_headers());
  ASSERT_TRUE(event.ok()) << event.error().message;
  const EventView& e = event.value();
  EXPECT_EQ(e.mode(), EventMode::Binary);
  EXPECT_EQ(e.id_text(), id_);
  EXPECT_EQ(e.type(), "payment.received.v1");
  EXPECT_EQ(e.data_text(), R"({"amount": 1e2})");
  EXPECT_EQ(e.at("/amount")->literal(), "1e2");
  const auto source = e.attribute("source");
  ASSERT_TRUE(source);
  EXPECT_FALSE(source->json);
  EXPECT_EQ(source->text, "/shop");
  EXPECT_FALSE(e.attribute("subject"));
}

TEST_F(EventReaderTest, ReadsACloudEventInStructuredMode) {
  use(EventFormat::CloudEvents);
  const auto event = read(structured(R"({ "amount" : 0.00005, "tags": ["x"] })"), kStructured);
  ASSERT_TRUE(event.ok()) << event.error().message;
  const EventView& e = event.value();
  EXPECT_EQ(e.mode(), EventMode::Structured);
  EXPECT_EQ(e.id_text(), id_);
  // The data's bytes as they came, not the envelope, not written back out.
  EXPECT_EQ(e.data_text(), R"({ "amount" : 0.00005, "tags": ["x"] })");
  EXPECT_EQ(e.at("/amount")->literal(), "0.00005");
  EXPECT_EQ(e.data().literal(), e.data_text());
  EXPECT_EQ(e.at("/tags")->literal(), R"(["x"])");
  const auto source = e.attribute("source");
  ASSERT_TRUE(source && source->json);
  EXPECT_EQ(source->json->as_string(), "/shop");
  const auto sequence = e.attribute("sequence");  // an extension of any JSON type
  ASSERT_TRUE(sequence && sequence->json);
  EXPECT_EQ(sequence->json->literal(), "12.50");
  EXPECT_FALSE(e.attribute("subject"));
}

TEST_F(EventReaderTest, AutoReadsEachRecordAsItsHeadersSay) {
  use(EventFormat::Auto);
  const auto json = read(plain(R"("specversion": "1.0")"));
  ASSERT_TRUE(json.ok()) << json.error().message;
  EXPECT_EQ(json.value().mode(), EventMode::Json);  // a field never makes it a CloudEvent
  const auto binary = read("{}", binary_headers());
  ASSERT_TRUE(binary.ok()) << binary.error().message;
  EXPECT_EQ(binary.value().mode(), EventMode::Binary);
  const auto structured_event =
      read(structured("{}"), {{"Content-Type", "Application/CloudEvents+JSON"}});
  ASSERT_TRUE(structured_event.ok()) << structured_event.error().message;
  EXPECT_EQ(structured_event.value().mode(), EventMode::Structured);
}

TEST_F(EventReaderTest, FormatJsonIgnoresCloudEventsHeaders) {
  const auto event = read(plain(R"("a": 1)"), binary_headers());
  ASSERT_TRUE(event.ok()) << event.error().message;
  EXPECT_EQ(event.value().mode(), EventMode::Json);
}

TEST_F(EventReaderTest, RefusesWhatIsNotAnEvent) {
  using R = ValidationReason;
  auto e = refused(plain(R"("a": 1)"), {}, ParseLimits{10});
  EXPECT_EQ(e.reason, R::TooLarge);
  EXPECT_EQ(e.message, fmt::format("record value is {} bytes, more than the limit of 10",
                                   record_->payload.size()));
  e = refused("{not json");
  EXPECT_EQ(e.reason, R::InvalidJson);
  EXPECT_EQ(e.message.rfind("record value is not a JSON object: ", 0), 0U) << e.message;
  e = refused("{\"a\":\"\xff\"}");
  EXPECT_EQ(e.reason, R::InvalidUtf8);
  e = refused("[1, 2]");
  EXPECT_EQ(e.reason, R::InvalidJson);
  EXPECT_EQ(e.message, "record value is not a JSON object");
  e = refused(plain(R"("a": {"x": [{"k": 1, "k": 2}]})"));
  EXPECT_EQ(e.reason, R::DuplicateField);
  EXPECT_EQ(e.field, "/a/x/0/k");
  EXPECT_EQ(e.message, "field '/a/x/0/k' occurs twice in one object");
  e = refused(R"({"event_type":"t"})");
  EXPECT_EQ(e.reason, R::Missing);
  EXPECT_EQ(e.field, "/event_id");
  e = refused(fmt::format(R"({{"event_id":"{}","event_type":7}})", id_));
  EXPECT_EQ(e.reason, R::Missing);
  EXPECT_EQ(e.message, "no event type: /event_type is missing or not a string");
  e = refused(R"({"event_id":"nope","event_type":"t"})");
  EXPECT_EQ(e.reason, R::NotUuid);
  EXPECT_EQ(e.message, "event id 'nope' at /event_id is not a UUID");
  const std::string v4 = "0b5a5c1e-3d2f-4a6b-8c7d-9e0f1a2b3c4d";
  e = refused(fmt::format(R"({{"event_id":"{}","event_type":"t"}})", v4));
  EXPECT_EQ(e.reason, R::NotUuidV7);
  EXPECT_EQ(e.message, fmt::format("event id {} at /event_id is not a UUIDv7 (IDEM-1: the dedup "
                                   "key is the UUIDv7 born with the event)",
                                   v4));
}

TEST_F(EventReaderTest, RefusesWhatIsNotACloudEvent) {
  using R = ValidationReason;
  use(EventFormat::CloudEvents);
  auto e = refused("{}");
  EXPECT_EQ(e.reason, R::NotCloudEvent);
  EXPECT_EQ(e.message.rfind("not a CloudEvents record: no ce_specversion header", 0), 0U);
  e = refused("[]", {{"content-type", "application/cloudevents-batch+json"}});
  EXPECT_EQ(e.field, "content-type");
  EXPECT_NE(e.message.find("only structured mode"), std::string::npos) << e.message;
  auto headers = binary_headers();
  headers.erase(headers.begin() + 2);  // ce_source
  e = refused("{}", headers);
  EXPECT_EQ(e.field, "source");
  EXPECT_EQ(e.message, "CloudEvents attribute 'source' is missing (header ce_source)");
  headers = binary_headers();
  headers[0].value = "0.3";
  e = refused("{}", headers);
  EXPECT_EQ(e.message, "CloudEvents specversion '0.3': only 1.0 is read");
  headers = binary_headers();
  headers[1].value = "0b5a5c1e-3d2f-4a6b-8c7d-9e0f1a2b3c4d";
  e = refused("{}", headers);
  EXPECT_EQ(e.reason, R::NotUuidV7);
  EXPECT_EQ(e.field, "id");
  e = refused(R"({"specversion":"1.0","id":"x","type":"t","data":{}})", kStructured);
  EXPECT_EQ(e.message,
            "CloudEvents attribute 'source' is missing (a string field of the envelope)");
  const std::string envelope =
      fmt::format(R"({{"specversion":"1.0","id":"{}","source":"/s","type":"t")", id_);
  e = refused(envelope + "}", kStructured);
  EXPECT_EQ(e.field, "data");
  EXPECT_EQ(e.message, "the event has no data");
  e = refused(envelope + R"(,"data_base64":"e30="})", kStructured);
  EXPECT_EQ(e.message, "the event's data is data_base64: only JSON data is read");
  e = refused(envelope + R"(,"data":[1]})", kStructured);
  EXPECT_EQ(e.reason, R::WrongType);
  EXPECT_EQ(e.message, "the event's data is not a JSON object");
}

TEST_F(EventReaderTest, IntegersAreIntegersAndOtherNumbersKeepTheirDigits) {
  const auto event =
      read(plain(R"("price": 12.30, "hundred": 1e2, "big": 9223372036854775808, "neg": -5,)"
                 R"( "max": 9223372036854775807, "zero": -0.0, "flag": true, "none": null)"));
  ASSERT_TRUE(event.ok()) << event.error().message;
  const EventView& e = event.value();
  const auto price = *e.at("/price");
  EXPECT_EQ(price.kind(), JsonKind::Number);
  EXPECT_EQ(price.literal(), "12.30");
  EXPECT_FALSE(price.as_int64());
  EXPECT_DOUBLE_EQ(*price.as_double(), 12.3);
  const auto hundred = *e.at("/hundred");
  EXPECT_EQ(hundred.kind(), JsonKind::Number);  // an exponent is not an integer
  EXPECT_EQ(hundred.literal(), "1e2");
  const auto big = *e.at("/big");
  EXPECT_EQ(big.kind(), JsonKind::Unsigned);
  EXPECT_EQ(big.as_uint64(), 9223372036854775808ULL);
  EXPECT_FALSE(big.as_int64());
  EXPECT_EQ(big.literal(), "9223372036854775808");
  const auto neg = *e.at("/neg");
  EXPECT_EQ(neg.kind(), JsonKind::Integer);
  EXPECT_EQ(neg.as_int64(), -5);
  EXPECT_FALSE(neg.as_uint64());
  EXPECT_EQ(neg.literal(), "-5");
  EXPECT_EQ(e.at("/max")->kind(), JsonKind::Integer);
  EXPECT_EQ(e.at("/max")->as_int64(), INT64_MAX);
  EXPECT_EQ(e.at("/max")->as_uint64(), static_cast<std::uint64_t>(INT64_MAX));
  EXPECT_EQ(e.at("/zero")->kind(), JsonKind::Number);
  EXPECT_EQ(e.at("/zero")->literal(), "-0.0");
  EXPECT_EQ(e.at("/flag")->as_bool(), true);
  EXPECT_TRUE(e.at("/none")->is_null());
  EXPECT_TRUE(price.is_number());
  EXPECT_FALSE(e.at("/flag")->is_number());
}

TEST_F(EventReaderTest, IteratesNestedObjectsAndArrays) {
  const auto event =
      read(plain(R"("order": {"lines": [ {"sku": "a", "qty": 2}, 1.50 ], "a~/b": {"x": 7.0}})"));
  ASSERT_TRUE(event.ok()) << event.error().message;
  const JsonValue order = *event.value().at("/order");
  EXPECT_EQ(order.kind(), JsonKind::Object);
  EXPECT_EQ(order.size(), 2U);
  const auto members = order.members();
  ASSERT_EQ(members.size(), 2U);
  EXPECT_EQ(members[0].key, "lines");
  EXPECT_EQ(members[1].key, "a~/b");
  // A value found by iterating knows where it is: its literal and lookups below it work,
  // escaped keys included.
  EXPECT_EQ(members[1].value.at("/x")->literal(), "7.0");
  EXPECT_EQ(members[1].value.literal(), R"({"x": 7.0})");
  const auto lines = members[0].value.elements();
  ASSERT_EQ(lines.size(), 2U);
  EXPECT_EQ(members[0].value.size(), 2U);
  EXPECT_EQ(lines[1].literal(), "1.50");
  const auto first = lines[0].members();
  ASSERT_EQ(first.size(), 2U);
  EXPECT_EQ(first[0].value.as_string(), "a");
  EXPECT_EQ(first[1].value.as_int64(), 2);
  EXPECT_EQ(first[1].value.literal(), "2");
  EXPECT_EQ(lines[0].at("/qty")->as_int64(), 2);
  EXPECT_TRUE(lines[1].members().empty());
  EXPECT_TRUE(order.elements().empty());
  EXPECT_EQ(event.value().data().members().size(), 3U);
  EXPECT_EQ(order.compact(), R"({"lines":[{"sku":"a","qty":2},1.5],"a~/b":{"x":7.0}})");
}

TEST_F(EventReaderTest, ParsesEachRecordOnce) {
  const std::uint64_t before = detail::json_documents_parsed();
  const auto event = read(plain(R"("a": 1.25, "b": {"c": [1, 2.5]})"));
  ASSERT_TRUE(event.ok()) << event.error().message;
  EXPECT_EQ(detail::json_documents_parsed(), before + 1);
  // Lookups, literals and iteration read the same parse.
  EXPECT_EQ(event.value().at("/a")->literal(), "1.25");
  EXPECT_EQ(event.value().at("/b/c/1")->literal(), "2.5");
  EXPECT_EQ(event.value().data().members().size(), 4U);
  EXPECT_EQ(detail::json_documents_parsed(), before + 1);
  // A record refused before parsing (too large, not a CloudEvent) is not parsed.
  EXPECT_FALSE(read(plain("\"a\": 1"), {}, ParseLimits{10}).ok());
  EXPECT_EQ(detail::json_documents_parsed(), before + 1);
  EXPECT_TRUE(read(plain("\"a\": 2")).ok());
  EXPECT_EQ(detail::json_documents_parsed(), before + 2);
}

TEST(JsonDocument, ParsesAnyJsonAndFindsLiterals) {
  JsonDocument document;
  const auto root = document.parse(R"({"fee": 0.00005, "list": [1, "x"]})");
  ASSERT_TRUE(root.ok()) << root.error().message;
  EXPECT_EQ(root.value().at("/fee")->literal(), "0.00005");
  EXPECT_EQ(root.value().at("/list/1")->as_string(), "x");
  const auto scalar = document.parse("42");
  ASSERT_TRUE(scalar.ok());
  EXPECT_EQ(scalar.value().as_int64(), 42);
  const auto broken = document.parse("{\"a\":");
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.error().reason, ValidationReason::InvalidJson);
}

// The configured sinks read every parameter of a route from the one parse of the core's
// reader: a record is parsed once however many values its route takes.
TEST(SinksEventReader, ParsesEachRecordOnceForAllOfItsParameters) {
  const auto dir = std::filesystem::temp_directory_path() / test::unique_name("event-reader");
  std::filesystem::create_directories(dir);
  const auto file = dir / "routes.toml";
  std::ofstream(file) << R"toml(
[routes]
format = "cloudevents"
[routes.charge]
topic = "payments"
type = "payment.received.v1"
sql = "INSERT INTO ledger (amount, details, source, fee) VALUES ($amount, $details, $source, $fee)"
[routes.charge.params]
amount = { from = "/amount", type = "numeric", precision = 18, scale = 2 }
details = { from = "/details", type = "json" }
source = { from = "ce.source", type = "text" }
fee = { from = "/fee", type = "numeric", precision = 18, scale = 8 }
)toml";
  const auto config = sinks::load_sink_config(file.string(), {});
  ASSERT_TRUE(config);
  sinks::detail::CompiledRoute route;
  route.config = &config->routes[0];
  sinks::detail::EventReader reader("payments", config->topics.at("payments"), {&route},
                                    Backend::Postgres);
  const std::string id = new_uuid_v7().to_string();
  const Record record(fmt::format(R"({{"specversion":"1.0","id":"{}","source":"/shop",)"
                                  R"("type":"payment.received.v1","data":{{"amount":12.30,)"
                                  R"("details":{{"n": 1.0}},"fee":5e-05}}}})",
                                  id),
                      {{"content-type", "application/cloudevents+json"}});
  const std::uint64_t before = detail::json_documents_parsed();
  const auto event = reader.read(record.info, {});
  ASSERT_TRUE(event.ok()) << event.error().message;
  EXPECT_EQ(detail::json_documents_parsed(), before + 1);
  const auto& values = event.value().values;
  ASSERT_EQ(values.size(), 4U);
  EXPECT_EQ(std::get<std::string>(values[0].value()), "12.30");
  EXPECT_EQ(std::get<std::string>(values[1].value()), R"({"n":1.0})");
  EXPECT_EQ(std::get<std::string>(values[2].value()), "/shop");
  EXPECT_EQ(std::get<std::string>(values[3].value()), "0.00005000");
}

}  // namespace event_reader_test
}  // namespace idem
