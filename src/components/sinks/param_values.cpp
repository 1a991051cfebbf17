#include "sinks/param_values.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <iterator>
#include <variant>

#include <fmt/format.h>
#include <simdjson.h>

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

bool needs_literal(const JsonValue& value, const ParamSpec& spec) noexcept {
  const JsonKind kind = value.kind();
  if (kind == JsonKind::Null) return false;
  return spec.type == ParamType::Json ||
         (spec.type == ParamType::Numeric && kind == JsonKind::Number);
}

Validated<Param> json_param(const JsonValue& value, const ValueContext& ctx) {
  const JsonKind kind = value.kind();
  if (kind == JsonKind::Null) return absent_param(ctx, true);
  const ParamType type = ctx.spec.type;
  // Empty when not needed, or not found (never for a value of a parsed document).
  const std::string_view literal = needs_literal(value, ctx.spec)
                                       ? value.literal().value_or(std::string_view())
                                       : std::string_view();
  if (type == ParamType::Json) {
    // The value as it came, only the whitespace between its tokens removed: written back
    // out from the DOM, a number would go through a double.
    std::string compact(literal.size(), '\0');
    std::size_t length = 0;
    if (literal.empty() || simdjson::minify(literal.data(), literal.size(), compact.data(),
                                            length) != simdjson::SUCCESS)
      return error(ctx, ValidationReason::InvalidJson, "its JSON text could not be read");
    compact.resize(length);
    return Param(compact);
  }
  if (kind == JsonKind::String) {
    const std::string_view text = *value.as_string();
    if (type == ParamType::Text) return Param(text);
    if (type == ParamType::Numeric || type == ParamType::Uuid || type == ParamType::Timestamp)
      return text_param(text, ctx);
  }
  if (type == ParamType::Integer) {
    if (kind == JsonKind::Integer) return Param(*value.as_int64());
    if (kind == JsonKind::Unsigned)
      return error(ctx, ValidationReason::OutOfRange, "the integer is above 2^63-1");
  }
  if (type == ParamType::Numeric) {
    if (kind == JsonKind::Integer) return numeric(fmt::format("{}", *value.as_int64()), ctx);
    if (kind == JsonKind::Unsigned) return numeric(fmt::format("{}", *value.as_uint64()), ctx);
    if (kind == JsonKind::Number) return numeric(literal, ctx);
  }
  if (type == ParamType::Boolean && kind == JsonKind::Bool) return Param(*value.as_bool());
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
