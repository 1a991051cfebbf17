#include "sinks/event_reader.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>

#include <fmt/format.h>

#include "sinks/param_values.hpp"

namespace idem::sinks::detail {

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

std::string shown(std::string_view v) {
  std::string out;
  for (const char c : v.substr(0, 64))
    out.push_back(static_cast<unsigned char>(c) < 0x20 ? '?' : c);
  if (v.size() > 64) out += "...";
  return out;
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

// `name` as one token of a JSON pointer (RFC 6901: '~' is ~0, '/' is ~1).
std::string pointer_token(std::string_view name) {
  std::string out;
  for (const char c : name) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// A numeric parameter as a template inserts it: exact decimal text, however it binds.
ParamSpec as_decimal(const ParamSpec& spec) {
  ParamSpec copy = spec;
  copy.binding = ParamSpec::Binding::Decimal;
  return copy;
}

}  // namespace

struct EventReader::Buffers {
  simdjson::dom::parser parser;
  JsonLiterals literals;
  std::string buffer;  // the record's bytes plus simdjson's padding
  std::size_t length = 0;
};

struct EventReader::Parsed {
  enum class Mode { Json, Binary, Structured };
  Mode mode = Mode::Json;
  element data;
  element envelope;
  std::string_view id;
  std::string_view type;
  // The data's JSON text as it came (a structured event's data member, its bytes in the
  // record): what a schema checks and what a call with body = "event" sends.
  std::string_view data_text;
};

EventReader::EventReader(std::string topic, TopicFormat format,
                         std::vector<const CompiledRoute*> routes, Backend backend)
    : topic_(std::move(topic)),
      format_(std::move(format)),
      routes_(std::move(routes)),
      backend_(backend),
      buffers_(std::make_unique<Buffers>()) {}

EventReader::~EventReader() = default;

Validated<SinkEvent> EventReader::read(const RecordInfo& record, const ParseLimits& limits) {
  if (record.payload.size() > limits.max_payload_bytes) {
    return invalid(ValidationReason::TooLarge, {},
                   fmt::format("record value is {} bytes, more than the limit of {}",
                               record.payload.size(), limits.max_payload_bytes));
  }
  Parsed parsed;
  if (auto e = parse(record, parsed)) return std::move(*e);
  const auto id = Uuid::parse(parsed.id);
  const bool plain = parsed.mode == Parsed::Mode::Json;
  const std::string id_field = plain ? format_.id_pointer : std::string("id");
  if (!id) {
    return invalid(ValidationReason::NotUuid, id_field,
                   fmt::format("event id '{}' at {} is not a UUID", shown(parsed.id), id_field));
  }
  if (!id->is_v7()) {
    return invalid(ValidationReason::NotUuidV7, id_field,
                   fmt::format("event id {} at {} is not a UUIDv7 (IDEM-1: the dedup key is the "
                               "UUIDv7 born with the event)",
                               parsed.id, id_field));
  }
  SinkEvent event;
  event.id = *id;
  const auto route = std::find_if(routes_.begin(), routes_.end(), [&](const CompiledRoute* r) {
    return r->config->event_type == parsed.type;
  });
  if (route == routes_.end()) {
    if (format_.unknown_type == UnknownTypePolicy::Skip) return event;
    std::string known;
    for (const CompiledRoute* r : routes_)
      known += (known.empty() ? "" : ", ") + r->config->event_type;
    return invalid(ValidationReason::UnknownEventType, plain ? format_.type_pointer : "type",
                   fmt::format("no route for event type '{}' on topic '{}' (routes: {})",
                               shown(parsed.type), topic_, known));
  }
  event.route = *route;
  record.count_as(event.route->config->name);
  if (event.route->schema) {
    if (auto broken = event.route->schema->violation(parsed.data_text)) {
      return invalid(ValidationReason::SchemaViolation, {},
                     fmt::format("event of type '{}' breaks the schema of routes.{}: {}",
                                 parsed.type, event.route->config->name, *broken));
    }
  }
  if (auto e = bind(record, parsed, event)) return std::move(*e);
  return event;
}

std::optional<ValidationError> EventReader::parse(const RecordInfo& record, Parsed& out) {
  using Mode = Parsed::Mode;
  // Which form a record has is read from its headers alone, never from its body: a plain
  // JSON event that happens to hold a "specversion" field stays plain JSON.
  if (format_.format != EventFormat::Json) {
    const std::string_view type = media_type(record);
    if (type.size() >= kCloudEventsFamily.size() &&
        same_ignoring_case(type.substr(0, kCloudEventsFamily.size()), kCloudEventsFamily)) {
      if (!same_ignoring_case(type, kStructured))
        return invalid(ValidationReason::NotCloudEvent, std::string(kContentType),
                       fmt::format("content type '{}': only structured mode with "
                                   "application/cloudevents+json is read (no batches)",
                                   shown(type)));
      out.mode = Mode::Structured;
    } else if (record.header("ce_specversion")) {
      out.mode = Mode::Binary;
    } else if (format_.format == EventFormat::CloudEvents) {
      return invalid(ValidationReason::NotCloudEvent, {},
                     "not a CloudEvents record: no ce_specversion header (binary mode) and no "
                     "content-type application/cloudevents+json (structured mode)");
    }
  }
  Buffers& b = *buffers_;
  b.length = record.payload.size();
  const std::size_t need = b.length + simdjson::SIMDJSON_PADDING;
  if (b.buffer.size() < need) b.buffer.resize(std::max(need, 2 * b.buffer.size()));
  if (b.length > 0) std::memcpy(b.buffer.data(), record.payload.data(), b.length);
  element doc;
  if (const auto error = b.parser.parse(b.buffer.data(), b.length, false).get(doc)) {
    return invalid(
        error == simdjson::UTF8_ERROR ? ValidationReason::InvalidUtf8
                                      : ValidationReason::InvalidJson,
        {}, fmt::format("record value is not a JSON object: {}", simdjson::error_message(error)));
  }
  if (doc.type() != element_type::OBJECT)
    return invalid(ValidationReason::InvalidJson, {}, "record value is not a JSON object");
  if (const auto twice = duplicate_key(doc)) {
    return invalid(
        ValidationReason::DuplicateField, twice->path + "/" + std::string(twice->key),
        fmt::format("field '{}/{}' occurs twice in one object", twice->path, shown(twice->key)));
  }
  out.data = doc;
  out.data_text = record.payload;

  if (out.mode == Mode::Json) {
    const auto id = string_at(doc, format_.id_pointer);
    if (!id)
      return invalid(ValidationReason::Missing, format_.id_pointer,
                     fmt::format("no event id: {} is missing or not a string", format_.id_pointer));
    const auto type = string_at(doc, format_.type_pointer);
    if (!type)
      return invalid(
          ValidationReason::Missing, format_.type_pointer,
          fmt::format("no event type: {} is missing or not a string", format_.type_pointer));
    out.id = *id;
    out.type = *type;
    return std::nullopt;
  }
  // CloudEvents: the required attributes, then the data.
  const auto attribute = [&](std::string_view name) -> std::optional<std::string_view> {
    if (out.mode == Mode::Binary) return record.header(fmt::format("{}{}", kAttributePrefix, name));
    return string_at(doc, fmt::format("/{}", name));
  };
  for (const std::string_view name : {"specversion", "id", "source", "type"}) {
    const auto value = attribute(name);
    if (!value || value->empty())
      return invalid(ValidationReason::NotCloudEvent, std::string(name),
                     fmt::format("CloudEvents attribute '{}' is missing ({})", name,
                                 out.mode == Mode::Binary ? "header ce_" + std::string(name)
                                                          : "a string field of the envelope"));
    if (name == "specversion" && *value != kSpecVersion)
      return invalid(ValidationReason::NotCloudEvent, "specversion",
                     fmt::format("CloudEvents specversion '{}': only 1.0 is read", shown(*value)));
    if (name == "id") out.id = *value;
    if (name == "type") out.type = *value;
  }
  if (out.mode == Mode::Structured) {
    out.envelope = doc;
    element data;
    if (doc.at_key("data").get(data) != simdjson::SUCCESS) {
      return invalid(ValidationReason::NotCloudEvent, "data",
                     doc.at_key("data_base64").error() == simdjson::SUCCESS
                         ? "the event's data is data_base64: only JSON data is read"
                         : "the event has no data");
    }
    if (data.type() != element_type::OBJECT)
      return invalid(ValidationReason::WrongType, "data", "the event's data is not a JSON object");
    const auto text = literal("/data");
    if (!text)
      return invalid(ValidationReason::InvalidJson, "data", "the event's data is unreadable");
    out.data = data;
    out.data_text = *text;
  }
  return std::nullopt;
}

Validated<Param> EventReader::value_of(const ParamSpec& spec, Backend backend,
                                       const RecordInfo& record, const Parsed& parsed,
                                       const Uuid& id) {
  using K = ParamSource::Kind;
  const ValueContext ctx{spec, backend, spec.source.name};
  switch (spec.source.kind) {
    case K::Pointer: {
      element found;
      if (parsed.data.at_pointer(spec.source.name).get(found) != simdjson::SUCCESS)
        return absent_param(ctx, false);
      if (!needs_literal(found, spec)) return json_param(found, ctx, std::nullopt);
      return json_param(found, ctx,
                        literal(parsed.mode == Parsed::Mode::Structured ? "/data" + spec.source.name
                                                                        : spec.source.name));
    }
    case K::EventId:
      return spec.type == ParamType::Uuid ? Validated<Param>(Param(id))
                                          : text_param(parsed.id, {spec, backend, "event.id"});
    case K::EventType: return text_param(parsed.type, {spec, backend, "event.type"});
    case K::Attribute: {
      if (parsed.mode == Parsed::Mode::Structured) {
        element found;
        if (parsed.envelope.at_key(spec.source.name).get(found) == simdjson::SUCCESS)
          return json_param(found, ctx,
                            needs_literal(found, spec)
                                ? literal("/" + pointer_token(spec.source.name))
                                : std::nullopt);
      }
      std::optional<std::string_view> text;
      if (parsed.mode == Parsed::Mode::Binary)
        text = record.header(fmt::format("{}{}", kAttributePrefix, spec.source.name));
      return text ? text_param(*text, ctx) : absent_param(ctx, false);
    }
    case K::KafkaTopic: return text_param(record.topic, {spec, backend, "kafka.topic"});
    case K::KafkaKey: return text_param(record.key, {spec, backend, "kafka.key"});
    case K::ConsumerGroup:
      return text_param(record.consumer_group, {spec, backend, "consumer.group"});
    case K::KafkaPartition:
    case K::KafkaOffset: {
      const std::int64_t n =
          spec.source.kind == K::KafkaOffset ? record.offset : std::int64_t{record.partition};
      return spec.type == ParamType::Integer ? Validated<Param>(Param(n))
                                             : text_param(fmt::format("{}", n), ctx);
    }
    case K::KafkaHeader: {
      const auto text = record.header(spec.source.name);
      return text ? text_param(*text, ctx) : absent_param(ctx, false);
    }
    case K::Response: return Param(nullptr);  // filled from the call's answer
  }
  return Param(nullptr);
}

std::optional<ValidationError> EventReader::bind(const RecordInfo& record, const Parsed& parsed,
                                                 SinkEvent& event) {
  const Route& route = *event.route->config;
  std::size_t count = 0;
  for (const SqlStatement& st : route.sql) count += st.params.size();
  event.values.reserve(count);
  for (const SqlStatement& st : route.sql) {
    for (const std::size_t index : st.params) {
      const ParamSpec& spec = route.params[index];
      if (spec.source.kind == ParamSource::Kind::Response)
        event.from_answer.emplace_back(event.values.size(), index);
      Validated<Param> value = value_of(spec, backend_, record, parsed, event.id);
      if (!value.ok()) return value.error();
      event.values.push_back(std::move(value).value());
    }
  }
  if (route.http) return render(record, parsed, event);
  return std::nullopt;
}

std::optional<ValidationError> EventReader::render(const RecordInfo& record, const Parsed& parsed,
                                                   SinkEvent& event) {
  const Route& route = *event.route->config;
  const HttpCall& call = *route.http;
  std::optional<ValidationError> failed;
  // Template values as text: numeric as exact decimal text whatever the store.
  const auto fill = [&](const Template& t, TemplatePlace place) {
    std::string out;
    for (const Template::Part& part : t.parts) {
      if (!part.is_param) {
        out += part.text;
        continue;
      }
      const ParamSpec& spec = route.params[part.param];
      Validated<Param> value =
          spec.binding == ParamSpec::Binding::Decimal || spec.type != ParamType::Numeric
              ? value_of(spec, Backend::Postgres, record, parsed, event.id)
              : value_of(as_decimal(spec), Backend::Postgres, record, parsed, event.id);
      if (!value.ok()) {
        if (!failed) failed = value.error();
        return out;
      }
      if (auto problem = insert_value(out, value.value(), spec, place); problem && !failed)
        failed =
            ValidationError{spec.source.name, ValidationReason::WrongType, std::move(*problem)};
    }
    return out;
  };
  http::Request request;
  request.method = call.method;
  request.url = fill(call.url, TemplatePlace::Url);
  if (!failed) failed = url_segment_problem(call.url, route.params, request.url);
  for (const auto& [name, value] : call.headers)
    request.extra_headers.emplace_back(name, fill(value, TemplatePlace::Header));
  request.body =
      call.body_is_event ? std::string(parsed.data_text) : fill(call.body, TemplatePlace::Body);
  request.content_type = call.content_type;
  request.idempotency_header = call.idempotency_header;
  // IDEM-4: the event's id is the key, on every attempt and every redelivery.
  request.idempotency_key = event.id.to_string();
  if (failed) return failed;
  event.request = std::move(request);
  if (!call.ordering_key.empty()) {
    element key;
    if (parsed.data.at_pointer(call.ordering_key).get(key) != simdjson::SUCCESS)
      return invalid(ValidationReason::Missing, call.ordering_key,
                     fmt::format("ordering key {} is missing", call.ordering_key));
    std::string_view text;
    event.ordering_key =
        key.get_string().get(text) == simdjson::SUCCESS ? std::string(text) : simdjson::minify(key);
  }
  return std::nullopt;
}

std::optional<std::string_view> EventReader::literal(std::string_view pointer) {
  Buffers& b = *buffers_;
  return b.literals.find(simdjson::padded_string_view(b.buffer.data(), b.length, b.buffer.size()),
                         pointer);
}

}  // namespace idem::sinks::detail
