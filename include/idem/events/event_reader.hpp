#pragma once
/// \file
/// Reads the envelope of an event record: a JSON object, or a CloudEvents 1.0 record in
/// the Kafka protocol binding (binary mode: ce_ headers and the data as the value;
/// structured mode: content type application/cloudevents+json), or, with format Auto,
/// either, as each record's headers say. It checks what every event needs (well-formed
/// JSON, valid UTF-8, an object, no key twice in one object, an id that is a UUIDv7 and a
/// type; for CloudEvents the required attributes) and gives the event's id, type and data
/// as a JSON tree. The configured sinks read their records with it; so can any embedding.
///
/// simdjson parses each record once, as a DOM (so the whole record is checked before
/// anything is read from it, and each pointer is a cheap lookup), into buffers reused
/// record after record. The DOM keeps a non-integer number as a double only, never its
/// digits: 12.30 would come back as 12.3, 0.00005 as 5e-05. A value's text as written
/// (JsonValue::literal) is therefore read from the record's bytes on demand, by a second,
/// partial pass up to that value, which only the values that need it pay for.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/events/validation.hpp"
#include "idem/handler.hpp"
#include "idem/uuid.hpp"

namespace idem {

/// How the records of a topic carry their events.
enum class EventFormat {
  Json,         ///< the value is the event, a JSON object
  CloudEvents,  ///< CloudEvents 1.0, Kafka binding: binary (ce_ headers) or structured mode
  /// Either, record by record, as its headers say (a topic whose producers move to
  /// CloudEvents one at a time): a `ce_specversion` header is binary mode, a content type
  /// application/cloudevents+json structured mode, anything else a plain JSON event.
  Auto
};

/// The kind of a JSON value. Integers that fit in 64 bits keep their exact value; every
/// other number is Number, whose exact text is JsonValue::literal().
enum class JsonKind {
  Null,
  Bool,
  Integer,   ///< an integer from -2^63 to 2^63-1
  Unsigned,  ///< an integer from 2^63 to 2^64-1
  Number,    ///< any other number (a fraction or an exponent: 12.30, 1e2, -0.0)
  String,
  Array,
  Object
};

namespace detail {
struct JsonSource;
}

/// A view of one value of a parsed JSON document (an event's data, an HTTP answer). It
/// stays valid as long as the document it came from is neither parsed again nor
/// destroyed: for an EventReader, until its next read(); for a JsonDocument, until its
/// next parse(). Copying a value is cheap (no JSON is copied).
class JsonValue {
 public:
  struct Member;

  [[nodiscard]] JsonKind kind() const noexcept;
  [[nodiscard]] bool is_null() const noexcept { return kind() == JsonKind::Null; }
  [[nodiscard]] bool is_number() const noexcept;

  /// The value as that type, or nullopt when it is of another kind.
  [[nodiscard]] std::optional<bool> as_bool() const noexcept;
  /// A JsonKind::Integer.
  [[nodiscard]] std::optional<std::int64_t> as_int64() const noexcept;
  /// A JsonKind::Unsigned, or an Integer from 0 up.
  [[nodiscard]] std::optional<std::uint64_t> as_uint64() const noexcept;
  /// Any number, as the nearest double (inexact for most fractions: prefer literal()).
  [[nodiscard]] std::optional<double> as_double() const noexcept;
  /// A string, unescaped.
  [[nodiscard]] std::optional<std::string_view> as_string() const noexcept;

  /// The value's text as written in the document, without the whitespace around it: a
  /// number exactly its digits ("12.30", "1e2"), a string with its quotes and escapes, an
  /// object or array its whole JSON text. Read on demand from the document's bytes (a
  /// partial second pass): call it for the values that need it. nullopt only for a value
  /// that is not in the document's bytes, which does not happen for a parsed document.
  [[nodiscard]] std::optional<std::string_view> literal() const;

  /// The value written back out from the tree as compact JSON: strings, booleans and
  /// integers exact, any other number through its double (literal() keeps the digits).
  [[nodiscard]] std::string compact() const;

  /// The value at `pointer` (RFC 6901, relative to this value; "" is this value), or
  /// nullopt when there is none. A key written twice: the first.
  [[nodiscard]] std::optional<JsonValue> at(std::string_view pointer) const;

  /// An object's members in document order; empty for any other kind.
  [[nodiscard]] std::vector<Member> members() const;
  /// An array's elements in order; empty for any other kind.
  [[nodiscard]] std::vector<JsonValue> elements() const;
  /// The number of an object's members or an array's elements; 0 for any other kind.
  [[nodiscard]] std::size_t size() const noexcept;

 private:
  friend struct detail::JsonSource;
  JsonValue() noexcept = default;

  // A simdjson::dom::element, stored as its bytes: including simdjson here would give each
  // includer simdjson's layout as its own compile definitions make it
  // (SIMDJSON_THREADS_ENABLED changes it), and two layouts of one class in one program
  // corrupt it. The element is two words (its document and a tape index) and trivially
  // copyable; event_reader.cpp checks both.
  alignas(void*) unsigned char element_[2 * sizeof(void*)] = {};
  detail::JsonSource* source_ = nullptr;
  std::string pointer_;  ///< where the value is in the document, for literal()
};

struct JsonValue::Member {
  std::string_view key;  ///< unescaped
  JsonValue value;
};

/// A JSON document parsed into buffers reused parse after parse (the answer to an HTTP
/// call, a file). Not thread-safe.
class JsonDocument {
 public:
  JsonDocument();
  ~JsonDocument();
  JsonDocument(const JsonDocument&) = delete;
  JsonDocument& operator=(const JsonDocument&) = delete;

  /// The root of `json` (copied; any JSON value at the top), valid until the next parse;
  /// or why it is not JSON (InvalidJson, InvalidUtf8). Keys written twice are not
  /// refused here (lookups take the first).
  [[nodiscard]] Validated<JsonValue> parse(std::string_view json);

 private:
  std::unique_ptr<detail::JsonSource> source_;
};

/// What the reader of one topic is told.
struct EventReaderOptions {
  EventFormat format = EventFormat::Json;
  std::string id_pointer = "/event_id";      ///< where a plain JSON event's UUIDv7 is
  std::string type_pointer = "/event_type";  ///< where a plain JSON event's type is
};

/// How a record carried its event.
enum class EventMode {
  Json,       ///< a plain JSON object, id and type at the configured pointers
  Binary,     ///< CloudEvents binary mode: ce_ headers, the value is the data
  Structured  ///< CloudEvents structured mode: the value is the envelope, data its member
};

/// A CloudEvents attribute of a record.
struct EventAttribute {
  std::optional<JsonValue> json;  ///< structured mode: the envelope's member, any JSON
  std::string_view text;          ///< binary mode: the ce_ header's value, as sent
};

/// An event read by EventReader::read(). Valid until the reader's next read() and while
/// the RecordInfo it was read from (and the bytes and headers that views) lives.
class EventView {
 public:
  [[nodiscard]] const Uuid& id() const noexcept { return id_; }
  /// The id as the record wrote it.
  [[nodiscard]] std::string_view id_text() const noexcept { return id_text_; }
  [[nodiscard]] std::string_view type() const noexcept { return type_; }
  [[nodiscard]] EventMode mode() const noexcept { return mode_; }
  /// The data's JSON text as it came: the whole value of a plain JSON or binary-mode
  /// record, the bytes of a structured event's `data` member.
  [[nodiscard]] std::string_view data_text() const noexcept { return data_text_; }
  /// The data: the event object of a plain JSON record, a CloudEvent's data (an object).
  [[nodiscard]] const JsonValue& data() const noexcept { return data_; }
  /// data().at(pointer).
  [[nodiscard]] std::optional<JsonValue> at(std::string_view pointer) const;
  /// The CloudEvents attribute `name` (source, time, subject, an extension, ...): in
  /// structured mode the envelope's member of that name, in binary mode the header
  /// ce_<name>; nullopt when there is none, and always for a plain JSON event.
  [[nodiscard]] std::optional<EventAttribute> attribute(std::string_view name) const;

 private:
  friend class EventReader;
  explicit EventView(JsonValue data) : data_(std::move(data)) {}

  Uuid id_;
  std::string_view id_text_;
  std::string_view type_;
  EventMode mode_ = EventMode::Json;
  std::string_view data_text_;
  JsonValue data_;
  std::optional<JsonValue> envelope_;  ///< structured mode
  const RecordInfo* record_ = nullptr;
};

/// Reads the records of one topic. Not thread-safe: one reader per thread.
class EventReader {
 public:
  explicit EventReader(EventReaderOptions options);
  ~EventReader();
  EventReader(const EventReader&) = delete;
  EventReader& operator=(const EventReader&) = delete;

  /// The event of `record`, or why it can never be processed (a ValidationError naming
  /// the field and the rule: too large, not JSON, invalid UTF-8, not an object, a key
  /// twice, no id or type, an id that is not a UUIDv7, not a CloudEvent). Never throws.
  [[nodiscard]] Validated<EventView> read(const RecordInfo& record, const ParseLimits& limits);

  [[nodiscard]] const EventReaderOptions& options() const noexcept { return options_; }

 private:
  EventReaderOptions options_;
  // simdjson's parsers and the record's padded copy, behind a pointer for the reason
  // JsonValue gives.
  std::unique_ptr<detail::JsonSource> source_;
};

}  // namespace idem
