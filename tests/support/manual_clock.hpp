#pragma once
// An idem::Clock the test sets and advances by hand (TTL, partitions, dedup horizon),
// and UUIDv7 ids born at a chosen instant.
#include <atomic>
#include <chrono>

#include "idem/clock.hpp"
#include "idem/uuid.hpp"

namespace idem::test {

/// Thread-safe, as idem::Clock requires: consumers and maintenance read it from their
/// own threads while the test moves it.
class ManualClock final : public Clock {
 public:
  using TimePoint = std::chrono::system_clock::time_point;
  explicit ManualClock(TimePoint t = std::chrono::system_clock::now()) : now_(t) {}
  [[nodiscard]] TimePoint now() const override { return now_.load(); }
  void set(TimePoint t) { now_.store(t); }
  void advance(std::chrono::system_clock::duration d) { now_.store(now_.load() + d); }

 private:
  std::atomic<TimePoint> now_;
};

/// A UUIDv7 whose timestamp is `t` (a fresh generator, so any instant works, also the past).
inline Uuid uuid_v7_born_at(std::chrono::system_clock::time_point t) {
  const ManualClock clock(t);
  UuidV7Generator generator(clock);
  return generator.next();
}

}  // namespace idem::test
