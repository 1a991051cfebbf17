// valijson aborts the process on a schema it cannot read unless told to throw instead.
#define VALIJSON_USE_EXCEPTIONS 1  // NOLINT(cppcoreguidelines-macro-usage)

#include "sinks/json_schema.hpp"
#include "sinks/json_value_adapter.hpp"

#include <fstream>
#include <iterator>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

namespace idem::sinks::detail {

struct JsonSchema::Impl {
  valijson::Schema schema;
};

JsonSchema::JsonSchema(const std::string& path) : impl_(std::make_unique<Impl>()) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("cannot read the schema file {}", path));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) throw std::runtime_error(fmt::format("{} is not JSON", path));
  try {
    valijson::SchemaParser parser;
    const valijson::adapters::NlohmannJsonAdapter adapter(doc);
    parser.populateSchema(adapter, impl_->schema);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("{} is not a usable JSON Schema: {}", path, e.what()));
  }
}

JsonSchema::~JsonSchema() = default;

std::optional<std::string> JsonSchema::violation(const JsonValue& data) const {
  valijson::Validator validator;
  valijson::ValidationResults results;
  const JsonValueAdapter adapter(data);
  if (validator.validate(impl_->schema, adapter, &results)) return std::nullopt;
  // valijson reports the outermost failure first ("failed to match all subschemas"); the
  // last one is where the event goes wrong.
  valijson::ValidationResults::Error error;
  std::string where;
  std::string what = "does not match the schema";
  while (results.popError(error)) {
    where.clear();
    for (const auto& step : error.context) where += step == "<root>" ? "" : step;
    what = error.description;
  }
  return fmt::format("{}: {}", where.empty() ? "/" : where, what);
}

}  // namespace idem::sinks::detail
