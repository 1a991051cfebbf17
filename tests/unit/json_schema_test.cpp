// A configured route's JSON Schema (src/components/sinks/json_schema.cpp) checks the event
// through json_value_adapter.hpp, over the tree of the record's one parse. Each document
// here gets the same verdict from it as from valijson's own adapter for nlohmann::json
// (what the check used before, parsing the record a second time), and the violation names
// where the event breaks the schema.
#define VALIJSON_USE_EXCEPTIONS 1  // NOLINT(cppcoreguidelines-macro-usage)

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validator.hpp>

#include "idem/events/event_reader.hpp"
#include "sinks/json_schema.hpp"
#include "sinks/json_value_adapter.hpp"

namespace idem::sinks::detail {
namespace json_schema_test {

// Every keyword family valijson reads values through an adapter for: types, numbers
// (integer and not), strings, enum and const (frozen values compared), arrays (items,
// uniqueItems), objects (required, properties, additionalProperties), combinators.
constexpr const char* kSchema = R"({
  "$schema": "http://json-schema.org/draft-07/schema#",
  "type": "object",
  "required": ["order_id", "amount", "currency"],
  "additionalProperties": false,
  "properties": {
    "event_id": {"type": "string"},
    "event_type": {"type": "string"},
    "order_id": {"type": "integer", "minimum": 1},
    "amount": {"type": "string", "pattern": "^[0-9]+\\.[0-9]{2}$"},
    "rate": {"type": "number", "exclusiveMaximum": 1},
    "currency": {"enum": ["EUR", "USD"]},
    "kind": {"const": {"a": [1, 2]}},
    "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true, "maxItems": 3},
    "flag": {"type": "boolean"},
    "note": {"type": ["string", "null"]},
    "either": {"oneOf": [{"type": "integer"}, {"type": "string", "minLength": 2}]}
  }
})";

class JsonSchemaCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::temp_directory_path() /
            ("idem-schema-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
             ".json");
    std::ofstream(path_) << kSchema;
    schema_ = std::make_unique<JsonSchema>(path_.string());
    valijson::SchemaParser parser;
    parser.populateSchema(valijson::adapters::NlohmannJsonAdapter(nlohmann::json::parse(kSchema)),
                          reference_);
  }
  void TearDown() override { std::filesystem::remove(path_); }

  /// The verdict through the core's tree, and whether valijson's nlohmann adapter agrees.
  std::optional<std::string> check(const std::string& json) {
    JsonDocument doc;
    const Validated<JsonValue> root = doc.parse(json);
    EXPECT_TRUE(root.ok()) << json;
    std::optional<std::string> verdict = schema_->violation(root.value());
    valijson::Validator validator;
    const bool reference_valid = validator.validate(
        reference_, valijson::adapters::NlohmannJsonAdapter(nlohmann::json::parse(json)), nullptr);
    EXPECT_EQ(!verdict.has_value(), reference_valid)
        << json << ": the adapter over JsonValue says " << verdict.value_or("valid")
        << ", valijson's nlohmann adapter says " << (reference_valid ? "valid" : "invalid");
    return verdict;
  }

  std::filesystem::path path_;
  std::unique_ptr<JsonSchema> schema_;
  valijson::Schema reference_;
};

TEST_F(JsonSchemaCheck, TheTreeOfTheOneParseGetsTheVerdictOfASecondParse) {
  const std::vector<std::string> documents = {
      R"({"order_id": 7, "amount": "12.30", "currency": "EUR"})",
      R"({"event_id": "x", "event_type": "t", "order_id": 7, "amount": "12.30", "currency": "USD",
          "rate": 0.5, "kind": {"a": [1, 2]}, "tags": ["a", "b"], "flag": true, "note": null,
          "either": 3})",
      R"({"order_id": 7, "amount": "12.30", "currency": "EUR", "either": "ab"})",
      R"({"order_id": 7, "amount": "12.3", "currency": "EUR"})",
      R"({"order_id": 0, "amount": "12.30", "currency": "EUR"})",
      R"({"order_id": 7.5, "amount": "12.30", "currency": "EUR"})",
      R"({"order_id": 7, "amount": 12.30, "currency": "EUR"})",
      R"({"order_id": 7, "amount": "12.30", "currency": "GBP"})",
      R"({"order_id": 7, "amount": "12.30"})",
      R"({"order_id": 7, "amount": "12.30", "currency": "EUR", "extra": 1})",
      R"({"order_id": 7, "amount": "12.30", "currency": "EUR", "rate": 1})",
      R"({"order_id": 7, "amount": "12.30", "currency": "EUR", "kind": {"a": [2, 1]}})",
      R"({"order_id": 7, "amount": "12.30", "currency": "EUR", "tags": ["a", "a"]})",
      R"({"order_id": 7, "amount": "12.30", "currency": "EUR", "tags": ["a", 1]})",
      R"({"order_id": 7, "amount": "12.30", "currency": "EUR", "tags": ["a", "b", "c", "d"]})",
      R"({"order_id": 7, "amount": "12.30", "currency": "EUR", "flag": "yes"})",
      R"({"order_id": 7, "amount": "12.30", "currency": "EUR", "note": 5})",
      R"({"order_id": 7, "amount": "12.30", "currency": "EUR", "either": "a"})",
      R"({"order_id": 7, "amount": "12.30", "currency": "EUR", "either": 1.5})",
      R"({"order_id": 18446744073709551615, "amount": "12.30", "currency": "EUR"})",
      R"([1, 2])",
  };
  int valid = 0;
  for (const std::string& json : documents) valid += check(json).has_value() ? 0 : 1;
  EXPECT_EQ(valid, 3) << "the first three documents are valid, every other breaks the schema";
}

TEST_F(JsonSchemaCheck, AViolationNamesWhereTheEventBreaksTheSchema) {
  const auto wrong_amount = check(R"({"order_id": 7, "amount": "12.3", "currency": "EUR"})");
  ASSERT_TRUE(wrong_amount);
  EXPECT_NE(wrong_amount->find("amount"), std::string::npos) << *wrong_amount;
  const auto wrong_tag = check(R"({"order_id": 7, "amount": "1.00", "currency": "EUR",
                                   "tags": ["a", 1]})");
  ASSERT_TRUE(wrong_tag);
  EXPECT_NE(wrong_tag->find("tags"), std::string::npos) << *wrong_tag;
}

}  // namespace json_schema_test
}  // namespace idem::sinks::detail
