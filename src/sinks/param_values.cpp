#include "sinks/param_values.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <iterator>
#include <variant>

#include <fmt/format.h>

#include "idem/timestamp.hpp"
#include "idem/uuid.hpp"

namespace idem::sinks::detail {

namespace {

std::string_view type_name(ParamType type) noexcept {
  switch (type) {
    case ParamType::Text: return "text";
    case ParamType::Integer: return "integer";
    case ParamType::Numeric: return "numeric";
    case ParamType::Boolean: return "boolean";
    case ParamType::Uuid: return "uuid";
    case ParamType::Timestamp: return "timestamp";
    case ParamType::Json: return "json";
  }
  return "?";
}

ValidationError error(const ValueContext& ctx, ValidationReason reason, std::string_view what) {
  return {std::string(ctx.field), reason,
          fmt::format("field '{}' (parameter ${}, {}): {}", ctx.field, ctx.spec.name,
                      type_name(ctx.spec.type), what)};
}

// Values quoted in messages are cut short and stripped of control characters, so a
// dead letter's reason stays one readable line whatever the event held.
std::string shown(std::string_view v) {
  std::string out;
  for (const char c : v.substr(0, 64))
    out.push_back(std::iscntrl(static_cast<unsigned char>(c)) ? '?' : c);
  if (v.size() > 64) out += "...";
  return out;
}

Validated<Param> numeric(std::string_view text, const ValueContext& ctx) {
  Validated<Decimal> d =
      parse_decimal(text, ctx.spec.precision, ctx.spec.scale, std::string(ctx.field));
  if (!d.ok()) {
    ValidationError e = d.error();
    e.message = error(ctx, e.reason, e.message).message;
    return e;
  }
  using Binding = ParamSpec::Binding;
  const Binding binding = ctx.spec.binding;
  if (binding == Binding::Scaled || (binding == Binding::Auto && ctx.backend == Backend::Sqlite))
    return Param(d.value().scaled());
  return Param(d.value().text());
}

}  // namespace

std::string json_string(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back('"');
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", u);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

std::string Decimal::text() const {
  std::string out;
  if (negative) out.push_back('-');
  const std::size_t int_digits = digits.size() - static_cast<std::size_t>(scale);
  out.append(digits, 0, int_digits);
  if (scale > 0) {
    out.push_back('.');
    out.append(digits, int_digits, std::string::npos);
  }
  return out;
}

std::int64_t Decimal::scaled() const noexcept {
  std::int64_t v = 0;
  for (const char c : digits) v = v * 10 + (c - '0');
  return negative ? -v : v;
}

Validated<Decimal> parse_decimal(std::string_view text, int precision, int scale,
                                 const std::string& field) {
  const auto bad = [&](ValidationReason reason, std::string what) {
    return ValidationError{field, reason, std::move(what)};
  };
  Decimal d;
  d.scale = scale;
  std::string_view s = text;
  if (!s.empty() && s[0] == '-') {
    d.negative = true;
    s.remove_prefix(1);
  }
  const std::size_t e = s.find_first_of("eE");
  const std::string_view mantissa = s.substr(0, e);
  std::string_view exponent = e == std::string_view::npos ? std::string_view() : s.substr(e + 1);
  bool exponent_negative = false;
  if (!exponent.empty() && (exponent[0] == '+' || exponent[0] == '-')) {
    exponent_negative = exponent[0] == '-';
    exponent.remove_prefix(1);
  }
  const std::size_t point = mantissa.find('.');
  std::string_view int_part = mantissa.substr(0, point);
  std::string_view frac_part =
      point == std::string_view::npos ? std::string_view() : mantissa.substr(point + 1);
  const auto all_digits = [](std::string_view p) {
    return std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (int_part.empty() || !all_digits(int_part) || !all_digits(frac_part) ||
      (point != std::string_view::npos && frac_part.empty()) ||
      (e != std::string_view::npos && (exponent.empty() || !all_digits(exponent)))) {
    return bad(ValidationReason::NotDecimal,
               fmt::format("'{}' is not an exact decimal (digits, optionally a point and "
                           "digits, optionally e or E and a signed exponent)",
                           shown(text)));
  }
  // An exponent moves the point: the value is read as if written out without it, from
  // the same digits (never through a double), and the rules below apply to that form.
  std::string written_out;
  std::string int_digits;
  std::string frac_digits;
  if (e != std::string_view::npos) {
    while (exponent.size() > 1 && exponent[0] == '0') exponent.remove_prefix(1);
    int shift = 0;
    if (exponent.size() > 4 ||
        std::from_chars(exponent.data(), exponent.data() + exponent.size(), shift).ec !=
            std::errc() ||
        shift > kMaxDecimalExponent) {
      return bad(ValidationReason::OutOfRange,
                 fmt::format("'{}' has an exponent beyond {} (either sign)", shown(text),
                             kMaxDecimalExponent));
    }
    if (exponent_negative) shift = -shift;
    std::string digits(int_part);
    digits.append(frac_part);
    const auto at = static_cast<std::int64_t>(int_part.size()) + shift;  // the point, in `digits`
    const auto size = static_cast<std::int64_t>(digits.size());
    if (at <= 0) {
      int_digits = "0";
      frac_digits.assign(static_cast<std::size_t>(-at), '0');
      frac_digits += digits;
    } else if (at >= size) {
      int_digits = digits;
      int_digits.append(static_cast<std::size_t>(at - size), '0');
    } else {
      int_digits = digits.substr(0, static_cast<std::size_t>(at));
      frac_digits = digits.substr(static_cast<std::size_t>(at));
    }
    int_part = int_digits;
    frac_part = frac_digits;
    written_out = fmt::format(" (written out: {}{}{}{})", d.negative ? "-" : "", shown(int_part),
                              frac_part.empty() ? "" : ".", shown(frac_part));
  }
  if (frac_part.size() > static_cast<std::size_t>(scale)) {
    return bad(ValidationReason::TooManyFractionDigits,
               fmt::format("'{}'{} has {} digits after the point, more than the scale {}",
                           shown(text), written_out, frac_part.size(), scale));
  }
  std::string_view significant = int_part;
  while (significant.size() > 1 && significant[0] == '0') significant.remove_prefix(1);
  if (significant == "0") significant = {};
  if (significant.size() > static_cast<std::size_t>(precision - scale)) {
    return bad(ValidationReason::OutOfRange,
               fmt::format("'{}'{} has more than {} digits before the point (precision {}, "
                           "scale {})",
                           shown(text), written_out, precision - scale, precision, scale));
  }
  d.digits.assign(significant.empty() ? std::string_view("0") : significant);
  d.digits.append(frac_part);
  d.digits.append(static_cast<std::size_t>(scale) - frac_part.size(), '0');
  if (d.negative && std::all_of(d.digits.begin(), d.digits.end(), [](char c) { return c == '0'; }))
    d.negative = false;  // -0.00 is 0.00
  return d;
}

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

bool needs_literal(simdjson::dom::element value, const ParamSpec& spec) noexcept {
  using simdjson::dom::element_type;
  if (value.type() == element_type::NULL_VALUE) return false;
  return spec.type == ParamType::Json ||
         (spec.type == ParamType::Numeric && value.type() == element_type::DOUBLE);
}

Validated<Param> json_param(simdjson::dom::element value, const ValueContext& ctx,
                            std::optional<std::string_view> literal) {
  using simdjson::dom::element_type;
  const element_type kind = value.type();
  if (kind == element_type::NULL_VALUE) return absent_param(ctx, true);
  const ParamType type = ctx.spec.type;
  if (type == ParamType::Json) {
    // The value as it came, only the whitespace between its tokens removed: written back
    // out from the DOM, a number would go through a double.
    std::string compact(literal ? literal->size() : 0, '\0');
    std::size_t length = 0;
    if (!literal || simdjson::minify(literal->data(), literal->size(), compact.data(), length) !=
                        simdjson::SUCCESS)
      return error(ctx, ValidationReason::InvalidJson, "its JSON text could not be read");
    compact.resize(length);
    return Param(compact);
  }
  if (kind == element_type::STRING) {
    const std::string_view text = value.get_string().value_unsafe();
    if (type == ParamType::Text) return Param(text);
    if (type == ParamType::Numeric || type == ParamType::Uuid || type == ParamType::Timestamp)
      return text_param(text, ctx);
  }
  if (type == ParamType::Integer) {
    if (kind == element_type::INT64) return Param(value.get_int64().value_unsafe());
    if (kind == element_type::UINT64)
      return error(ctx, ValidationReason::OutOfRange, "the integer is above 2^63-1");
  }
  if (type == ParamType::Numeric) {
    if (kind == element_type::INT64)
      return numeric(fmt::format("{}", value.get_int64().value_unsafe()), ctx);
    if (kind == element_type::UINT64)
      return numeric(fmt::format("{}", value.get_uint64().value_unsafe()), ctx);
    if (kind == element_type::DOUBLE) return numeric(literal.value_or(std::string_view()), ctx);
  }
  if (type == ParamType::Boolean && kind == element_type::BOOL)
    return Param(value.get_bool().value_unsafe());
  static constexpr std::string_view kExpected[] = {
      "a JSON string", "a JSON integer", "a decimal string or a JSON number",
      "true or false", "a UUID string",  "an RFC 3339 date-time string",
      "any JSON value"};
  return error(ctx, ValidationReason::WrongType,
               fmt::format("expected {}", kExpected[static_cast<int>(type)]));
}

Validated<Param> text_param(std::string_view text, const ValueContext& ctx) {
  switch (ctx.spec.type) {
    case ParamType::Text: return Param(text);
    case ParamType::Json: return Param(json_string(text));
    case ParamType::Numeric: return numeric(text, ctx);
    case ParamType::Integer: {
      std::int64_t v = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || end != text.data() + text.size() || text.empty())
        return error(ctx, ValidationReason::WrongType,
                     fmt::format("'{}' is not an integer", shown(text)));
      return Param(v);
    }
    case ParamType::Boolean:
      if (text == "true" || text == "false") return Param(text == "true");
      return error(ctx, ValidationReason::WrongType,
                   fmt::format("'{}' is not true or false", shown(text)));
    case ParamType::Uuid: {
      const auto id = Uuid::parse(text);
      if (!id)
        return error(ctx, ValidationReason::NotUuid,
                     fmt::format("'{}' is not a UUID", shown(text)));
      return Param(*id);
    }
    case ParamType::Timestamp: {
      const auto t = parse_rfc3339(text);
      if (!t)
        return error(ctx, ValidationReason::NotRfc3339,
                     fmt::format("'{}' is not an RFC 3339 date-time", shown(text)));
      return Param(*t);
    }
  }
  return error(ctx, ValidationReason::WrongType, "unsupported type");
}

Validated<Param> absent_param(const ValueContext& ctx, bool is_null) {
  if (!ctx.spec.required) return Param(nullptr);
  return error(ctx, is_null ? ValidationReason::WrongType : ValidationReason::Missing,
               is_null ? "is null, and the parameter is required" : "is missing");
}

namespace {

std::string text_of(const Param& value) {
  struct Visitor {
    std::string operator()(std::monostate) const { return {}; }
    std::string operator()(std::int64_t v) const { return fmt::format("{}", v); }
    std::string operator()(double v) const { return fmt::format("{}", v); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return v; }
    std::string operator()(const Uuid& v) const { return v.to_string(); }
  };
  return std::visit(Visitor{}, value.value());
}

}  // namespace

std::optional<std::string> insert_value(std::string& out, const Param& value, const ParamSpec& spec,
                                        TemplatePlace place) {
  const std::string text = text_of(value);
  switch (place) {
    case TemplatePlace::Url:
      for (const char c : text) {
        const auto u = static_cast<unsigned char>(c);
        if (std::isalnum(u) != 0 || c == '-' || c == '.' || c == '_' || c == '~') {
          out.push_back(c);
        } else {
          fmt::format_to(std::back_inserter(out), "%{:02X}", u);
        }
      }
      return std::nullopt;
    case TemplatePlace::Header:
      if (std::any_of(text.begin(), text.end(),
                      [](char c) { return std::iscntrl(static_cast<unsigned char>(c)) != 0; }))
        return fmt::format(
            "parameter ${} has a control character (CR, LF, ...): it cannot go "
            "into a header value",
            spec.name);
      out += text;
      return std::nullopt;
    case TemplatePlace::Body:
      // A text from a Kafka header or key is bytes: JSON has no escape for a byte that
      // is not UTF-8, so such a value would make the body unreadable.
      if (!simdjson::validate_utf8(text))
        return fmt::format("parameter ${} is not valid UTF-8: it cannot go into a JSON body",
                           spec.name);
      if (value.is_null()) {
        out += "null";
      } else if (spec.type == ParamType::Integer || spec.type == ParamType::Boolean ||
                 spec.type == ParamType::Json) {
        out += text;
      } else {
        out += json_string(text);
      }
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace idem::sinks::detail
