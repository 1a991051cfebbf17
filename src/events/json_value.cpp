#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>

#include <fmt/format.h>

#include "events/json_source.hpp"
#include "events/parse_count.hpp"
#include "idem/events/event_reader.hpp"

namespace idem {

namespace detail {

namespace {

std::atomic<std::uint64_t> documents_parsed{0};

}  // namespace

void append_token(std::string& out, std::string_view name) {
  for (const char c : name) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
}

std::uint64_t json_documents_parsed() noexcept {
  return documents_parsed.load(std::memory_order_relaxed);
}

simdjson::error_code JsonSource::parse(std::string_view bytes, simdjson::dom::element& root) {
  length = bytes.size();
  const std::size_t need = length + simdjson::SIMDJSON_PADDING;
  if (buffer.size() < need) buffer.resize(std::max(need, 2 * buffer.size()));
  if (length > 0) std::memcpy(buffer.data(), bytes.data(), length);
  documents_parsed.fetch_add(1, std::memory_order_relaxed);
  return parser.parse(buffer.data(), length, false).get(root);
}

std::optional<std::string_view> JsonSource::literal(std::string_view pointer) {
  return literals.find(simdjson::padded_string_view(buffer.data(), length, buffer.size()), pointer);
}

JsonValue JsonSource::value(simdjson::dom::element e, std::string pointer) {
  // JsonValue keeps the element as its bytes (its header says why): they must fit, and
  // the element must be one that may be copied as bytes.
  static_assert(sizeof(simdjson::dom::element) == sizeof(JsonValue::element_));
  static_assert(alignof(simdjson::dom::element) <= alignof(void*));
  static_assert(std::is_trivially_copyable_v<simdjson::dom::element>);
  JsonValue v;
  std::memcpy(v.element_, &e, sizeof e);
  v.source_ = this;
  v.pointer_ = std::move(pointer);
  return v;
}

simdjson::dom::element JsonSource::element_of(const JsonValue& value) noexcept {
  simdjson::dom::element e;
  std::memcpy(&e, value.element_, sizeof e);
  return e;
}

}  // namespace detail

namespace {

using detail::JsonSource;
using simdjson::dom::element_type;

}  // namespace

JsonKind JsonValue::kind() const noexcept {
  switch (JsonSource::element_of(*this).type()) {
    case element_type::NULL_VALUE: return JsonKind::Null;
    case element_type::BOOL: return JsonKind::Bool;
    case element_type::INT64: return JsonKind::Integer;
    case element_type::UINT64: return JsonKind::Unsigned;
    case element_type::DOUBLE: return JsonKind::Number;
    case element_type::STRING: return JsonKind::String;
    case element_type::ARRAY: return JsonKind::Array;
    case element_type::OBJECT: return JsonKind::Object;
  }
  return JsonKind::Null;
}

bool JsonValue::is_number() const noexcept {
  const JsonKind k = kind();
  return k == JsonKind::Integer || k == JsonKind::Unsigned || k == JsonKind::Number;
}

std::optional<bool> JsonValue::as_bool() const noexcept {
  bool v = false;
  if (JsonSource::element_of(*this).get_bool().get(v) != simdjson::SUCCESS) return std::nullopt;
  return v;
}

std::optional<std::int64_t> JsonValue::as_int64() const noexcept {
  const auto e = JsonSource::element_of(*this);
  if (e.type() != element_type::INT64) return std::nullopt;
  return e.get_int64().value_unsafe();
}

std::optional<std::uint64_t> JsonValue::as_uint64() const noexcept {
  const auto e = JsonSource::element_of(*this);
  if (e.type() != element_type::INT64 && e.type() != element_type::UINT64) return std::nullopt;
  std::uint64_t v = 0;
  if (e.get_uint64().get(v) != simdjson::SUCCESS) return std::nullopt;  // a negative integer
  return v;
}

std::optional<double> JsonValue::as_double() const noexcept {
  double v = 0;
  if (JsonSource::element_of(*this).get_double().get(v) != simdjson::SUCCESS) return std::nullopt;
  return v;
}

std::optional<std::string_view> JsonValue::as_string() const noexcept {
  std::string_view v;
  if (JsonSource::element_of(*this).get_string().get(v) != simdjson::SUCCESS) return std::nullopt;
  return v;
}

std::optional<std::string_view> JsonValue::literal() const {
  if (source_ == nullptr) return std::nullopt;
  return source_->literal(pointer_);
}

std::string JsonValue::compact() const {
  return simdjson::minify(JsonSource::element_of(*this));
}

std::optional<JsonValue> JsonValue::at(std::string_view pointer) const {
  simdjson::dom::element found;
  if (JsonSource::element_of(*this).at_pointer(pointer).get(found) != simdjson::SUCCESS)
    return std::nullopt;
  std::string where = pointer_;
  where += pointer;
  return source_->value(found, std::move(where));
}

std::vector<JsonValue::Member> JsonValue::members() const {
  std::vector<Member> out;
  simdjson::dom::object object;
  if (JsonSource::element_of(*this).get_object().get(object) != simdjson::SUCCESS) return out;
  out.reserve(object.size());
  for (const auto field : object) {
    std::string where = pointer_;
    where.push_back('/');
    detail::append_token(where, field.key);
    out.push_back(Member{field.key, source_->value(field.value, std::move(where))});
  }
  return out;
}

std::vector<JsonValue> JsonValue::elements() const {
  std::vector<JsonValue> out;
  simdjson::dom::array array;
  if (JsonSource::element_of(*this).get_array().get(array) != simdjson::SUCCESS) return out;
  out.reserve(array.size());
  std::size_t index = 0;
  for (const auto item : array)
    out.push_back(source_->value(item, fmt::format("{}/{}", pointer_, index++)));
  return out;
}

std::size_t JsonValue::size() const noexcept {
  const auto e = JsonSource::element_of(*this);
  if (e.type() == element_type::OBJECT) return e.get_object().value_unsafe().size();
  if (e.type() == element_type::ARRAY) return e.get_array().value_unsafe().size();
  return 0;
}

JsonDocument::JsonDocument() : source_(std::make_unique<JsonSource>()) {}

JsonDocument::~JsonDocument() = default;

Validated<JsonValue> JsonDocument::parse(std::string_view json) {
  simdjson::dom::element root;
  if (const auto error = source_->parse(json, root)) {
    return ValidationError{{},
                           error == simdjson::UTF8_ERROR ? ValidationReason::InvalidUtf8
                                                         : ValidationReason::InvalidJson,
                           fmt::format("not JSON: {}", simdjson::error_message(error))};
  }
  return source_->value(root, {});
}

}  // namespace idem
