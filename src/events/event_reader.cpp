#include "idem/events/event_reader.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "events/json_source.hpp"

namespace idem {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

// The CloudEvents 1.0 Kafka protocol binding: attributes of a binary-mode record are
// headers named ce_<attribute>; a structured-mode record says so in its content type.
constexpr std::string_view kAttributePrefix = "ce_";
constexpr std::string_view kContentType = "content-type";
constexpr std::string_view kCloudEventsFamily = "application/cloudevents";
constexpr std::string_view kStructured = "application/cloudevents+json";
constexpr std::string_view kSpecVersion = "1.0";

ValidationError invalid(ValidationReason reason, std::string field, std::string message) {
  return {std::move(field), reason, std::move(message)};
}

// Where a key occurs twice in one object: the path of the object ("/a/0"; "" for the
// top level) and the key.
struct DuplicateKey {
  std::string path;
  std::string_view key;
};

// A key twice in one object makes the event ambiguous: JSON parsers disagree on which
// value counts (simdjson's pointer lookups take the first, many producers' the last).
// Runs on every record, so the path is built only for the one found (on the way back
// up), and scalars are not descended into.
std::optional<DuplicateKey> duplicate_key(element value) {
  const auto nested = [](element e) {
    return e.type() == element_type::OBJECT || e.type() == element_type::ARRAY;
  };
  if (value.type() == element_type::ARRAY) {
    std::size_t i = 0;
    const simdjson::dom::array array = value.get_array().value_unsafe();
    for (const element item : array) {
      if (nested(item)) {
        if (auto found = duplicate_key(item)) {
          found->path.insert(0, fmt::format("/{}", i));
          return found;
        }
      }
      ++i;
    }
    return std::nullopt;
  }
  const simdjson::dom::object object = value.get_object().value_unsafe();
  std::size_t index = 0;
  for (const auto field : object) {
    // Objects are small: comparing with the keys before is cheaper than a set.
    std::size_t before = 0;
    for (const auto earlier : object) {
      if (before++ == index) break;
      if (earlier.key == field.key) return DuplicateKey{{}, field.key};
    }
    ++index;
    if (nested(field.value)) {
      if (auto found = duplicate_key(field.value)) {
        found->path.insert(0, "/" + std::string(field.key));
        return found;
      }
    }
  }
  return std::nullopt;
}

bool same_ignoring_case(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// The media type (type/subtype) of the record's content type, as RFC 9110 reads a
// Content-Type: the header name and the type and subtype are case-insensitive, and
// parameters (`; charset=utf-8`) and the whitespace around them do not change the type.
// Empty without the header.
std::string_view media_type(const RecordInfo& record) {
  for (const RecordHeader& h : record.headers) {
    if (!same_ignoring_case(h.name, kContentType)) continue;
    std::string_view type = h.value.substr(0, h.value.find(';'));
    const auto space = [](char c) { return c == ' ' || c == '\t'; };
    while (!type.empty() && space(type.front())) type.remove_prefix(1);
    while (!type.empty() && space(type.back())) type.remove_suffix(1);
    return type;
  }
  return {};
}

std::optional<std::string_view> string_at(element doc, std::string_view pointer) {
  std::string_view s;
  if (doc.at_pointer(pointer).get_string().get(s) != simdjson::SUCCESS) return std::nullopt;
  return s;
}

// Which form a record has, read from its headers alone, never from its body: a plain
// JSON event that happens to hold a "specversion" field stays plain JSON.
Validated<EventMode> mode_of(const RecordInfo& record, EventFormat format) {
  if (format == EventFormat::Json) return EventMode::Json;
  const std::string_view type = media_type(record);
  if (type.size() >= kCloudEventsFamily.size() &&
      same_ignoring_case(type.substr(0, kCloudEventsFamily.size()), kCloudEventsFamily)) {
    if (!same_ignoring_case(type, kStructured))
      return invalid(ValidationReason::NotCloudEvent, std::string(kContentType),
                     fmt::format("content type '{}': only structured mode with "
                                 "application/cloudevents+json is read (no batches)",
                                 shown_in_message(type)));
    return EventMode::Structured;
  }
  if (record.header("ce_specversion")) return EventMode::Binary;
  if (format == EventFormat::CloudEvents) {
    return invalid(ValidationReason::NotCloudEvent, {},
                   "not a CloudEvents record: no ce_specversion header (binary mode) and no "
                   "content-type application/cloudevents+json (structured mode)");
  }
  return EventMode::Json;
}

}  // namespace

std::optional<JsonValue> EventView::at(std::string_view pointer) const {
  return data_.at(pointer);
}

std::optional<EventAttribute> EventView::attribute(std::string_view name) const {
  if (mode_ == EventMode::Structured) {
    std::string pointer = "/";
    detail::append_token(pointer, name);
    auto found = envelope_->at(pointer);
    if (!found) return std::nullopt;
    return EventAttribute{std::move(found), {}};
  }
  if (mode_ == EventMode::Binary) {
    if (auto text = record_->header(fmt::format("{}{}", kAttributePrefix, name)))
      return EventAttribute{std::nullopt, *text};
  }
  return std::nullopt;
}

EventReader::EventReader(EventReaderOptions options)
    : options_(std::move(options)), source_(std::make_unique<detail::JsonSource>()) {}

EventReader::~EventReader() = default;

Validated<EventView> EventReader::read(const RecordInfo& record, const ParseLimits& limits) {
  if (record.payload.size() > limits.max_payload_bytes) {
    return invalid(ValidationReason::TooLarge, {},
                   fmt::format("record value is {} bytes, more than the limit of {}",
                               record.payload.size(), limits.max_payload_bytes));
  }
  Validated<EventMode> mode = mode_of(record, options_.format);
  if (!mode.ok()) return mode.error();
  element doc;
  if (const auto error = source_->parse(record.payload, doc)) {
    return invalid(
        error == simdjson::UTF8_ERROR ? ValidationReason::InvalidUtf8
                                      : ValidationReason::InvalidJson,
        {}, fmt::format("record value is not a JSON object: {}", simdjson::error_message(error)));
  }
  if (doc.type() != element_type::OBJECT)
    return invalid(ValidationReason::InvalidJson, {}, "record value is not a JSON object");
  if (const auto twice = duplicate_key(doc)) {
    return invalid(ValidationReason::DuplicateField, twice->path + "/" + std::string(twice->key),
                   fmt::format("field '{}/{}' occurs twice in one object", twice->path,
                               shown_in_message(twice->key)));
  }
  EventView event(source_->value(doc, {}));
  event.mode_ = mode.value();
  event.record_ = &record;
  event.data_text_ = record.payload;

  if (event.mode_ == EventMode::Json) {
    const auto id = string_at(doc, options_.id_pointer);
    if (!id)
      return invalid(
          ValidationReason::Missing, options_.id_pointer,
          fmt::format("no event id: {} is missing or not a string", options_.id_pointer));
    const auto type = string_at(doc, options_.type_pointer);
    if (!type)
      return invalid(
          ValidationReason::Missing, options_.type_pointer,
          fmt::format("no event type: {} is missing or not a string", options_.type_pointer));
    event.id_text_ = *id;
    event.type_ = *type;
  } else {
    // CloudEvents: the required attributes, then the data.
    const bool binary = event.mode_ == EventMode::Binary;
    const auto attribute = [&](std::string_view name) -> std::optional<std::string_view> {
      if (binary) return record.header(fmt::format("{}{}", kAttributePrefix, name));
      return string_at(doc, fmt::format("/{}", name));
    };
    for (const std::string_view name : {"specversion", "id", "source", "type"}) {
      const auto value = attribute(name);
      if (!value || value->empty())
        return invalid(ValidationReason::NotCloudEvent, std::string(name),
                       fmt::format("CloudEvents attribute '{}' is missing ({})", name,
                                   binary ? "header ce_" + std::string(name)
                                          : "a string field of the envelope"));
      if (name == "specversion" && *value != kSpecVersion)
        return invalid(ValidationReason::NotCloudEvent, "specversion",
                       fmt::format("CloudEvents specversion '{}': only 1.0 is read",
                                   shown_in_message(*value)));
      if (name == "id") event.id_text_ = *value;
      if (name == "type") event.type_ = *value;
    }
    if (!binary) {
      event.envelope_ = event.data_;
      element data;
      if (doc.at_key("data").get(data) != simdjson::SUCCESS) {
        return invalid(ValidationReason::NotCloudEvent, "data",
                       doc.at_key("data_base64").error() == simdjson::SUCCESS
                           ? "the event's data is data_base64: only JSON data is read"
                           : "the event has no data");
      }
      if (data.type() != element_type::OBJECT)
        return invalid(ValidationReason::WrongType, "data",
                       "the event's data is not a JSON object");
      event.data_ = source_->value(data, "/data");
      const auto text = event.data_.literal();
      if (!text)
        return invalid(ValidationReason::InvalidJson, "data", "the event's data is unreadable");
      event.data_text_ = *text;
    }
  }
  const auto id = Uuid::parse(event.id_text_);
  const std::string id_field =
      event.mode_ == EventMode::Json ? options_.id_pointer : std::string("id");
  if (!id) {
    return invalid(ValidationReason::NotUuid, id_field,
                   fmt::format("event id '{}' at {} is not a UUID",
                               shown_in_message(event.id_text_), id_field));
  }
  if (!id->is_v7()) {
    return invalid(ValidationReason::NotUuidV7, id_field,
                   fmt::format("event id {} at {} is not a UUIDv7 (IDEM-1: the dedup key is the "
                               "UUIDv7 born with the event)",
                               event.id_text_, id_field));
  }
  event.id_ = *id;
  return event;
}

}  // namespace idem
