#pragma once
// The HTTP call of a configured route as an effect handler (Consumer::on_effect): the call
// phase sends the request rendered at the boundary and reads the answer with
// http::ResponsePolicy; the apply phase runs the route's statements with the values the
// answer gave. One RouteCalls per route holds what its calls share: the rate limit and
// whether the route is paused (http::RoutePause, as compiled effect handlers decide it).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/consumer.hpp"
#include "idem/http/async_client.hpp"
#include "idem/http/route_pause.hpp"
#include "idem/sinks/configured_sinks.hpp"
#include "sinks/sink_event.hpp"

namespace idem::sinks::detail {

/// What a successful call gave the apply phase: values of `response:` parameters, at
/// their positions in SinkEvent::values.
struct CallAnswer {
  std::vector<std::pair<std::size_t, Param>> values;
};

class RouteCalls {
 public:
  RouteCalls(const Route& route, Backend backend, const SinkObservers& observers);

  /// Starts the call of `event` on `client` (not before the rate limit allows) and
  /// completes `done` from the answer. Runs on the consumer's run() thread.
  void start(http::AsyncClient& client, const SinkEvent& event,
             const CallCompletion<CallAnswer>& done);

  /// Why the route is paused, or empty. Thread-safe.
  [[nodiscard]] std::string paused_reason() const;

  /// The circuit breaker of `endpoint` opened (`open`, the failure that opened it in `why`)
  /// or closed (ClientConfig::on_breaker): the route pauses or resumes when it is the
  /// route's endpoint. Runs on the HTTP client's loop thread.
  void endpoint_changed(std::string_view endpoint, bool open, std::string_view why);

 private:
  void finish(const http::CallResult& result, const SinkEvent& event, http::RoutePause::Start then,
              const CallCompletion<CallAnswer>& done);
  /// `text` with every value the route took from the environment (`${VAR}`) replaced by
  /// `<redacted>`: a reason must not carry a token or a secret URL into a dead letter, a
  /// log line or /readyz.
  [[nodiscard]] std::string redacted(std::string text) const;
  [[nodiscard]] std::chrono::steady_clock::time_point next_slot();

  const Route& route_;
  Backend backend_;
  const SinkObservers& observers_;    // the ConfiguredSinks', which outlives this
  std::vector<std::string> secrets_;  // values of ${VAR} in the URL and headers, longest first
  std::string endpoint_;              // where every call of the route goes (url_endpoint)
  std::chrono::steady_clock::time_point next_slot_{};  // run() thread only
  http::RoutePause pause_;
};

/// The apply phase: the route's statements with the answer's values in place.
Outcome apply_statements(const SinkEvent& event, const CallAnswer* answer, Transaction& tx);

}  // namespace idem::sinks::detail
