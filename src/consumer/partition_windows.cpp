#include "consumer/partition_windows.hpp"

namespace idem::detail {

bool PartitionWindows::admit(const TopicPartition& tp, std::int64_t offset) {
  return !paused_.contains(tp) && progress_.received(tp, offset);
}

void PartitionWindows::pause_if_full(const TopicPartition& tp) {
  if (paused_.contains(tp) || progress_.held(tp) < limit_) return;
  if (const auto next = progress_.next_expected(tp)) {
    poll_.pause_and_seek({tp, *next});
    paused_.insert(tp);
  }
}

void PartitionWindows::resume_drained() {
  for (auto it = paused_.begin(); it != paused_.end();) {
    if (progress_.held(*it) > limit_ / 2) {
      ++it;
      continue;
    }
    if (const auto next = progress_.next_expected(*it)) poll_.seek_and_resume({*it, *next});
    it = paused_.erase(it);
  }
}

void PartitionWindows::forget(std::span<const TopicPartition> partitions) {
  for (const auto& tp : partitions) paused_.erase(tp);
}

}  // namespace idem::detail
