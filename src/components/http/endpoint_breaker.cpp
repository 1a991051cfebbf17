#include "http/endpoint_breaker.hpp"

#include <algorithm>

namespace idem::http {

namespace detail {

bool EndpointBreaker::failed(Clock::time_point now, std::chrono::milliseconds retry_after,
                             bool was_probe) {
  if (was_probe) probing_ = false;
  if (policy_.failures_to_open <= 0) return false;
  ++failures_in_row_;
  const bool opens = !open_ && failures_in_row_ >= policy_.failures_to_open;
  if (opens) open_ = true;
  // A server that says when to come back (Retry-After on a 503) is asked no sooner.
  if (open_ && (opens || was_probe))
    next_probe_ = now + std::max(policy_.probe_interval, retry_after);
  return opens;
}

bool EndpointBreaker::answered() noexcept {
  failures_in_row_ = 0;
  probing_ = false;
  if (!open_) return false;
  open_ = false;
  return true;
}

bool EndpointBreaker::probe_due(Clock::time_point now) const noexcept {
  return open_ && !probing_ && next_probe_ <= now;
}

std::optional<EndpointBreaker::Clock::time_point> EndpointBreaker::next_probe() const noexcept {
  if (!open_ || probing_) return std::nullopt;
  return next_probe_;
}

bool endpoint_down(long status) noexcept {
  return status == 0 || status == 502 || status == 503 || status == 504;
}

}  // namespace detail

void declare_breaker_keys(SectionKeys<BreakerPolicy>& keys) {
  keys.integer("consumer.breaker_failures", &BreakerPolicy::failures_to_open,
               "calls of an effect route: failures in a row (no answer, 502, 503, 504) that "
               "open an endpoint's circuit breaker, so its calls wait for it instead of moving "
               "records on to a retry topic or the DLQ; 0: no breaker",
               0, 1000)
      .duration("consumer.breaker_probe_interval", &BreakerPolicy::probe_interval,
                "between two probe calls to an endpoint whose breaker is open", 1,
                3600 * kConfigSecond);
}

}  // namespace idem::http
