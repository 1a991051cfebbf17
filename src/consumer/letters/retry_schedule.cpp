#include "consumer/letters/retry_schedule.hpp"

#include <algorithm>

namespace idem::detail {

std::chrono::milliseconds RetrySchedule::failed(const TopicPartition& tp, std::int64_t offset,
                                                TimePoint now, Backoff& backoff) {
  Entry& e = entries_[tp];
  if (e.attempts == 0 || e.offset != offset) {
    e.offset = offset;
    e.attempts = 0;
  }
  ++e.attempts;
  const auto delay = backoff.delay(e.attempts);
  if (!e.paused) ++paused_count_;
  e.paused = true;
  e.resume_at = now + delay;
  return delay;
}

void RetrySchedule::defer(const TopicPartition& tp, TimePoint resume_at) {
  // The attempts of a record that failed are its own: a deferral of a later record (the
  // rest of its batch found not due) leaves them alone.
  Entry& e = entries_[tp];
  if (!e.paused) ++paused_count_;
  e.paused = true;
  e.resume_at = resume_at;
}

std::uint32_t RetrySchedule::attempts(const TopicPartition& tp, std::int64_t offset) const {
  const auto it = entries_.find(tp);
  return it != entries_.end() && it->second.offset == offset ? it->second.attempts : 0;
}

void RetrySchedule::progressed(const TopicPartition& tp, std::int64_t next_offset) {
  const auto it = entries_.find(tp);
  if (it == entries_.end() || it->second.paused || it->second.offset >= next_offset) return;
  entries_.erase(it);
}

std::vector<TopicPartition> RetrySchedule::take_due(TimePoint now) {
  std::vector<TopicPartition> due;
  if (paused_count_ == 0) return due;
  for (auto& [tp, e] : entries_) {
    if (e.paused && e.resume_at <= now) {
      e.paused = false;
      --paused_count_;
      due.push_back(tp);
    }
  }
  return due;
}

bool RetrySchedule::paused(const TopicPartition& tp) const {
  const auto it = entries_.find(tp);
  return it != entries_.end() && it->second.paused;
}

std::optional<RetrySchedule::TimePoint> RetrySchedule::next_due() const {
  std::optional<TimePoint> next;
  for (const auto& [tp, e] : entries_) {
    if (e.paused && (!next || e.resume_at < *next)) next = e.resume_at;
  }
  return next;
}

void RetrySchedule::forget(std::span<const TopicPartition> partitions) {
  for (const auto& tp : partitions) {
    const auto it = entries_.find(tp);
    if (it == entries_.end()) continue;
    if (it->second.paused) --paused_count_;
    entries_.erase(it);
  }
}

}  // namespace idem::detail
