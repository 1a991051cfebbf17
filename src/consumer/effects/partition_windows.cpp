#include "consumer/effects/partition_windows.hpp"

namespace idem::detail {

bool PartitionWindows::admit(const TopicPartition& tp, std::int64_t offset) {
  return progress_.received(tp, offset);
}

void PartitionWindows::pause_if_full(const TopicPartition& tp) {
  if (full_.contains(tp) || progress_.held(tp) < limit_) return;
  if (const auto next = progress_.next_expected(tp)) {
    gate_.hold(tp, FetchGate::Hold::Buffer, *next);
    full_.insert(tp);
  }
}

void PartitionWindows::resume_drained() {
  for (auto it = full_.begin(); it != full_.end();) {
    if (progress_.held(*it) > limit_ / 2) {
      ++it;
      continue;
    }
    gate_.release(*it, FetchGate::Hold::Buffer);
    it = full_.erase(it);
  }
}

void PartitionWindows::forget(std::span<const TopicPartition> partitions) {
  for (const auto& tp : partitions) full_.erase(tp);
}

}  // namespace idem::detail
