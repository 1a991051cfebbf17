#pragma once
// A clock the test sets (idem::Clock), for key retention, TTL and dedup-horizon tests.
#include <atomic>
#include <chrono>

#include "idem/clock.hpp"

namespace idem::test {

class FixedClock final : public Clock {
 public:
  using TimePoint = std::chrono::system_clock::time_point;
  explicit FixedClock(TimePoint t = std::chrono::system_clock::now()) : now_(t) {}
  [[nodiscard]] TimePoint now() const override { return now_.load(); }
  void set(TimePoint t) { now_.store(t); }
  void advance(std::chrono::system_clock::duration d) { now_.store(now_.load() + d); }

 private:
  std::atomic<TimePoint> now_;
};

}  // namespace idem::test
