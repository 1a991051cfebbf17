#pragma once
// The dedup-horizon guard (docs/retention.md): an event born before
// now - (retention - safety margin) may have lost its dedup row to retention, so a
// redelivery of it could run its effect a second time. The guard sees every valid
// event before it is marked and decides, per ConsumerConfig::stale_events, whether it
// is quarantined (DLQ, reason `stale`), skipped, or processed anyway. An event born
// before what the store records as dropped by maintenance is stale the same way. It also keeps
// the oldest event age seen, for the stats/metrics next to the horizon.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "idem/consumer.hpp"
#include "idem/retention.hpp"

namespace idem::detail {

inline constexpr std::string_view kStaleErrorClass = "stale";

class DedupHorizonGuard {
 public:
  explicit DedupHorizonGuard(const ConsumerConfig& config) noexcept;

  /// Checks one valid event. On Quarantine, `why` says how old it is against the horizon.
  /// Called from the run() thread only.
  [[nodiscard]] HorizonVerdict check(const Uuid& event_id, std::string& why);

  /// Copies the guard's counters into `stats`. Thread-safe.
  void fill(ConsumerStats& stats) const noexcept;

  /// What maintenance dropped, as the store recorded it (DedupRetentionDeclarer): events
  /// born before `dropped.born_before` may have lost their marks even when younger than
  /// this consumer's horizon (a pass that ran before this group declared its retention),
  /// so they are stale too. Only moves forward. Thread-safe.
  void marks_dropped(const DroppedDedupMarks& dropped) noexcept;

 private:
  const ConsumerConfig& config_;
  std::atomic<std::int64_t> marks_dropped_before_ms_{0};
  std::atomic<std::int64_t> marks_dropped_at_ms_{0};
  std::atomic<std::int64_t> marks_dropped_retention_ms_{0};
  std::atomic<std::uint64_t> stale_{0};
  std::atomic<std::int64_t> oldest_age_ms_{0};
};

}  // namespace idem::detail
