#pragma once
/// \file
/// An HTTP client for calls with an external side effect (IDEM-4): every attempt of one
/// call carries the same `Idempotency-Key`, so a provider that deduplicates on it
/// performs the effect once however often the call is retried.
///
/// Transient failures (connection refused or reset, timeouts, an incomplete answer,
/// 5xx, 409 "still in flight", 429) are retried with capped exponential backoff and
/// jitter, honouring `Retry-After`; any other 4xx is permanent and returned at once
/// (ResponsePolicy decides, idem/http/response_policy.hpp).
/// libcurl is linked privately; this header does not include curl.h (pimpl).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/http/circuit_breaker.hpp"
#include "idem/http/response_policy.hpp"
#include "idem/retry.hpp"

namespace idem::http {

/// Longest Idempotency-Key accepted, by the client and by the provider.
inline constexpr std::size_t kMaxIdempotencyKeyLength = 255;

/// Throws Error(InvalidArgument, Http) when `key` cannot be sent as a header value:
/// empty, longer than kMaxIdempotencyKeyLength, or containing CR, LF or another
/// control character (header injection).
void validate_idempotency_key(std::string_view key);

struct ClientConfig {
  std::chrono::milliseconds connect_timeout{2000};  ///< TCP connect, per attempt
  /// Whole request/answer, per attempt. Its clock starts when the attempt gets one of
  /// the host's connections: the wait for a free one (max_host_connections) is not in it.
  std::chrono::milliseconds total_timeout{10000};
  int max_attempts = 6;  ///< attempts per call, >= 1
  /// Backoff between attempts (RetryPolicy, with the HTTP client's defaults).
  RetryPolicy retry{.initial_backoff = std::chrono::milliseconds(50),
                    .max_backoff = std::chrono::milliseconds(2000),
                    .multiplier = 2.0,
                    .jitter = 0.2};
  /// Connections open to one host at most, >= 1 (libcurl's CURLMOPT_MAX_HOST_CONNECTIONS);
  /// further calls to that host wait inside libcurl for a free one. Finished connections
  /// stay open for the next call (HTTP keep-alive, TCP keep-alive probes while idle).
  std::size_t max_host_connections = 64;
  /// What each answer means (done, retried, permanent) and the cap on a server's
  /// Retry-After: ResponsePolicy, the same object callers use for their final answer.
  ResponsePolicy policy;
  /// TEST ONLY. false sends a fresh random key with every attempt instead of the
  /// caller's key: the design documents' mistake "a new UUID per send attempt", which
  /// is what a client without idempotency keys amounts to. Exists to show the double
  /// charge it causes.
  bool send_idempotency_key = true;
  /// Called before each wait between attempts (attempt number, wait, why). Optional.
  /// Runs on the client's event-loop thread; an exception from it is ignored.
  std::function<void(int, std::chrono::milliseconds, std::string_view)> on_retry;
  /// The circuit breaker of each endpoint (idem/http/circuit_breaker.hpp): on by default.
  /// AsyncClient only; an IdempotentClient's caller blocks, so it calls without one (its
  /// caller's own retry, such as the consumer's backoff, is its wait).
  BreakerPolicy breaker;
  /// Called when an endpoint's breaker opens (true, with the failure that opened it) or
  /// closes (false, the probe's answer). Optional. Runs on the client's event-loop thread;
  /// an exception from it is ignored.
  std::function<void(std::string_view endpoint, bool open, std::string_view why)> on_breaker;
};

/// How a call ended.
enum class CallStatus {
  Success,           ///< a 2xx answer
  Permanent,         ///< the policy says DeadLetter or RouteMisconfigured: retrying cannot help
  RetriesExhausted,  ///< every attempt failed transiently; the last failure is in `error`
};

struct CallResult {
  CallStatus status = CallStatus::RetriesExhausted;
  long http_status = 0;     ///< of the last answer; 0 when the last attempt got none
  std::string body;         ///< of the last answer
  ResponseHeaders headers;  ///< of the last answer
  /// What the last answer (or its absence) means, by ClientConfig::policy.
  Classification classification;
  int attempts = 0;
  std::string error;  ///< the last transient failure (transport error or status)

  [[nodiscard]] bool ok() const noexcept { return status == CallStatus::Success; }
};

/// One connection-reusing client that blocks for each call: an AsyncClient waited on,
/// so its retry rules are AsyncClient's (one event-loop thread per IdempotentClient).
/// Thread-safe: calls from several threads run concurrently and share the connections.
class IdempotentClient {
 public:
  /// \throws Error(InvalidArgument, Config) for a bad configuration;
  ///   Error(Internal, Http) if libcurl cannot be initialised.
  explicit IdempotentClient(ClientConfig config = {});
  ~IdempotentClient();
  IdempotentClient(const IdempotentClient&) = delete;
  IdempotentClient& operator=(const IdempotentClient&) = delete;

  /// POSTs `json_body` to `url` with `Content-Type: application/json`,
  /// `Idempotency-Key: idempotency_key` and `extra_headers` (e.g. traceparent), retrying
  /// transient failures with the SAME key. Blocks for the attempts and waits (the waits
  /// are timers of the client's loop; this thread only waits for the result).
  /// \throws Error(InvalidArgument, Http) for an invalid key or header, or a URL libcurl
  ///   cannot use at all (bad syntax, unsupported scheme).
  CallResult post_json(const std::string& url, std::string_view json_body,
                       std::string_view idempotency_key,
                       const std::vector<std::pair<std::string, std::string>>& extra_headers = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idem::http
