#include "idem/outbox.hpp"

#include <simdjson.h>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "idem/tracing.hpp"
#include "stores/outbox_rows.hpp"

namespace idem {

namespace {

void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

}  // namespace

int outbox_shard(std::string_view message_key) noexcept {
  std::uint32_t h = 2166136261U;
  for (const char c : message_key) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619U;
  }
  return static_cast<int>(h % static_cast<std::uint32_t>(kOutboxShards));
}

std::string outbox_headers_to_json(
    const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string out = "{";
  for (std::size_t i = 0; i < headers.size(); ++i) {
    if (i > 0) out.push_back(',');
    append_json_string(out, headers[i].first);
    out.push_back(':');
    append_json_string(out, headers[i].second);
  }
  out.push_back('}');
  return out;
}

std::vector<std::pair<std::string, std::string>> outbox_headers_from_json(std::string_view json) {
  std::vector<std::pair<std::string, std::string>> out;
  if (json == "{}") return out;  // the common case: no extra headers
  // The DOM parser pads its own copy; the headers column is small.
  thread_local simdjson::dom::parser parser;
  simdjson::dom::object object;
  if (parser.parse(json.data(), json.size()).get_object().get(object) != simdjson::SUCCESS) {
    throw Error(ErrorCode::Query, ErrorSource::Internal,
                fmt::format("outbox: headers are not a JSON object: {}", json));
  }
  for (const auto field : object) {
    std::string_view value;
    if (field.value.get_string().get(value) != simdjson::SUCCESS) {
      throw Error(ErrorCode::Query, ErrorSource::Internal,
                  fmt::format("outbox: header {} is not a string", field.key));
    }
    out.emplace_back(std::string(field.key), std::string(value));
  }
  return out;
}

OutboxRow Outbox::prepare(const OutboxEventFactory& factory) {
  // Born here, once (IDEM-1): the factory puts it into the payload, and the row keeps it.
  OutboxRow row;
  row.event_id = generator_ != nullptr ? generator_->next() : new_uuid_v7();
  row.message = factory(row.event_id);
  OutboxMessage& m = row.message;
  row.message_key = m.message_key ? *m.message_key : m.aggregate_id;
  if (m.topic.empty() || row.message_key.empty() || m.aggregate_type.empty()) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Internal,
                "outbox: topic, aggregate_type and the message key must not be empty");
  }
  bool has_trace = false;
  for (const auto& h : m.headers) {
    if (h.first == "event_id") {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Internal,
                  "outbox: the event_id header is added by the relay from the row");
    }
    has_trace = has_trace || h.first == kTraceparentHeader;
  }
  // The trace starts with the event unless the caller continues its own (tracing.hpp);
  // a caller's value is kept as given (consumers ignore an invalid one).
  if (!has_trace)
    m.headers.emplace_back(kTraceparentHeader, TraceContext::new_root().traceparent());
  row.shard = outbox_shard(row.message_key);
  row.headers_json = outbox_headers_to_json(m.headers);
  return row;
}

Uuid Outbox::enqueue(Transaction& tx, const OutboxEventFactory& factory) {
  const OutboxRow row = prepare(factory);
  detail::insert_outbox_row(tx, row);
  return row.event_id;
}

}  // namespace idem
