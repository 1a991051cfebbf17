#pragma once
// Typed parameter values: a JSON value (or a record attribute's text) checked against its
// declared type and turned into the Param the store binds. Numeric values stay exact on
// both backends: decimal text on PostgreSQL (read into numeric), a scaled 64-bit integer
// on SQLite (which has no exact decimal type: `balance + $amount` on a REAL or on decimal
// text would round), the scale written in the route.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idem/events/event_reader.hpp"
#include "idem/events/validation.hpp"
#include "idem/sinks/sink_config.hpp"
#include "idem/store.hpp"

namespace idem::sinks::detail {

/// An exact decimal within a declared precision and scale.
struct Decimal {
  bool negative = false;
  std::string digits;  ///< integer and fraction digits, `scale` of them after the point
  int scale = 0;

  /// "-12.30" for scale 2; "7" for scale 0.
  [[nodiscard]] std::string text() const;
  /// -1230 for -12.30 at scale 2. Precondition: at most 18 digits.
  [[nodiscard]] std::int64_t scaled() const noexcept;
};

/// The largest exponent (either sign) a decimal may be written with: `1.5e-3` and
/// `1E+2` (Jackson's form of a BigDecimal) are read exactly from their digits; beyond
/// this the value is refused unread (no amount with at most 18 digits needs more).
inline constexpr int kMaxDecimalExponent = 1000;

/// Reads `text` (an optional `-`, digits, optionally `.` and digits, optionally `e` or `E`,
/// a sign and digits: the exponent, at most kMaxDecimalExponent) as a decimal of at most
/// `precision` digits with at most `scale` after the point, the rules applying to the
/// value written out without the exponent (`1.230e1` is 12.30: two digits after the
/// point); the fraction is padded to `scale`. The error names `field`.
[[nodiscard]] Validated<Decimal> parse_decimal(std::string_view text, int precision, int scale,
                                               const std::string& field);

/// Whether json_param() needs the value's text as written (JsonValue::literal()): a
/// non-integer number read as `numeric`, and any value of a `json` parameter.
[[nodiscard]] bool needs_literal(const JsonValue& value, const ParamSpec& spec) noexcept;

/// `text` as a JSON string literal (quotes, backslashes and control characters escaped).
[[nodiscard]] std::string json_string(std::string_view text);

/// Where a value was found, for messages: the pointer or source as written, and the key.
struct ValueContext {
  const ParamSpec& spec;
  Backend backend;
  std::string_view field;  ///< e.g. "/amount" or "kafka.header.tenant"
};

/// A JSON value as `spec` declares it. Reads the value's text as written when
/// needs_literal() says so (an exact numeric needs the digits, not a double; a json
/// parameter passes its value on as it came, only whitespace between tokens removed).
[[nodiscard]] Validated<Param> json_param(const JsonValue& value, const ValueContext& ctx);

/// A text value (a Kafka header, a CloudEvents attribute, the key) as `spec` declares it.
[[nodiscard]] Validated<Param> text_param(std::string_view text, const ValueContext& ctx);

/// The value of a parameter that is absent (or JSON null): NULL when it is optional, the
/// error naming the field when it is required.
[[nodiscard]] Validated<Param> absent_param(const ValueContext& ctx, bool is_null);

/// Where a template inserts a value.
enum class TemplatePlace { Url, Header, Body };

/// Appends `value` (of parameter `spec`) to `out` as `place` needs it, safe by
/// construction: percent-encoded in a URL (every byte but RFC 3986's unreserved ones),
/// as text in a header value (a value with a control character such as CR or LF is
/// refused: it could start a header of its own), JSON-encoded in a body (strings quoted
/// and escaped, numbers and booleans as themselves, a json parameter as its JSON, NULL
/// as null; a text that is not valid UTF-8 is refused). Returns what is wrong, or nullopt.
[[nodiscard]] std::optional<std::string> insert_value(std::string& out, const Param& value,
                                                      const ParamSpec& spec, TemplatePlace place);

/// The first control character of `text` (CR, LF, ... and DEL; a tab is allowed, as in
/// a header value) described for a message that must not quote `text`, which may be a
/// secret ("a line feed (LF) at its end"); nullopt when there is none.
[[nodiscard]] std::optional<std::string> control_character(std::string_view text);

/// What is wrong with the URL template of a call, checked once at start with every
/// value a plain placeholder: a parameter before the path (the route's host and port are
/// its own), or a URL libcurl would not send to. Never quotes the URL: `${VAR}` may have
/// put a secret in it.
[[nodiscard]] std::optional<std::string> url_template_problem(const Template& url,
                                                              const std::vector<ParamSpec>& params);

/// The endpoint (`scheme://host:port`, http::endpoint_of) every call of the URL template
/// goes to, or nullopt for a URL url_template_problem refuses. Its host and port hold no
/// value from an event, so every call of the route shares it (and its circuit breaker).
[[nodiscard]] std::optional<std::string> url_endpoint(const Template& url);

/// The first parameter a URL template inserts before its path (into the scheme, host or
/// port), or nullopt: the route's host and port are its own, whatever the events hold.
[[nodiscard]] std::optional<std::size_t> param_before_path(const Template& url);

/// Whether the values inserted into `rendered` (the URL template `url` with its values
/// in place, as insert_value encodes them) leave the template's path as it was: a path
/// segment holding a value must not be `.`, `..` (also written `%2E`) or empty, which
/// servers and libraries resolve or merge into another path (`/accounts/../charges` is
/// `/charges`). Percent-encoding keeps `/`, `?` and `#` out of the values, so the
/// segments of `rendered` are the template's. The error (validation.url_segment) names
/// the parameters of the segment, never the URL, which may hold a secret.
[[nodiscard]] std::optional<ValidationError> url_segment_problem(
    const Template& url, const std::vector<ParamSpec>& params, std::string_view rendered);

}  // namespace idem::sinks::detail
