#pragma once
// The monotonic clock of the consumer's scheduling (retry times, backoffs, not-before
// deferrals): injected, so a test can drive the effect path's timing by hand. Distinct
// from idem::Clock, the wall clock of event ages and retry-topic headers.
#include <chrono>

namespace idem::detail {

class SteadyClock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  SteadyClock() = default;
  SteadyClock(const SteadyClock&) = delete;
  SteadyClock& operator=(const SteadyClock&) = delete;
  virtual ~SteadyClock() = default;
  /// Thread-safe.
  [[nodiscard]] virtual TimePoint now() const noexcept = 0;

  /// std::chrono::steady_clock; stateless, so sharing it hides no state.
  [[nodiscard]] static const SteadyClock& real() noexcept;
};

}  // namespace idem::detail
