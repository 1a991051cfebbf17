#include "consumer/contiguous_offsets.hpp"

namespace idem::detail {

bool ContiguousOffsets::received(const TopicPartition& tp, std::int64_t offset) {
  Window& w = windows_[tp];
  if (w.next >= 0 && offset < w.next) return false;
  w.held.emplace(offset, false);
  w.next = offset + 1;
  return true;
}

void ContiguousOffsets::finished(const TopicPartition& tp, std::int64_t offset) {
  const auto it = windows_.find(tp);
  if (it == windows_.end()) return;
  Window& w = it->second;
  const auto at = w.held.find(offset);
  if (at == w.held.end()) return;
  at->second = true;
  while (!w.held.empty() && w.held.begin()->second) {
    w.commit = w.held.begin()->first + 1;
    w.held.erase(w.held.begin());
  }
}

std::optional<std::int64_t> ContiguousOffsets::commit_position(const TopicPartition& tp) const {
  const auto it = windows_.find(tp);
  if (it == windows_.end() || it->second.commit < 0) return std::nullopt;
  return it->second.commit;
}

std::size_t ContiguousOffsets::held(const TopicPartition& tp) const {
  const auto it = windows_.find(tp);
  return it == windows_.end() ? 0 : it->second.held.size();
}

std::optional<std::int64_t> ContiguousOffsets::next_expected(const TopicPartition& tp) const {
  const auto it = windows_.find(tp);
  if (it == windows_.end() || it->second.next < 0) return std::nullopt;
  return it->second.next;
}

void ContiguousOffsets::forget(std::span<const TopicPartition> partitions) {
  for (const auto& tp : partitions) windows_.erase(tp);
}

}  // namespace idem::detail
