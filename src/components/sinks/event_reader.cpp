#include "sinks/event_reader.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "sinks/param_values.hpp"

namespace idem::sinks::detail {

namespace {

// A numeric parameter as a template inserts it: exact decimal text, however it binds.
ParamSpec as_decimal(const ParamSpec& spec) {
  ParamSpec copy = spec;
  copy.binding = ParamSpec::Binding::Decimal;
  return copy;
}

EventReaderOptions envelope_options(const TopicFormat& format) {
  EventReaderOptions options;
  options.format = format.format;
  options.id_pointer = format.id_pointer;
  options.type_pointer = format.type_pointer;
  return options;
}

}  // namespace

EventReader::EventReader(std::string topic, TopicFormat format,
                         std::vector<const CompiledRoute*> routes, Backend backend)
    : topic_(std::move(topic)),
      format_(std::move(format)),
      routes_(std::move(routes)),
      backend_(backend),
      envelope_(envelope_options(format_)) {}

EventReader::~EventReader() = default;

Validated<SinkEvent> EventReader::read(const RecordInfo& record, const ParseLimits& limits) {
  Validated<EventView> read = envelope_.read(record, limits);
  if (!read.ok()) return read.error();
  const EventView& parsed = read.value();
  SinkEvent event;
  event.id = parsed.id();
  const auto route = std::find_if(routes_.begin(), routes_.end(), [&](const CompiledRoute* r) {
    return r->config->event_type == parsed.type();
  });
  if (route == routes_.end()) {
    if (format_.unknown_type == UnknownTypePolicy::Skip) return event;
    std::string known;
    for (const CompiledRoute* r : routes_)
      known += (known.empty() ? "" : ", ") + r->config->event_type;
    return ValidationError{parsed.mode() == EventMode::Json ? format_.type_pointer : "type",
                           ValidationReason::UnknownEventType,
                           fmt::format("no route for event type '{}' on topic '{}' (routes: {})",
                                       shown_in_message(parsed.type()), topic_, known)};
  }
  event.route = *route;
  record.count_as(event.route->config->name);
  if (event.route->schema) {
    if (auto broken = event.route->schema->violation(parsed.data())) {
      return ValidationError{{},
                             ValidationReason::SchemaViolation,
                             fmt::format("event of type '{}' breaks the schema of routes.{}: {}",
                                         parsed.type(), event.route->config->name, *broken)};
    }
  }
  if (auto e = bind(record, parsed, event)) return std::move(*e);
  return event;
}

Validated<Param> EventReader::value_of(const ParamSpec& spec, Backend backend,
                                       const RecordInfo& record, const EventView& event) {
  using K = ParamSource::Kind;
  const ValueContext ctx{spec, backend, spec.source.name};
  switch (spec.source.kind) {
    case K::Pointer: {
      const auto found = event.at(spec.source.name);
      return found ? json_param(*found, ctx) : absent_param(ctx, false);
    }
    case K::EventId:
      return spec.type == ParamType::Uuid
                 ? Validated<Param>(Param(event.id()))
                 : text_param(event.id_text(), {spec, backend, "event.id"});
    case K::EventType: return text_param(event.type(), {spec, backend, "event.type"});
    case K::Attribute: {
      const auto attribute = event.attribute(spec.source.name);
      if (!attribute) return absent_param(ctx, false);
      return attribute->json ? json_param(*attribute->json, ctx) : text_param(attribute->text, ctx);
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

std::optional<ValidationError> EventReader::bind(const RecordInfo& record, const EventView& event,
                                                 SinkEvent& out) {
  const Route& route = *out.route->config;
  std::size_t count = 0;
  for (const SqlStatement& st : route.sql) count += st.params.size();
  out.values.reserve(count);
  for (const SqlStatement& st : route.sql) {
    for (const std::size_t index : st.params) {
      const ParamSpec& spec = route.params[index];
      if (spec.source.kind == ParamSource::Kind::Response)
        out.from_answer.emplace_back(out.values.size(), index);
      Validated<Param> value = value_of(spec, backend_, record, event);
      if (!value.ok()) return value.error();
      out.values.push_back(std::move(value).value());
    }
  }
  if (route.http) return render(record, event, out);
  return std::nullopt;
}

std::optional<ValidationError> EventReader::render(const RecordInfo& record, const EventView& event,
                                                   SinkEvent& out) {
  const Route& route = *out.route->config;
  const HttpCall& call = *route.http;
  std::optional<ValidationError> failed;
  // Template values as text: numeric as exact decimal text whatever the store.
  const auto fill = [&](const Template& t, TemplatePlace place) {
    std::string text;
    for (const Template::Part& part : t.parts) {
      if (!part.is_param) {
        text += part.text;
        continue;
      }
      const ParamSpec& spec = route.params[part.param];
      Validated<Param> value =
          spec.binding == ParamSpec::Binding::Decimal || spec.type != ParamType::Numeric
              ? value_of(spec, Backend::Postgres, record, event)
              : value_of(as_decimal(spec), Backend::Postgres, record, event);
      if (!value.ok()) {
        if (!failed) failed = value.error();
        return text;
      }
      if (auto problem = insert_value(text, value.value(), spec, place); problem && !failed)
        failed =
            ValidationError{spec.source.name, ValidationReason::WrongType, std::move(*problem)};
    }
    return text;
  };
  http::Request request;
  request.method = call.method;
  request.url = fill(call.url, TemplatePlace::Url);
  if (!failed) failed = url_segment_problem(call.url, route.params, request.url);
  for (const auto& [name, value] : call.headers)
    request.extra_headers.emplace_back(name, fill(value, TemplatePlace::Header));
  request.body =
      call.body_is_event ? std::string(event.data_text()) : fill(call.body, TemplatePlace::Body);
  request.content_type = call.content_type;
  request.idempotency_header = call.idempotency_header;
  // IDEM-4: the event's id is the key, on every attempt and every redelivery.
  request.idempotency_key = out.id.to_string();
  if (failed) return failed;
  out.request = std::move(request);
  if (!call.ordering_key.empty()) {
    const auto key = event.at(call.ordering_key);
    if (!key)
      return ValidationError{call.ordering_key, ValidationReason::Missing,
                             fmt::format("ordering key {} is missing", call.ordering_key)};
    const auto text = key->as_string();
    out.ordering_key = text ? std::string(*text) : key->compact();
  }
  return std::nullopt;
}

}  // namespace idem::sinks::detail
