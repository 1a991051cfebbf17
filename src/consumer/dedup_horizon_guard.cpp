#include "consumer/dedup_horizon_guard.hpp"

#include <fmt/format.h>

namespace idem::detail {

DedupHorizonGuard::DedupHorizonGuard(const ConsumerConfig& config) noexcept : config_(config) {}

HorizonVerdict DedupHorizonGuard::check(const Uuid& event_id, std::string& why) {
  const auto now = config_.clock->now();
  const std::int64_t age = DedupHorizon::event_age(event_id, now).count();
  if (age > oldest_age_ms_.load(std::memory_order_relaxed)) {
    oldest_age_ms_.store(age, std::memory_order_relaxed);  // one writer: the run() thread
  }
  if (!config_.dedup_horizon.is_stale(event_id, now)) return HorizonVerdict::Fresh;
  stale_.fetch_add(1, std::memory_order_relaxed);
  switch (config_.stale_events) {
    case StaleEventPolicy::Process: return HorizonVerdict::Fresh;
    case StaleEventPolicy::Skip: return HorizonVerdict::Skip;
    case StaleEventPolicy::Quarantine: break;
  }
  why = fmt::format(
      "event {} was born {} h ago, past the dedup horizon of {} h (retention {} h minus a "
      "safety margin of {} h): its dedup row may be gone, so it is not executed again",
      event_id.to_string(), age / 3'600'000, config_.dedup_horizon.stale_age().count() / 3'600'000,
      config_.dedup_horizon.retention.count(), config_.dedup_horizon.safety_margin.count());
  return HorizonVerdict::Quarantine;
}

void DedupHorizonGuard::fill(ConsumerStats& stats) const noexcept {
  stats.stale = stale_.load(std::memory_order_relaxed);
  stats.oldest_event_age =
      std::chrono::milliseconds(oldest_age_ms_.load(std::memory_order_relaxed));
  stats.dedup_horizon = config_.dedup_horizon.stale_age();
}

}  // namespace idem::detail
