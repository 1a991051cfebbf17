#include "idem/reference/order_confirmed.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <array>
#include <cstring>
#include <iterator>
#include <memory>
#include <new>
#include <optional>

namespace idem {
namespace detail {
namespace {

namespace od = simdjson::ondemand;
using simdjson::error_code;

// The schema's fields, in schema order: that order decides which missing
// field is reported first and the order of to_json's output.
enum class Field : std::uint8_t {
  EventId,
  EventType,
  OccurredAt,
  OrderId,
  CustomerId,
  TotalAmount,
  Unknown
};
constexpr std::size_t kFieldCount = 6;
constexpr std::array<std::string_view, kFieldCount> kFieldNames = {
    "event_id", "event_type", "occurred_at", "order_id", "customer_id", "total_amount"};

constexpr std::string_view name_of(Field f) noexcept {
  return kFieldNames[static_cast<std::size_t>(f)];
}
constexpr unsigned bit_of(Field f) noexcept {
  return 1U << static_cast<unsigned>(f);
}

// Keys are dispatched by length first, so each key costs at most two short
// compares; the schema is fixed, so a hash map would only add overhead.
Field field_of(std::string_view key) noexcept {
  switch (key.size()) {
    case 8:
      if (key == "event_id") return Field::EventId;
      if (key == "order_id") return Field::OrderId;
      break;
    case 10:
      if (key == "event_type") return Field::EventType;
      break;
    case 11:
      if (key == "occurred_at") return Field::OccurredAt;
      if (key == "customer_id") return Field::CustomerId;
      break;
    case 12:
      if (key == "total_amount") return Field::TotalAmount;
      break;
    default: break;
  }
  return Field::Unknown;
}

// Unknown fields may hold arbitrary JSON. On-Demand only checks what is
// read, so they are walked to prove the payload is well-formed; the walk is
// recursive, and this bounds the recursion (and the stack it uses) well
// below simdjson's own default of 1024.
constexpr int kMaxDepth = 128;

// A parser that once saw a huge payload keeps its buffers. Payloads are
// bounded by ParseLimits (64 KiB by default), but a caller may raise that;
// beyond this size the thread's buffers are released after use instead of
// pinning the memory for the thread's lifetime.
constexpr std::size_t kRetainBytes = std::size_t{1} << 20;

// One parser and one padded input buffer per thread: the parser's internal
// buffers are reused across events (no allocation per event once warm), and
// no lock is needed. simdjson reads up to SIMDJSON_PADDING bytes past the
// end of the input, so the payload is copied into a buffer that has them;
// the copy of a ~200-byte event is far cheaper than a padded_string
// allocation per event.
struct ThreadParser {
  od::parser parser;
  std::unique_ptr<char[]> buffer;
  std::size_t capacity = 0;

  void reserve(std::size_t len) {
    const std::size_t need = len + simdjson::SIMDJSON_PADDING;
    if (need <= capacity) return;
    std::size_t cap = capacity == 0 ? 4096 : capacity;
    while (cap < need) cap *= 2;
    buffer = std::make_unique<char[]>(cap);
    capacity = cap;
    // Size the parser's own buffers together with ours (doubling), instead of
    // letting iterate() reallocate them for every slightly larger payload.
    if (parser.allocate(cap - simdjson::SIMDJSON_PADDING) != simdjson::SUCCESS)
      throw std::bad_alloc();
  }

  void shrink_if_huge() {
    if (capacity > kRetainBytes) {
      buffer.reset();
      capacity = 0;
      parser = od::parser{};
    }
  }
};

ThreadParser& thread_parser() {
  thread_local ThreadParser tp;
  return tp;
}

// ---------------------------------------------------------------------------
// Messages

// Quotes a value for a message: at most 64 bytes (cut on a UTF-8 boundary,
// so the message stays valid UTF-8 for DLQ headers), with quotes,
// backslashes and control characters escaped so the value cannot forge
// message structure or break a log line.
std::string quoted(std::string_view v) {
  constexpr std::size_t kMax = 64;
  bool cut = false;
  if (v.size() > kMax) {
    std::size_t n = kMax;
    while (n > 0 && (static_cast<unsigned char>(v[n]) & 0xC0) == 0x80) --n;
    v = v.substr(0, n);
    cut = true;
  }
  std::string out;
  out.reserve(v.size() + 8);
  out.push_back('"');
  for (char c : v) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20 || u == 0x7F) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", u);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  if (cut) out += "...";
  return out;
}

// A number token for a message, unquoted (it passed the JSON number
// grammar, so it holds nothing that needs escaping), cut if very long.
std::string number_text(std::string_view raw) {
  raw = raw.substr(0, raw.find_first_of(" \t\r\n"));
  constexpr std::size_t kMax = 40;
  return raw.size() <= kMax ? std::string(raw) : fmt::format("{}...", raw.substr(0, kMax));
}

std::string_view type_name(od::json_type t) noexcept {
  switch (t) {
    case od::json_type::array: return "an array";
    case od::json_type::object: return "an object";
    case od::json_type::number: return "a number";
    case od::json_type::string: return "a string";
    case od::json_type::boolean: return "a boolean";
    case od::json_type::null: return "null";
  }
  return "an unknown type";
}

ValidationError field_error(Field f, ValidationReason reason, std::string_view detail) {
  return ValidationError{std::string(name_of(f)), reason,
                         fmt::format("{}: {}", name_of(f), detail)};
}

ValidationError invalid_json(error_code e) {
  if (e == simdjson::MEMALLOC) throw std::bad_alloc();  // not the payload's fault: never DLQ it
  return ValidationError{
      "", ValidationReason::InvalidJson,
      fmt::format("payload: not well-formed JSON ({})", simdjson::error_message(e))};
}

// ---------------------------------------------------------------------------
// Numbers

// simdjson's get_int64 folds "1.0", "1e3" and "9223372036854775808" into one
// INCORRECT_TYPE, but they need different reasons (WrongType vs OutOfRange),
// and its get_double rejects valid JSON such as 1e400. So numbers are
// checked here against the JSON grammar (RFC 8259 section 6) directly.
struct JsonNumber {
  bool well_formed = false;
  bool integer = false;  // no fraction, no exponent
  bool negative = false;
  bool overflow = false;  // magnitude above INT64_MAX
  std::uint64_t magnitude = 0;
};

constexpr bool is_digit(char c) noexcept {
  return c >= '0' && c <= '9';
}

JsonNumber scan_number(std::string_view s) noexcept {
  // raw_json_token() includes the whitespace up to the next token.
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  JsonNumber n;
  std::size_t i = 0;
  if (i < s.size() && s[i] == '-') {
    n.negative = true;
    ++i;
  }
  if (i >= s.size() || !is_digit(s[i])) return n;
  if (s[i] == '0') {
    ++i;  // a leading zero stands alone: "01" is not JSON
  } else {
    constexpr std::uint64_t kMax = static_cast<std::uint64_t>(INT64_MAX);
    for (; i < s.size() && is_digit(s[i]); ++i) {
      const auto d = static_cast<std::uint64_t>(s[i] - '0');
      if (n.overflow || n.magnitude > (kMax - d) / 10) {
        n.overflow = true;
      } else {
        n.magnitude = n.magnitude * 10 + d;
      }
    }
  }
  n.integer = true;
  if (i < s.size() && s[i] == '.') {
    n.integer = false;
    const std::size_t start = ++i;
    while (i < s.size() && is_digit(s[i])) ++i;
    if (i == start) return n;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    n.integer = false;
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    const std::size_t start = i;
    while (i < s.size() && is_digit(s[i])) ++i;
    if (i == start) return n;
  }
  n.well_formed = i == s.size();
  return n;
}

// ---------------------------------------------------------------------------
// Well-formedness walk for values whose content is not used

error_code validate_value(od::value& v, int depth) {
  if (depth > kMaxDepth) return simdjson::DEPTH_ERROR;
  od::json_type type{};
  if (auto e = v.type().get(type)) return e;
  switch (type) {
    case od::json_type::array: {
      od::array array;
      if (auto e = v.get_array().get(array)) return e;
      for (auto element : array) {
        od::value item;
        if (auto e = std::move(element).get(item)) return e;
        if (auto e = validate_value(item, depth + 1)) return e;
      }
      return simdjson::SUCCESS;
    }
    case od::json_type::object: {
      od::object object;
      if (auto e = v.get_object().get(object)) return e;
      for (auto member : object) {
        od::field field;
        if (auto e = std::move(member).get(field)) return e;
        std::string_view key;
        if (auto e = field.unescaped_key().get(key)) return e;  // checks the key's escapes
        if (auto e = validate_value(field.value(), depth + 1)) return e;
      }
      return simdjson::SUCCESS;
    }
    case od::json_type::number: {
      const std::string_view raw = v.raw_json_token();
      return scan_number(raw).well_formed ? simdjson::SUCCESS : simdjson::NUMBER_ERROR;
    }
    case od::json_type::string: {
      std::string_view s;
      return v.get_string().get(s);  // checks escapes and surrogate pairs
    }
    case od::json_type::boolean: {
      bool b = false;
      return v.get_bool().get(b);
    }
    case od::json_type::null: {
      bool is_null = false;
      if (auto e = v.is_null().get(is_null)) return e;
      return is_null ? simdjson::SUCCESS : simdjson::N_ATOM_ERROR;
    }
  }
  return simdjson::TAPE_ERROR;
}

// ---------------------------------------------------------------------------
// Field readers. Each returns a simdjson error only when the JSON itself is
// malformed; a schema problem is stored in `error` and the value is still
// walked, so that malformed JSON later in the payload wins over it (a DLQ
// reader should see the most fundamental problem).

struct Reader {
  OrderConfirmed& event;
  std::optional<ValidationError>& error;

  // Reads a string field, or records WrongType. `ok` tells whether `out` is set.
  error_code read_string(Field f, od::value& v, std::string_view& out, bool& ok) {
    ok = false;
    od::json_type type{};
    if (auto e = v.type().get(type)) return e;
    if (type != od::json_type::string) {
      error =
          f == Field::TotalAmount
              ? field_error(f, ValidationReason::WrongType,
                            fmt::format("expected a JSON string, got {}; amounts must be decimal "
                                        "strings such as \"12.30\" so that no binary float "
                                        "ever holds money",
                                        type_name(type)))
              : field_error(f, ValidationReason::WrongType,
                            fmt::format("expected a JSON string, got {}", type_name(type)));
      return validate_value(v, 1);
    }
    if (auto e = v.get_string().get(out)) return e;
    ok = true;
    return simdjson::SUCCESS;
  }

  error_code read_event_id(od::value& v) {
    std::string_view s;
    bool ok = false;
    if (auto e = read_string(Field::EventId, v, s, ok); e || !ok) return e;
    const auto id = Uuid::parse(s);
    if (!id) {
      error =
          field_error(Field::EventId, ValidationReason::NotUuid,
                      fmt::format("not a canonical UUID (8-4-4-4-12 hex digits): {}", quoted(s)));
    } else if (!id->is_v7()) {
      error = field_error(Field::EventId, ValidationReason::NotUuidV7,
                          id->version() == 7
                              ? std::string("not a UUIDv7 (version 7 but not the RFC 9562 variant)")
                              : fmt::format("not a UUIDv7 (version {})", id->version()));
    } else {
      event.event_id = *id;
    }
    return simdjson::SUCCESS;
  }

  error_code read_event_type(od::value& v) {
    std::string_view s;
    bool ok = false;
    if (auto e = read_string(Field::EventType, v, s, ok); e || !ok) return e;
    if (s != kOrderConfirmedV1) {
      error = field_error(
          Field::EventType, ValidationReason::UnknownEventType,
          fmt::format("unknown event type {} (expected \"{}\")", quoted(s), kOrderConfirmedV1));
    }
    return simdjson::SUCCESS;
  }

  error_code read_occurred_at(od::value& v) {
    std::string_view s;
    bool ok = false;
    if (auto e = read_string(Field::OccurredAt, v, s, ok); e || !ok) return e;
    if (const auto t = parse_rfc3339(s)) {
      event.occurred_at = *t;
    } else {
      error = field_error(Field::OccurredAt, ValidationReason::NotRfc3339,
                          fmt::format("not an RFC 3339 date-time such as "
                                      "\"2026-11-29T22:33:47Z\": {}",
                                      quoted(s)));
    }
    return simdjson::SUCCESS;
  }

  error_code read_total_amount(od::value& v) {
    std::string_view s;
    bool ok = false;
    if (auto e = read_string(Field::TotalAmount, v, s, ok); e || !ok) return e;
    Amount::ParseError why{};
    if (const auto a = Amount::parse(s, &why)) {
      if (*a > kMaxOrderAmount) {
        error = field_error(Field::TotalAmount, ValidationReason::OutOfRange,
                            fmt::format("amount {} is above {}, the largest the ledger stores "
                                        "(numeric(18,2))",
                                        quoted(s), kMaxOrderAmount.to_string()));
        return simdjson::SUCCESS;
      }
      event.total_amount = *a;
      return simdjson::SUCCESS;
    }
    switch (why) {
      case Amount::ParseError::NotDecimal:
        error = field_error(Field::TotalAmount, ValidationReason::NotDecimal,
                            fmt::format("not an exact decimal such as \"12.30\": {}", quoted(s)));
        break;
      case Amount::ParseError::Negative:
        error = field_error(Field::TotalAmount, ValidationReason::NegativeAmount,
                            fmt::format("negative amount {}", quoted(s)));
        break;
      case Amount::ParseError::TooManyFractionDigits:
        error = field_error(Field::TotalAmount, ValidationReason::TooManyFractionDigits,
                            fmt::format("more than two fraction digits: {}", quoted(s)));
        break;
      case Amount::ParseError::OutOfRange:
        error = field_error(Field::TotalAmount, ValidationReason::OutOfRange,
                            fmt::format("amount {} is above {}, the largest the ledger stores "
                                        "(numeric(18,2))",
                                        quoted(s), kMaxOrderAmount.to_string()));
        break;
    }
    return simdjson::SUCCESS;
  }

  error_code read_id(Field f, od::value& v, std::int64_t& out) {
    od::json_type type{};
    if (auto e = v.type().get(type)) return e;
    if (type != od::json_type::number) {
      error = field_error(f, ValidationReason::WrongType,
                          fmt::format("expected a JSON integer, got {}", type_name(type)));
      return validate_value(v, 1);
    }
    const std::string_view raw = v.raw_json_token();
    const JsonNumber n = scan_number(raw);
    if (!n.well_formed) return simdjson::NUMBER_ERROR;
    if (!n.integer) {
      error = field_error(f, ValidationReason::WrongType,
                          fmt::format("expected a JSON integer, got a number with a fraction or "
                                      "exponent: {}",
                                      number_text(raw)));
    } else if (n.negative || n.overflow || n.magnitude == 0) {
      error = field_error(
          f, ValidationReason::OutOfRange,
          fmt::format("out of range, must be 1 to 9223372036854775807: {}", number_text(raw)));
    } else {
      out = static_cast<std::int64_t>(n.magnitude);
    }
    return simdjson::SUCCESS;
  }

  error_code read(Field f, od::value& v) {
    switch (f) {
      case Field::EventId: return read_event_id(v);
      case Field::EventType: return read_event_type(v);
      case Field::OccurredAt: return read_occurred_at(v);
      case Field::OrderId: return read_id(f, v, event.order_id);
      case Field::CustomerId: return read_id(f, v, event.customer_id);
      case Field::TotalAmount: return read_total_amount(v);
      case Field::Unknown: break;
    }
    return validate_value(v, 1);
  }
};

Validated<OrderConfirmed> parse_padded(od::parser& parser, const char* buf, std::size_t len,
                                       std::size_t capacity) {
  od::document doc;
  // iterate() runs simdjson's stage 1 over the whole input, which validates
  // UTF-8 everywhere (not only in the strings that are later read) and
  // finds unclosed strings and unescaped control characters.
  if (auto e = parser.iterate(buf, len, capacity).get(doc)) {
    if (e == simdjson::UTF8_ERROR) {
      return ValidationError{"", ValidationReason::InvalidUtf8, "payload: not valid UTF-8"};
    }
    if (e == simdjson::CAPACITY) {
      return ValidationError{
          "", ValidationReason::TooLarge,
          fmt::format("payload: {} bytes is beyond the JSON parser's capacity", len)};
    }
    return invalid_json(e);
  }

  // A non-object top level is reported as InvalidJson (field ""), as the
  // ValidationReason documentation says, not WrongType: there is no field to
  // name, and no event schema is an array or a scalar.
  od::json_type top{};
  if (auto e = doc.type().get(top)) return invalid_json(e);
  if (top != od::json_type::object) {
    return ValidationError{
        "", ValidationReason::InvalidJson,
        fmt::format("payload: top level is {}, not a JSON object", type_name(top))};
  }
  od::object object;
  if (auto e = doc.get_object().get(object)) return invalid_json(e);

  OrderConfirmed event;
  std::optional<ValidationError> error;  // the first schema error, in document order
  Reader reader{event, error};
  unsigned seen = 0;

  // One pass over the members in document order: find_field per field would
  // rescan the object for every field and could not notice duplicates.
  for (auto member : object) {
    od::field field;
    if (auto e = std::move(member).get(field)) return invalid_json(e);
    std::string_view key;
    // unescaped_key, not the raw key: "event\u005fid" is the key event_id,
    // and must count as one (e.g. for duplicate detection).
    if (auto e = field.unescaped_key().get(key)) return invalid_json(e);
    od::value& value = field.value();
    const Field f = field_of(key);
    error_code e = simdjson::SUCCESS;
    if (f == Field::Unknown) {
      e = validate_value(value, 1);  // ignored for forward compatibility, but must be JSON
    } else if ((seen & bit_of(f)) != 0) {
      if (!error) {
        error = field_error(f, ValidationReason::DuplicateField, "field appears more than once");
      }
      e = validate_value(value, 1);
    } else {
      seen |= bit_of(f);
      e = error ? validate_value(value, 1) : reader.read(f, value);
    }
    if (e) return invalid_json(e);
  }
  // The object iterator stops at the closing brace; anything after it
  // ("{...} {...}", "{...}x") makes the payload not one JSON value.
  if (doc.current_location().error() != simdjson::OUT_OF_BOUNDS) {
    return ValidationError{"", ValidationReason::InvalidJson,
                           "payload: not well-formed JSON (content after the top-level object)"};
  }

  if (error) return std::move(*error);
  for (std::size_t i = 0; i < kFieldCount; ++i) {
    const auto f = static_cast<Field>(i);
    if ((seen & bit_of(f)) == 0) {
      return field_error(f, ValidationReason::Missing, "required field is missing");
    }
  }
  return event;
}

}  // namespace
}  // namespace detail

Validated<OrderConfirmed> parse_order_confirmed(std::string_view json, const ParseLimits& limits) {
  // The size limit comes before any other work, including the copy below, so
  // an oversized message costs nothing but this comparison.
  if (json.size() > limits.max_payload_bytes) {
    return ValidationError{"", ValidationReason::TooLarge,
                           fmt::format("payload: {} bytes exceeds the limit of {} bytes",
                                       json.size(), limits.max_payload_bytes)};
  }
  auto& tp = detail::thread_parser();
  tp.reserve(json.size());
  if (!json.empty()) std::memcpy(tp.buffer.get(), json.data(), json.size());
  // simdjson never interprets the padding, but zeroing it keeps the bytes
  // past the payload deterministic instead of leftovers of an older event.
  std::memset(tp.buffer.get() + json.size(), 0, simdjson::SIMDJSON_PADDING);
  auto result = detail::parse_padded(tp.parser, tp.buffer.get(), json.size(), tp.capacity);
  tp.shrink_if_huge();
  return result;
}

std::string to_json(const OrderConfirmed& event) {
  // Written by hand with fmt instead of a JSON library: every value comes
  // from a validated type whose text can never need escaping (a UUID's hex
  // and dashes, the fixed event type, an RFC 3339 timestamp, integers, and
  // the digits and dot of an Amount). The output is the canonical form:
  // compact, fields in schema order, the amount as a string.
  char id[36];
  event.event_id.format_to(id);
  std::string out;
  out.reserve(192);
  fmt::format_to(std::back_inserter(out),
                 R"({{"event_id":"{}","event_type":"{}","occurred_at":"{}","order_id":{},)"
                 R"("customer_id":{},"total_amount":"{}"}})",
                 std::string_view(id, sizeof id), kOrderConfirmedV1,
                 format_rfc3339(event.occurred_at), event.order_id, event.customer_id,
                 event.total_amount.to_string());
  return out;
}

}  // namespace idem
