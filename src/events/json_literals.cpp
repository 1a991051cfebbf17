#include "events/json_literals.hpp"

#include <charconv>
#include <string>

namespace idem::detail {

namespace {

using simdjson::ondemand::json_type;

// A token of a JSON pointer (RFC 6901) as the key it names: ~1 is '/', ~0 is '~'.
std::string unescaped_token(std::string_view token) {
  std::string out;
  for (std::size_t i = 0; i < token.size(); ++i) {
    if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
      out.push_back(token[++i] == '1' ? '/' : '~');
    } else {
      out.push_back(token[i]);
    }
  }
  return out;
}

// The value's text, up to where it ends: an object or array whole, a scalar's token
// (which simdjson gives with the whitespace after it).
std::optional<std::string_view> text_of(simdjson::ondemand::value value) {
  json_type type{};
  if (value.type().get(type) != simdjson::SUCCESS) return std::nullopt;
  std::string_view text;
  if (type == json_type::object) {
    simdjson::ondemand::object object;
    if (value.get_object().get(object) != simdjson::SUCCESS ||
        object.raw_json().get(text) != simdjson::SUCCESS)
      return std::nullopt;
  } else if (type == json_type::array) {
    simdjson::ondemand::array array;
    if (value.get_array().get(array) != simdjson::SUCCESS ||
        array.raw_json().get(text) != simdjson::SUCCESS)
      return std::nullopt;
  } else {
    text = value.raw_json_token();
  }
  while (!text.empty() &&
         (text.back() == ' ' || text.back() == '\n' || text.back() == '\r' || text.back() == '\t'))
    text.remove_suffix(1);
  return text;
}

// The text of the value at `pointer` below `value`. simdjson's own on-demand at_pointer
// compares keys as written (escapes and all); the DOM compares them unescaped, and so
// does this walk, so both find the same value.
std::optional<std::string_view> text_at(simdjson::ondemand::value value, std::string_view pointer) {
  if (pointer.empty()) return text_of(value);
  if (pointer[0] != '/') return std::nullopt;
  pointer.remove_prefix(1);
  const std::size_t slash = pointer.find('/');
  const std::string token = unescaped_token(pointer.substr(0, slash));
  const std::string_view rest =
      slash == std::string_view::npos ? std::string_view() : pointer.substr(slash);
  json_type type{};
  if (value.type().get(type) != simdjson::SUCCESS) return std::nullopt;
  if (type == json_type::object) {
    simdjson::ondemand::object object;
    if (value.get_object().get(object) != simdjson::SUCCESS) return std::nullopt;
    for (auto member : object) {
      simdjson::ondemand::field field;
      std::string_view key;
      if (std::move(member).get(field) != simdjson::SUCCESS ||
          field.unescaped_key().get(key) != simdjson::SUCCESS)
        return std::nullopt;
      if (key == token) return text_at(field.value(), rest);
    }
    return std::nullopt;
  }
  if (type == json_type::array) {
    std::size_t index = 0;
    const char* const end = token.data() + token.size();
    if (token.empty() || (token.size() > 1 && token[0] == '0') ||
        std::from_chars(token.data(), end, index).ptr != end)
      return std::nullopt;
    simdjson::ondemand::array array;
    if (value.get_array().get(array) != simdjson::SUCCESS) return std::nullopt;
    std::size_t at = 0;
    for (auto element : array) {
      if (element.error() != simdjson::SUCCESS) return std::nullopt;
      if (at++ == index) return text_at(element.value_unsafe(), rest);
    }
  }
  return std::nullopt;
}

}  // namespace

struct JsonLiterals::Parser {
  simdjson::ondemand::parser parser;
};

JsonLiterals::JsonLiterals() : parser_(std::make_unique<Parser>()) {}

JsonLiterals::~JsonLiterals() = default;

std::optional<std::string_view> JsonLiterals::find(simdjson::padded_string_view json,
                                                   std::string_view pointer) {
  simdjson::ondemand::document doc;
  simdjson::ondemand::value root;
  if (parser_->parser.iterate(json).get(doc) != simdjson::SUCCESS ||
      doc.get_value().get(root) != simdjson::SUCCESS)
    return std::nullopt;
  return text_at(root, pointer);
}

}  // namespace idem::detail
