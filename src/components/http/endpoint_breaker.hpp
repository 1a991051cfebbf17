#pragma once
// The state of one endpoint's circuit breaker (idem/http/circuit_breaker.hpp says what it
// does): the failures in a row, whether it is open, and when the next probe may go. The
// calls it holds stay with AsyncClient's loop, which owns every call; this class only
// decides. Loop thread only.
#include <chrono>
#include <optional>
#include <string>

#include "idem/http/circuit_breaker.hpp"

namespace idem::http::detail {

class EndpointBreaker {
 public:
  using Clock = std::chrono::steady_clock;

  explicit EndpointBreaker(const BreakerPolicy& policy) : policy_(policy) {}

  [[nodiscard]] bool open() const noexcept { return open_; }

  /// An attempt found the endpoint down (`why`; a 503's Retry-After in `retry_after`).
  /// Returns true when this failure opens the breaker. A probe's failure schedules the
  /// next probe.
  [[nodiscard]] bool failed(Clock::time_point now, std::chrono::milliseconds retry_after,
                            bool was_probe);

  /// An attempt got an answer that says the endpoint is up. Returns true when this closes
  /// the breaker.
  [[nodiscard]] bool answered() noexcept;

  /// Whether a probe may start now: open, none in flight, and its time has come.
  [[nodiscard]] bool probe_due(Clock::time_point now) const noexcept;
  void probe_started() noexcept { probing_ = true; }
  /// When the next probe may start, while one may (open and none in flight).
  [[nodiscard]] std::optional<Clock::time_point> next_probe() const noexcept;

 private:
  const BreakerPolicy& policy_;  // the client's ClientConfig::breaker, which outlives this
  int failures_in_row_ = 0;
  bool open_ = false;
  bool probing_ = false;
  Clock::time_point next_probe_{};
};

/// Whether an attempt's end is a sign of an endpoint that is down: no answer (`status` 0)
/// or 502, 503, 504.
[[nodiscard]] bool endpoint_down(long status) noexcept;

}  // namespace idem::http::detail
