#include "consumer/offset_tracker.hpp"

namespace idem::detail {

void OffsetTracker::advance(const TopicPartition& tp, std::int64_t next_offset) {
  auto [it, inserted] = positions_.try_emplace(tp, Position{next_offset, true});
  if (!inserted && next_offset > it->second.next) {
    it->second.next = next_offset;
    it->second.dirty = true;
  }
}

std::vector<PartitionOffset> OffsetTracker::take_dirty() {
  std::vector<PartitionOffset> out;
  for (auto& [tp, pos] : positions_) {
    if (!pos.dirty) continue;
    pos.dirty = false;
    out.push_back({tp, pos.next});
  }
  return out;
}

std::vector<PartitionOffset> OffsetTracker::positions(std::span<const TopicPartition> partitions) {
  std::vector<PartitionOffset> out;
  if (partitions.empty()) {
    for (auto& [tp, pos] : positions_) {
      pos.dirty = false;
      out.push_back({tp, pos.next});
    }
    return out;
  }
  for (const auto& tp : partitions) {
    const auto it = positions_.find(tp);
    if (it == positions_.end()) continue;
    it->second.dirty = false;
    out.push_back({tp, it->second.next});
  }
  return out;
}

void OffsetTracker::forget(std::span<const TopicPartition> partitions) {
  for (const auto& tp : partitions) positions_.erase(tp);
}

}  // namespace idem::detail
