#pragma once
/// \file
/// An HTTP client for many concurrent calls with an external side effect (IDEM-4),
/// without a thread per call: one event-loop thread drives every transfer through
/// libcurl's multi interface, reuses connections and keeps at most
/// ClientConfig::max_host_connections open per host. Each call keeps the rules of
/// IdempotentClient: the same `Idempotency-Key` on every attempt, and ClientConfig::policy
/// deciding each answer: Retry verdicts (connection errors, timeouts, an incomplete
/// answer, 5xx, 409, 429 with Retry-After) retried with capped exponential backoff and
/// jitter (timers in the loop, never a sleeping thread), the others returned at once.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/http/idempotent_client.hpp"

namespace idem::http {

/// One call with an idempotency key. Members have defaults, so a designated initializer
/// may leave any out (e.g. extra_headers).
struct Request {
  std::string url{};  ///< http:// or https://
  std::string body{};
  std::string idempotency_key{};  ///< the same on every attempt (validate_idempotency_key)
  std::vector<std::pair<std::string, std::string>> extra_headers{};  ///< e.g. traceparent
  std::string method{"POST"};  ///< any token; a body is sent whenever it is not empty
  std::string content_type{"application/json"};       ///< of the body
  std::string idempotency_header{"Idempotency-Key"};  ///< the key's header name
  /// The first attempt starts no earlier than this (a rate limit, a paused route's probe).
  std::chrono::steady_clock::time_point not_before{};
};

/// Thread-safe: start() may be called from any thread, a callback included. Callbacks
/// (and ClientConfig::on_retry) run on the client's event-loop thread; they must be quick
/// and must not block (hand the result on). An exception thrown by a callback is caught
/// and ignored, so one handler's bug cannot stop every other call.
class AsyncClient {
 public:
  /// Starts the event-loop thread.
  /// \throws Error(InvalidArgument, Config) for a bad configuration;
  ///   Error(Internal, Http) if libcurl cannot be initialised.
  explicit AsyncClient(ClientConfig config = {});
  /// Stops the loop: calls still running end with CallStatus::RetriesExhausted and
  /// error "cancelled" (their callbacks run before the destructor returns; http_status
  /// and body are those of the call's last answer, 0 and empty if it got none). Must not
  /// run on the loop thread, i.e. not from one of this client's callbacks.
  ~AsyncClient();
  AsyncClient(const AsyncClient&) = delete;
  AsyncClient& operator=(const AsyncClient&) = delete;

  /// Starts one call (all its attempts); `done` runs exactly once when it ends.
  /// Never blocks. \throws Error(InvalidArgument, Http) for an invalid key or header, an
  ///   empty `done`, or a URL libcurl cannot use (bad syntax, a scheme other than http
  ///   and https); nothing is sent then and `done` never runs.
  void start(Request request, std::function<void(CallResult)> done);

  /// Calls started whose callback has not yet returned.
  [[nodiscard]] std::size_t in_flight() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Why start() would refuse `url` (bad syntax, a scheme other than http and https), in
/// words that do not quote it (a URL may hold a secret); nullopt when it would not.
[[nodiscard]] std::optional<std::string> url_problem(const std::string& url);

}  // namespace idem::http
