#pragma once
// The event of a configured route as the consumer holds it: everything its effects need,
// read and checked once at the boundary (EVT-4), so the handler only binds and runs.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "idem/events/event_codec.hpp"
#include "idem/http/async_client.hpp"
#include "idem/sinks/sink_config.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "sinks/json_schema.hpp"

namespace idem::sinks::detail {

/// A route with what reading its events needs beyond the configuration.
struct CompiledRoute {
  const Route* config = nullptr;
  std::unique_ptr<JsonSchema> schema;  ///< null when the route declares none
};

struct SinkEvent {
  Uuid id;
  const CompiledRoute* route = nullptr;  ///< null: a type without route, skipped
  /// The bound values of the route's statements, one after another (statement i takes
  /// the next config->sql[i].params.size() of them).
  std::vector<Param> values;
  /// Positions in `values` that the call's answer fills (response:/... parameters), with
  /// the route parameter of each; NULL placeholders until then.
  std::vector<std::pair<std::size_t, std::size_t>> from_answer;
  /// The route's call, rendered from the event (URL, headers, body, idempotency key).
  std::optional<http::Request> request;
  std::string ordering_key;  ///< empty: the Kafka key orders the calls
};

}  // namespace idem::sinks::detail

namespace idem {

/// The dedup key of a configured route's event. Parsing is the route's (RecordParser).
template <>
struct EventCodec<sinks::detail::SinkEvent> {
  static const Uuid& event_id(const sinks::detail::SinkEvent& event) noexcept { return event.id; }
};

}  // namespace idem
