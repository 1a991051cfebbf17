#pragma once
/// \file
/// The circuit breaker of each endpoint an http::AsyncClient calls: when an endpoint is
/// down, its calls wait for it instead of spending their attempts, so the records behind
/// them neither move on to a retry topic nor become dead letters because of an outage.
///
/// An endpoint is a scheme, host and port (endpoint_of). An attempt that ends with one of
/// the signs of an endpoint that is down counts as a failure: no answer (connection
/// refused or reset, a timeout, an answer broken off) or 502, 503, 504 (a gateway or the
/// server saying it cannot serve). Any other answer, 2xx, 4xx, 409, 429 and 500 included,
/// says the endpoint is up and resets the count. After BreakerPolicy::failures_to_open
/// failures in a row the breaker opens:
///   - no call to the endpoint is sent, except one probe at a time, every
///     BreakerPolicy::probe_interval (or later, when a 503's Retry-After asks for more);
///   - a call whose attempt fails while it is open waits for it to close, whatever attempts
///     it has spent: it does not end with CallStatus::RetriesExhausted;
///   - the first probe that gets another answer closes it; the calls that waited are sent
///     again, each with its full ClientConfig::max_attempts.
/// ClientConfig::on_breaker reports each opening and closing, so a consumer pauses the route
/// (metric, log, /readyz) while the backlog waits in Kafka.
///
/// The thresholds follow the consecutive-failure breakers of Hystrix and Polly rather than a
/// failure rate over a window (Resilience4j): a call's own attempts are consecutive, so with
/// failures_to_open at most max_attempts a call whose every attempt found the endpoint down
/// has opened the breaker before it could end, however few calls are in flight.

#include <chrono>
#include <string>
#include <string_view>

#include "idem/config.hpp"

namespace idem::http {

struct BreakerPolicy {
  /// Failures in a row (across the endpoint's calls) that open the breaker; 0: no breaker
  /// (calls end RetriesExhausted after max_attempts, as each finds the endpoint down).
  /// Keep it at most ClientConfig::max_attempts (6 by default).
  int failures_to_open = 5;
  /// Between two probes while the breaker is open.
  std::chrono::milliseconds probe_interval{1000};
};

/// `scheme://host:port` of an http or https URL, the port explicit (80, 443 by default):
/// the endpoint whose connections and breaker a call to `url` shares.
/// \throws Error(InvalidArgument, Http) for a URL libcurl cannot parse.
[[nodiscard]] std::string endpoint_of(std::string_view url);

/// Declares `consumer.breaker_failures` and `consumer.breaker_probe_interval`: the breaker
/// of the calls a consumer's effect routes make (ConfigSchema::add<BreakerPolicy>).
void declare_breaker_keys(SectionKeys<BreakerPolicy>& keys);

}  // namespace idem::http
