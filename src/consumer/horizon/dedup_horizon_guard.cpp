#include "consumer/horizon/dedup_horizon_guard.hpp"

#include <fmt/format.h>

#include "idem/timestamp.hpp"

namespace idem::detail {

DedupHorizonGuard::DedupHorizonGuard(const ConsumerConfig& config) noexcept : config_(config) {}

HorizonVerdict DedupHorizonGuard::check(const Uuid& event_id, std::string& why) {
  const auto now = config_.clock->now();
  const std::int64_t age = DedupHorizon::event_age(event_id, now).count();
  if (age > oldest_age_ms_.load(std::memory_order_relaxed)) {
    oldest_age_ms_.store(age, std::memory_order_relaxed);  // one writer: the run() thread
  }
  const bool past_horizon = config_.dedup_horizon.is_stale(event_id, now);
  const std::int64_t dropped_before = marks_dropped_before_ms_.load(std::memory_order_relaxed);
  const std::int64_t born =
      std::chrono::duration_cast<std::chrono::milliseconds>(event_id.timestamp().time_since_epoch())
          .count();
  if (!past_horizon && born >= dropped_before) return HorizonVerdict::Fresh;
  stale_.fetch_add(1, std::memory_order_relaxed);
  switch (config_.stale_events) {
    case StaleEventPolicy::Process: return HorizonVerdict::Fresh;
    case StaleEventPolicy::Skip: return HorizonVerdict::Skip;
    case StaleEventPolicy::Quarantine: break;
  }
  if (past_horizon) {
    why = fmt::format(
        "event {} was born {} h ago, past the dedup horizon of {} h (retention {} h minus a "
        "safety margin of {} h): its dedup row may be gone, so it is not executed again",
        event_id.to_string(), age / 3'600'000,
        config_.dedup_horizon.stale_age().count() / 3'600'000,
        config_.dedup_horizon.retention.count(), config_.dedup_horizon.safety_margin.count());
  } else {
    using Millis = std::chrono::sys_time<std::chrono::milliseconds>;
    using std::chrono::milliseconds;
    why = fmt::format(
        "event {} was born {} h ago, before {}: maintenance at {} kept dedup marks for {} h "
        "only and may have dropped its dedup row, so it is not executed again",
        event_id.to_string(), age / 3'600'000, format_rfc3339(Millis(milliseconds(dropped_before))),
        format_rfc3339(Millis(milliseconds(marks_dropped_at_ms_.load(std::memory_order_relaxed)))),
        marks_dropped_retention_ms_.load(std::memory_order_relaxed) / 3'600'000);
  }
  return HorizonVerdict::Quarantine;
}

void DedupHorizonGuard::marks_dropped(const DroppedDedupMarks& dropped) noexcept {
  const auto ms = [](auto t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  };
  if (ms(dropped.born_before) <= marks_dropped_before_ms_.load(std::memory_order_relaxed)) return;
  // The details first: they only word the quarantine reason, the bound decides.
  marks_dropped_at_ms_.store(ms(dropped.dropped_at), std::memory_order_relaxed);
  marks_dropped_retention_ms_.store(dropped.retention.count(), std::memory_order_relaxed);
  marks_dropped_before_ms_.store(ms(dropped.born_before), std::memory_order_relaxed);
}

void DedupHorizonGuard::fill(ConsumerStats& stats) const noexcept {
  stats.stale = stale_.load(std::memory_order_relaxed);
  stats.oldest_event_age =
      std::chrono::milliseconds(oldest_age_ms_.load(std::memory_order_relaxed));
  stats.dedup_horizon = config_.dedup_horizon.stale_age();
}

}  // namespace idem::detail
