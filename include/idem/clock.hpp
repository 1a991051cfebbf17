#pragma once
/// \file
/// Injected wall clock, so that UUIDv7 generation, TTL and the dedup horizon
/// can be tested with a clock the test controls.

#include <chrono>

namespace idem {

/// A source of wall-clock time. Implementations must be thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  [[nodiscard]] virtual std::chrono::system_clock::time_point now() const = 0;
};

/// The real clock (std::chrono::system_clock).
class SystemClock final : public Clock {
 public:
  [[nodiscard]] std::chrono::system_clock::time_point now() const override {
    return std::chrono::system_clock::now();
  }
  /// A process-wide instance; stateless, so sharing it hides no state.
  static const SystemClock& instance() noexcept {
    static const SystemClock clock;
    return clock;
  }
};

}  // namespace idem
