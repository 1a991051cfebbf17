#pragma once
// The demo's view of the running system: progress lines, the live counts, and the
// waits of each phase ("drained": everything published and both groups caught up).
#include <chrono>
#include <cstdint>
#include <functional>
#include <string_view>

#include "demo/audit.hpp"
#include "idem/store.hpp"

namespace idem::cli::demo {

class Progress {
 public:
  using Clock = std::chrono::steady_clock;

  /// `confirmed`: the order service's count of confirmed orders, read on every wait.
  Progress(const RunScope& scope, Store& store, const std::int64_t& confirmed, int timeout_s);

  /// Prints "[  t s] what".
  void step(std::string_view what) const;
  /// The live counts; the last ones read when the database is busy (SQLite: every
  /// transaction takes the write lock).
  Counts counts();
  /// Polls `done` (and runs `tick` between polls) until it holds; prints a progress
  /// line every second. Throws when the demo's deadline passes first.
  void wait_or_throw(std::string_view phase, const std::function<bool()>& done,
                     const std::function<void()>& tick = {});
  /// The system settled: the relay published every confirmed order's event and both
  /// groups committed offsets up to the end of the topic.
  bool drained();
  [[nodiscard]] bool past_deadline() const noexcept { return Clock::now() >= deadline_; }
  [[nodiscard]] double elapsed_s() const;

 private:
  void progress_line(std::string_view phase);
  void print_offsets() const;
  bool caught_up(std::string_view group) const;

  const RunScope& scope_;
  Store& store_;
  const std::int64_t& confirmed_;
  int timeout_s_;
  Clock::time_point started_;
  Clock::time_point deadline_;
  Counts last_counts_;
};

}  // namespace idem::cli::demo
