#pragma once
/// \file
/// Structured validation errors for events parsed at the consumer boundary (EVT-4).

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace idem {

/// Why an event is invalid. Stable names (to_string) go into DLQ headers and metrics.
enum class ValidationReason {
  TooLarge,               ///< payload over the size limit
  InvalidUtf8,            ///< payload is not valid UTF-8
  InvalidJson,            ///< not well-formed JSON (or not an object at top level)
  DuplicateField,         ///< the same field twice in one object
  Missing,                ///< a required field is absent
  WrongType,              ///< a field has the wrong JSON type
  NotUuid,                ///< not a canonical UUID string
  NotUuidV7,              ///< a UUID, but not version 7 / RFC variant
  NotDecimal,             ///< amount is not an exact decimal string
  NegativeAmount,         ///< amount below zero
  TooManyFractionDigits,  ///< amount with more than 2 fraction digits
  OutOfRange,             ///< a number outside its allowed range
  NotRfc3339,             ///< occurred_at is not an RFC 3339 date-time
  UnknownEventType,       ///< event_type names no known event
  TooManyHeaders,         ///< the record carries more Kafka headers than allowed
  NotCloudEvent,          ///< a record read as CloudEvents 1.0 is not one (Kafka binding)
  SchemaViolation,        ///< the event does not satisfy its JSON Schema
  UrlSegment,             ///< a value would make a URL path segment `.`, `..` or empty
};

[[nodiscard]] std::string_view to_string(ValidationReason reason) noexcept;

/// One validation failure: which field (empty for whole-payload problems), why,
/// and a human-readable message that names both.
struct ValidationError {
  std::string field;
  ValidationReason reason;
  std::string message;
};

/// `text` (a value from an event) as an error message quotes it: its first 64 bytes, a
/// control character as '?', "..." when cut.
[[nodiscard]] std::string shown_in_message(std::string_view text);

/// A value or the validation error that prevented it. Small on purpose: the
/// standard library in C++20 has no std::expected.
template <class T>
class Validated {
 public:
  Validated(T value) : v_(std::move(value)) {}                // NOLINT: implicit by design
  Validated(ValidationError error) : v_(std::move(error)) {}  // NOLINT: implicit by design

  [[nodiscard]] bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }
  /// Precondition: ok().
  [[nodiscard]] const T& value() const& { return std::get<0>(v_); }
  [[nodiscard]] T&& value() && { return std::get<0>(std::move(v_)); }
  /// Precondition: !ok().
  [[nodiscard]] const ValidationError& error() const& { return std::get<1>(v_); }

 private:
  std::variant<T, ValidationError> v_;
};

/// Limits applied before any parsing work.
struct ParseLimits {
  std::size_t max_payload_bytes = 64 * 1024;
  /// Kafka headers per record; a record with more goes to the DLQ (too_many_headers).
  std::size_t max_headers = 64;
};

}  // namespace idem
