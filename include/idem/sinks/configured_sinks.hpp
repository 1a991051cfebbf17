#pragma once
/// \file
/// Runs the routes of a SinkConfig on an idem::Consumer: exactly-once effects declared in
/// a file, with no C++ (docs/configured-sinks.md).
///
/// Each topic gets one route on the consumer (Consumer::on with a RecordParser): a record
/// is read once at the boundary (JSON or CloudEvents, its UUIDv7 id, its type, the route
/// of that type, every parameter checked against its declared type), and the route's
/// statements run with those values in the transaction of the event's dedup mark, deferred
/// (on PostgreSQL one round trip per batch, consecutive INSERTs of one text merged into
/// multi-row INSERTs). Errors: a record that can never be valid goes to the DLQ with a
/// reason naming the field; a statement that fails because of the event's values (a
/// constraint, a bad cast) sends that event alone to the DLQ; a store that is down is
/// retried; a statement that no event could make work (a missing table or privilege)
/// stops the consumer (Consumer::run throws, saying which).
///
/// A route with an HTTP call (`[routes.NAME.http]`) runs through the concurrent,
/// key-ordered effect path (Consumer::on_effect): the call, with the event id as its
/// idempotency key, outside any transaction; then the route's statements (which may read
/// the answer, `response:/pointer`) in the transaction of the mark. Answers are read by
/// http::ResponsePolicy: 2xx done; 409, 429, 5xx and no answer retried with the same key
/// (honouring Retry-After); 400, 422 and other 4xx dead-lettered with the status and the
/// problem details or body; 401, 403 and 404 pause the route when no call of the route
/// succeeded since the failing one was sent (its calls then wait and retry with backoff,
/// and the route is reported paused until one succeeds), and are that event's fault
/// (dead-lettered) when others succeeded meanwhile. An endpoint that is down (its calls
/// refused, reset, timed out, or answered 502, 503, 504 several times in a row) pauses
/// every route calling it through the HTTP client's circuit breaker: the calls wait for it,
/// one probe at a time, instead of spending their attempts.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "idem/consumer.hpp"
#include "idem/http/circuit_breaker.hpp"
#include "idem/sinks/sink_config.hpp"
#include "idem/store.hpp"

namespace idem::sinks {

class RouteTester;

/// What a running ConfiguredSinks reports, each optional. Called from the HTTP client's
/// thread: each must be thread-safe and quick.
struct SinkObservers {
  /// One line when a route pauses or resumes.
  std::function<void(std::string_view)> log;
  /// Each call of a route that ended (an answer the route acts on, or no more attempts):
  /// the route's name and how long the call took, retries included.
  std::function<void(const std::string& route, std::chrono::nanoseconds)> on_call;
  /// A route paused (true: every call failing with 401, 403 or 404, a request the HTTP
  /// client refuses to send, or its endpoint's circuit breaker open) or resumed (false).
  std::function<void(const std::string& route, bool paused)> on_pause;
};

class ConfiguredSinks {
 public:
  /// Compiles `config` for a store of `backend` (how numeric values are bound): loads
  /// every JSON Schema.
  /// \throws ConfigError naming the route's key for a schema that cannot be used.
  ConfiguredSinks(SinkConfig config, Backend backend);
  ~ConfiguredSinks();
  ConfiguredSinks(const ConfiguredSinks&) = delete;
  ConfiguredSinks& operator=(const ConfiguredSinks&) = delete;

  [[nodiscard]] const SinkConfig& config() const noexcept;

  /// Runs every statement once against `store`, with NULL for every parameter, each in a
  /// transaction that is rolled back: a statement the database cannot prepare or is not
  /// allowed to run (a missing table or column, bad SQL, no privilege) is a problem; one
  /// the NULLs break (a NOT NULL constraint) is not. Leaves nothing behind.
  /// \throws ConfigError naming the file, the statement's key and the database's message;
  ///   Error for a store that cannot be reached.
  void check(Store& store) const;

  /// Registers one route per topic of the configuration on `consumer`, whose
  /// ConsumerConfig::topics must list them: Consumer::on for topics whose routes make no
  /// call, Consumer::on_effect for the others. `max_in_flight` (the consumer's) sizes the
  /// HTTP client's connections per host. Records are counted per route
  /// (ConsumerStats::routes, under the route's name). The ConfiguredSinks must outlive
  /// the consumer's run(). `breaker` is the circuit breaker of each endpoint the routes
  /// call (idem/http/circuit_breaker.hpp): while an endpoint is down its routes are paused
  /// (on_pause, paused_routes), their calls wait, and no record moves on to a retry topic
  /// or the DLQ for the outage.
  /// \throws Error(InvalidArgument, Config) as Consumer::on does.
  void install(Consumer& consumer, std::size_t max_in_flight = 256, SinkObservers observers = {},
               const http::BreakerPolicy& breaker = {});

  /// The routes paused now, each with why (`charge: HTTP 401: ...`); for readiness.
  /// Thread-safe.
  [[nodiscard]] std::vector<std::string> paused_routes() const;

 private:
  friend class RouteTester;  // runs the routes' parts on sample events (route_tests.hpp)
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idem::sinks
