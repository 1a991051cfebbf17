#include "idem/reference/order_confirmed.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace order_confirmed_test {

using idem::ValidationReason;
using R = ValidationReason;
using namespace std::chrono_literals;

constexpr const char* kEventId = "01932c07-8a5e-7c3b-9f1a-3d2e4c5b6a79";

// The fields of a valid payload as raw JSON values, in schema order.
using Fields = std::vector<std::pair<std::string, std::string>>;

Fields valid_fields() {
  return {{"event_id", std::string("\"") + kEventId + "\""},
          {"event_type", "\"order.confirmed.v1\""},
          {"occurred_at", "\"2026-11-29T22:33:47.123456Z\""},
          {"order_id", "1234567"},
          {"customer_id", "987654"},
          {"total_amount", "\"1299.90\""}};
}

std::string to_payload(const Fields& fields) {
  std::string out = "{";
  for (const auto& [key, value] : fields) {
    if (out.size() > 1) out += ',';
    out += '"' + key + "\":" + value;
  }
  return out + "}";
}

std::string with(const std::string& key, const std::string& raw_value) {
  Fields f = valid_fields();
  for (auto& [k, v] : f) {
    if (k == key) v = raw_value;
  }
  return to_payload(f);
}

std::string without(const std::string& key) {
  Fields f = valid_fields();
  std::erase_if(f, [&](const auto& kv) { return kv.first == key; });
  return to_payload(f);
}

std::string valid_payload() {
  return to_payload(valid_fields());
}

idem::OrderConfirmed expected_event() {
  idem::OrderConfirmed e;
  e.event_id = *idem::Uuid::parse(kEventId);
  e.occurred_at = idem::Timestamp{std::chrono::sys_days{std::chrono::year{2026} / 11 / 29}} + 22h +
                  33min + 47s + 123456us;
  e.order_id = 1234567;
  e.customer_id = 987654;
  e.total_amount = idem::Amount::from_hundredths(129990);
  return e;
}

TEST(OrderConfirmed, ParsesAValidPayload) {
  const auto r = idem::parse_order_confirmed(valid_payload());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value(), expected_event());
}

TEST(OrderConfirmed, AcceptsAnyFieldOrderAndWhitespace) {
  const std::string json =
      " \n{ \"total_amount\" : \"1299.90\" ,\r\n\t\"customer_id\":987654 , \"order_id\" : 1234567,"
      "\"occurred_at\":\"2026-11-29T22:33:47.123456Z\",\"event_type\":\"order.confirmed.v1\","
      "\"event_id\":\"01932C07-8A5E-7C3B-9F1A-3D2E4C5B6A79\" } \n";
  const auto r = idem::parse_order_confirmed(json);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value(), expected_event());
}

TEST(OrderConfirmed, IgnoresUnknownFieldsOfAnyShape) {
  Fields f = valid_fields();
  f.insert(f.begin() + 2, {"trace", R"({"a":[1,2.5e-3,-0,{"b":null}],"c":true,"d":"\u00e9\n"})"});
  f.emplace_back("schema_version", "2");
  f.emplace_back("tags", "[]");
  f.emplace_back("meta", "{}");
  f.emplace_back("big", "1e400");  // valid JSON even though no double holds it
  const auto r = idem::parse_order_confirmed(to_payload(f));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value(), expected_event());
}

TEST(OrderConfirmed, UnescapesStringValues) {
  const std::string json = with("event_type", R"("order\u002econfirmed\u002Ev1")");
  const auto r1 = idem::parse_order_confirmed(json);
  ASSERT_TRUE(r1.ok()) << r1.error().message;

  const auto r2 = idem::parse_order_confirmed(with("total_amount", R"("\u0031\u00329\u0039.90")"));
  ASSERT_TRUE(r2.ok()) << r2.error().message;
  EXPECT_EQ(r2.value().total_amount.hundredths(), 129990);
}

TEST(OrderConfirmed, UnescapesKeys) {
  Fields f = valid_fields();
  f[0].first = R"(event\u005fid)";
  const auto r = idem::parse_order_confirmed(to_payload(f));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().event_id, *idem::Uuid::parse(kEventId));
}

TEST(OrderConfirmed, AcceptsTheLargestInt64Ids) {
  const auto r = idem::parse_order_confirmed(with("order_id", "9223372036854775807"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().order_id, INT64_MAX);
}

// The reference tables hold amounts as numeric(18,2): 16 integer digits, 2 fraction
// digits. The boundary accepts exactly what they can store.
TEST(OrderConfirmed, AcceptsTheLargestAmountTheLedgerStores) {
  for (const char* text : {"9999999999999999.99", "9999999999999999", "0009999999999999999.99"}) {
    SCOPED_TRACE(text);
    const auto r =
        idem::parse_order_confirmed(with("total_amount", std::string("\"") + text + "\""));
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_TRUE(r.value().total_amount <= idem::kMaxOrderAmount);
  }
  const auto r = idem::parse_order_confirmed(with("total_amount", "\"9999999999999999.99\""));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().total_amount, idem::kMaxOrderAmount);
  EXPECT_EQ(idem::kMaxOrderAmount.to_string(), "9999999999999999.99");
}

TEST(OrderConfirmed, RejectsAmountsAboveWhatTheLedgerStores) {
  // The first value above numeric(18,2), the largest Amount, and beyond Amount itself.
  for (const char* text :
       {"10000000000000000", "10000000000000000.00", "9999999999999999.991", "92233720368547758.07",
        "92233720368547758.08", "99999999999999999999"}) {
    SCOPED_TRACE(text);
    const auto r =
        idem::parse_order_confirmed(with("total_amount", std::string("\"") + text + "\""));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().field, "total_amount");
    if (std::string_view(text).ends_with(".991")) {
      EXPECT_EQ(r.error().reason, R::TooManyFractionDigits);
      continue;
    }
    EXPECT_EQ(r.error().reason, R::OutOfRange);
    const std::string& msg = r.error().message;
    EXPECT_EQ(msg.rfind("total_amount: ", 0), 0u) << msg;
    EXPECT_NE(msg.find("9999999999999999.99"), std::string::npos) << msg;
    EXPECT_NE(msg.find("numeric(18,2)"), std::string::npos) << msg;
  }
}

TEST(OrderConfirmed, RoundTripsThroughToJson) {
  const idem::OrderConfirmed e = expected_event();
  const std::string json = idem::to_json(e);
  EXPECT_EQ(
      json,
      R"({"event_id":"01932c07-8a5e-7c3b-9f1a-3d2e4c5b6a79","event_type":"order.confirmed.v1",)"
      R"("occurred_at":"2026-11-29T22:33:47.123456Z","order_id":1234567,"customer_id":987654,)"
      R"("total_amount":"1299.90"})");
  const auto r = idem::parse_order_confirmed(json);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value(), e);
}

TEST(OrderConfirmed, RoundTripsGeneratedEvents) {
  idem::UuidV7Generator gen;
  for (int i = 0; i < 1000; ++i) {
    idem::OrderConfirmed e;
    e.event_id = gen.next();
    e.occurred_at = idem::Timestamp{std::chrono::microseconds(1'764'455'627'000'000LL + i * 7'919)};
    e.order_id = 1 + i * 104'729LL;
    e.customer_id = INT64_MAX - i;
    e.total_amount = idem::Amount::from_hundredths(i * 37);
    const auto r = idem::parse_order_confirmed(idem::to_json(e));
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r.value(), e);
  }
}

// Every ValidationReason, with the exact field it names.
struct Case {
  const char* name;
  std::string json;
  std::string field;
  ValidationReason reason;
  idem::ParseLimits limits = {};
};

std::vector<Case> cases() {
  const std::string v4 = "\"01932c07-8a5e-4c3b-9f1a-3d2e4c5b6a79\"";
  std::vector<Case> c = {
      {"too large", valid_payload(), "", R::TooLarge, idem::ParseLimits{100}},
      {"too large is checked before UTF-8", std::string(200, '\xff'), "", R::TooLarge,
       idem::ParseLimits{100}},
      {"0xff in a string value", with("event_type", "\"order\xff\""), "", R::InvalidUtf8},
      {"lone continuation byte", with("total_amount", "\"1\x80\""), "", R::InvalidUtf8},
      {"invalid UTF-8 in an unknown field", valid_payload().insert(1, "\"x\":\"\xc3\x28\","), "",
       R::InvalidUtf8},
      {"overlong encoding", with("event_type", "\"\xc0\xaf\""), "", R::InvalidUtf8},
      {"empty", "", "", R::InvalidJson},
      {"whitespace only", "  \n ", "", R::InvalidJson},
      {"truncated after key", "{\"event_id\": ", "", R::InvalidJson},
      {"truncated object", valid_payload().substr(0, valid_payload().size() - 1), "",
       R::InvalidJson},
      {"unclosed string", "{\"event_id\": \"abc", "", R::InvalidJson},
      {"top-level array", "[" + valid_payload() + "]", "", R::InvalidJson},
      {"top-level number", "123", "", R::InvalidJson},
      {"top-level string", "\"x\"", "", R::InvalidJson},
      {"top-level null", "null", "", R::InvalidJson},
      {"trailing garbage", valid_payload() + "x", "", R::InvalidJson},
      {"two objects", valid_payload() + valid_payload(), "", R::InvalidJson},
      {"trailing comma", valid_payload().insert(valid_payload().size() - 1, ","), "",
       R::InvalidJson},
      {"missing colon", "{\"event_id\" \"x\"}", "", R::InvalidJson},
      {"single quotes", "{'event_id':'x'}", "", R::InvalidJson},
      {"bad escape", with("event_type", R"("order\x")"), "", R::InvalidJson},
      {"lone surrogate escape", with("event_type", R"("\ud800")"), "", R::InvalidJson},
      {"raw control char in string", with("event_type", "\"order\nconfirmed\""), "",
       R::InvalidJson},
      {"leading zero", with("order_id", "01"), "", R::InvalidJson},
      {"bare minus", with("order_id", "-"), "", R::InvalidJson},
      {"number with junk", with("order_id", "12x"), "", R::InvalidJson},
      {"bad literal in unknown field", valid_payload().insert(1, "\"x\":tru,"), "", R::InvalidJson},
      {"bad null in unknown field", valid_payload().insert(1, "\"x\":nul,"), "", R::InvalidJson},
      {"bad array in unknown field", valid_payload().insert(1, "\"x\":[1,,2],"), "",
       R::InvalidJson},
      {"bad number in unknown field", valid_payload().insert(1, "\"x\":1.,"), "", R::InvalidJson},
      {"mismatched brackets in unknown field", valid_payload().insert(1, "\"x\":[},"), "",
       R::InvalidJson},
      {"malformed JSON wins over an earlier schema error", with("order_id", "\"1\"") + "x", "",
       R::InvalidJson},
      {"malformed wrong-typed value", with("order_id", "[1,]"), "", R::InvalidJson},
      {"duplicate event_id",
       valid_payload().insert(1, "\"event_id\":\"" + std::string(kEventId) + "\","), "event_id",
       R::DuplicateField},
      {"duplicate via escaped key", valid_payload().insert(1, R"("order\u005fid":1,)"), "order_id",
       R::DuplicateField},
      {"missing event_id", without("event_id"), "event_id", R::Missing},
      {"missing event_type", without("event_type"), "event_type", R::Missing},
      {"missing occurred_at", without("occurred_at"), "occurred_at", R::Missing},
      {"missing order_id", without("order_id"), "order_id", R::Missing},
      {"missing customer_id", without("customer_id"), "customer_id", R::Missing},
      {"missing total_amount", without("total_amount"), "total_amount", R::Missing},
      {"empty object", "{}", "event_id", R::Missing},
      {"event_id number", with("event_id", "123"), "event_id", R::WrongType},
      {"event_type null", with("event_type", "null"), "event_type", R::WrongType},
      {"occurred_at object", with("occurred_at", "{\"s\":1}"), "occurred_at", R::WrongType},
      {"order_id float", with("order_id", "1.0"), "order_id", R::WrongType},
      {"order_id exponent", with("order_id", "1e3"), "order_id", R::WrongType},
      {"order_id string", with("order_id", "\"1\""), "order_id", R::WrongType},
      {"customer_id bool", with("customer_id", "true"), "customer_id", R::WrongType},
      {"customer_id array", with("customer_id", "[1]"), "customer_id", R::WrongType},
      {"amount as number", with("total_amount", "12.30"), "total_amount", R::WrongType},
      {"amount as integer", with("total_amount", "12"), "total_amount", R::WrongType},
      {"not a uuid", with("event_id", "\"not-a-uuid\""), "event_id", R::NotUuid},
      {"uuid in braces", with("event_id", "\"{" + std::string(kEventId) + "}\""), "event_id",
       R::NotUuid},
      {"uuid without dashes", with("event_id", "\"01932c078a5e7c3b9f1a3d2e4c5b6a79\""), "event_id",
       R::NotUuid},
      {"uuid v4", with("event_id", v4), "event_id", R::NotUuidV7},
      {"uuid v7 with wrong variant", with("event_id", "\"01932c07-8a5e-7c3b-cf1a-3d2e4c5b6a79\""),
       "event_id", R::NotUuidV7},
      {"nil uuid", with("event_id", "\"00000000-0000-0000-0000-000000000000\""), "event_id",
       R::NotUuidV7},
      {"amount exponent", with("total_amount", "\"1e5\""), "total_amount", R::NotDecimal},
      {"amount empty", with("total_amount", "\"\""), "total_amount", R::NotDecimal},
      {"amount comma", with("total_amount", "\"1,5\""), "total_amount", R::NotDecimal},
      {"amount negative", with("total_amount", "\"-0.5\""), "total_amount", R::NegativeAmount},
      {"amount three decimals", with("total_amount", "\"1.234\""), "total_amount",
       R::TooManyFractionDigits},
      {"amount too large", with("total_amount", "\"99999999999999999999\""), "total_amount",
       R::OutOfRange},
      {"order_id zero", with("order_id", "0"), "order_id", R::OutOfRange},
      {"order_id negative zero", with("order_id", "-0"), "order_id", R::OutOfRange},
      {"order_id negative", with("order_id", "-1"), "order_id", R::OutOfRange},
      {"order_id above int64", with("order_id", "9223372036854775808"), "order_id", R::OutOfRange},
      {"customer_id huge", with("customer_id", "123456789012345678901234567890"), "customer_id",
       R::OutOfRange},
      {"customer_id below int64", with("customer_id", "-9223372036854775809"), "customer_id",
       R::OutOfRange},
      {"occurred_at Feb 30", with("occurred_at", "\"2026-02-30T00:00:00Z\""), "occurred_at",
       R::NotRfc3339},
      {"occurred_at space", with("occurred_at", "\"2026-11-29 22:33:47Z\""), "occurred_at",
       R::NotRfc3339},
      {"occurred_at no offset", with("occurred_at", "\"2026-11-29T22:33:47\""), "occurred_at",
       R::NotRfc3339},
      {"unknown event type", with("event_type", "\"order.cancelled.v1\""), "event_type",
       R::UnknownEventType},
      {"event type of another version", with("event_type", "\"order.confirmed.v2\""), "event_type",
       R::UnknownEventType},
      {"first schema error in document order wins",
       to_payload({{"order_id", "0"}, {"event_id", "\"x\""}}), "order_id", R::OutOfRange},
  };
  return c;
}

TEST(OrderConfirmed, ReportsEveryReasonWithItsField) {
  std::vector<bool> covered(static_cast<std::size_t>(R::UnknownEventType) + 1, false);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const auto r = idem::parse_order_confirmed(c.json, c.limits);
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_EQ(r.error().field, c.field) << r.error().message;
    EXPECT_EQ(r.error().reason, c.reason)
        << "got " << idem::to_string(r.error().reason) << ": " << r.error().message;
    covered[static_cast<std::size_t>(c.reason)] = true;
  }
  for (std::size_t i = 0; i < covered.size(); ++i) {
    EXPECT_TRUE(covered[i]) << "no case for " << idem::to_string(static_cast<R>(i));
  }
}

TEST(OrderConfirmed, MessageNamesTheFieldAndTheReason) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const auto r = idem::parse_order_confirmed(c.json, c.limits);
    ASSERT_FALSE(r.ok());
    const std::string& msg = r.error().message;
    if (c.field.empty()) {
      EXPECT_EQ(msg.rfind("payload: ", 0), 0u) << msg;
    } else {
      EXPECT_EQ(msg.rfind(c.field + ": ", 0), 0u) << msg;
    }
    EXPECT_GT(msg.size(), c.field.size() + 10) << msg;
  }
}

TEST(OrderConfirmed, MessagesAreSpecific) {
  EXPECT_EQ(
      idem::parse_order_confirmed(with("event_id", "\"01932c07-8a5e-4c3b-9f1a-3d2e4c5b6a79\""))
          .error()
          .message,
      "event_id: not a UUIDv7 (version 4)");
  const auto amount = idem::parse_order_confirmed(with("total_amount", "12.30")).error().message;
  EXPECT_NE(amount.find("string"), std::string::npos) << amount;
  EXPECT_NE(amount.find("float"), std::string::npos) << amount;
  EXPECT_EQ(idem::parse_order_confirmed(without("customer_id")).error().message,
            "customer_id: required field is missing");
  const auto big =
      idem::parse_order_confirmed(valid_payload(), idem::ParseLimits{10}).error().message;
  EXPECT_NE(big.find("10 bytes"), std::string::npos) << big;
}

TEST(OrderConfirmed, MessageQuotesOffendingValuesSafely) {
  // Control characters and quotes are escaped; long values are cut on a
  // UTF-8 boundary, so the message stays one valid line.
  const std::string long_value = std::string(59, 'a') + "\xc3\xa9" + std::string(100, 'b');
  const auto r = idem::parse_order_confirmed(with("event_type", "\"x\\\"y\\n" + long_value + "\""));
  ASSERT_FALSE(r.ok());
  const std::string& msg = r.error().message;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(msg.find(R"(x\"y\u000a)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("..."), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 200u);
  EXPECT_EQ(msg.find("\xc3\""), std::string::npos) << "cut inside a UTF-8 sequence";
}

TEST(OrderConfirmed, ReportsTheFirstMissingFieldInSchemaOrder) {
  Fields f = valid_fields();
  std::erase_if(
      f, [](const auto& kv) { return kv.first == "total_amount" || kv.first == "occurred_at"; });
  const auto r = idem::parse_order_confirmed(to_payload(f));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "occurred_at");
  EXPECT_EQ(r.error().reason, R::Missing);
}

TEST(OrderConfirmed, AcceptsAPayloadExactlyAtTheSizeLimit) {
  const std::string json = valid_payload();
  EXPECT_TRUE(idem::parse_order_confirmed(json, idem::ParseLimits{json.size()}).ok());
  EXPECT_EQ(idem::parse_order_confirmed(json, idem::ParseLimits{json.size() - 1}).error().reason,
            R::TooLarge);
}

TEST(OrderConfirmed, NeverThrowsOnAnyPrefix) {
  const std::string json = valid_payload();
  for (std::size_t n = 0; n < json.size(); ++n) {
    SCOPED_TRACE(n);
    EXPECT_NO_THROW({
      const auto r = idem::parse_order_confirmed(json.substr(0, n));
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.error().reason, R::InvalidJson) << r.error().message;
    });
  }
}

TEST(OrderConfirmed, NeverThrowsOnMutatedPayloads) {
  // Deterministic byte mutations (flip, delete, duplicate) over a valid
  // payload: every result must be a value, never an exception or a crash.
  const std::string base = valid_payload();
  std::uint64_t lcg = 42;
  const auto next = [&lcg] {
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return lcg >> 33;
  };
  int accepted = 0;
  for (int i = 0; i < 20'000; ++i) {
    std::string s = base;
    const int edits = 1 + static_cast<int>(next() % 3);
    for (int k = 0; k < edits && !s.empty(); ++k) {
      const std::size_t at = next() % s.size();
      switch (next() % 3) {
        case 0: s[at] = static_cast<char>(next() & 0xFF); break;
        case 1: s.erase(at, 1); break;
        default: s.insert(at, 1, s[at]); break;
      }
    }
    bool ok = false;
    ASSERT_NO_THROW(ok = idem::parse_order_confirmed(s).ok()) << s;
    accepted += ok ? 1 : 0;
  }
  EXPECT_LT(accepted, 20'000);
}

TEST(OrderConfirmed, BoundsNestingInUnknownFields) {
  const auto nested = [](int depth) {
    return std::string(static_cast<std::size_t>(depth), '[') +
           std::string(static_cast<std::size_t>(depth), ']');
  };
  EXPECT_TRUE(
      idem::parse_order_confirmed(valid_payload().insert(1, "\"x\":" + nested(100) + ",")).ok());
  const auto deep =
      idem::parse_order_confirmed(valid_payload().insert(1, "\"x\":" + nested(5000) + ","));
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.error().reason, R::InvalidJson);
}

TEST(OrderConfirmed, ParsesLargePayloadsWhenTheLimitAllows) {
  // Beyond the size the per-thread buffers keep; later small events still parse.
  const std::string big =
      valid_payload().insert(1, "\"blob\":\"" + std::string(3 << 20, 'z') + "\",");
  EXPECT_EQ(idem::parse_order_confirmed(big).error().reason, R::TooLarge);
  const auto r = idem::parse_order_confirmed(big, idem::ParseLimits{big.size()});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value(), expected_event());
  EXPECT_TRUE(idem::parse_order_confirmed(valid_payload()).ok());
}

TEST(OrderConfirmed, ParsesConcurrentlyFromManyThreads) {
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (std::size_t t = 0; t < failures.size(); ++t) {
    threads.emplace_back([&failures, t] {
      const std::string good = valid_payload();
      const std::string bad = with("order_id", "0");
      for (int i = 0; i < 20'000; ++i) {
        const auto r = idem::parse_order_confirmed(i % 2 == 0 ? good : bad);
        const bool right = i % 2 == 0 ? r.ok() && r.value() == expected_event()
                                      : !r.ok() && r.error().reason == R::OutOfRange;
        if (!right) ++failures[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int f : failures) EXPECT_EQ(f, 0);
}

TEST(OrderConfirmed, ReasonsHaveStableSnakeCaseNames) {
  const std::pair<R, const char*> names[] = {
      {R::TooLarge, "too_large"},
      {R::InvalidUtf8, "invalid_utf8"},
      {R::InvalidJson, "invalid_json"},
      {R::DuplicateField, "duplicate_field"},
      {R::Missing, "missing"},
      {R::WrongType, "wrong_type"},
      {R::NotUuid, "not_uuid"},
      {R::NotUuidV7, "not_uuid_v7"},
      {R::NotDecimal, "not_decimal"},
      {R::NegativeAmount, "negative_amount"},
      {R::TooManyFractionDigits, "too_many_fraction_digits"},
      {R::OutOfRange, "out_of_range"},
      {R::NotRfc3339, "not_rfc3339"},
      {R::UnknownEventType, "unknown_event_type"},
      {R::TooManyHeaders, "too_many_headers"},
      {R::NotCloudEvent, "not_cloud_event"},
      {R::SchemaViolation, "schema_violation"},
      {R::UrlSegment, "url_segment"},
  };
  EXPECT_EQ(std::size(names), static_cast<std::size_t>(R::UrlSegment) + 1);
  for (const auto& [reason, name] : names) EXPECT_EQ(idem::to_string(reason), name);
}

}  // namespace order_confirmed_test
