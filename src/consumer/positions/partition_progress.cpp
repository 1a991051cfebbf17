#include "consumer/positions/partition_progress.hpp"

#include <algorithm>

namespace idem::detail {

void PartitionProgress::advance(Window& w, std::int64_t to) {
  if (to <= w.commit) return;
  w.commit = to;
  w.moved = true;
  w.letters.erase(w.letters.begin(), w.letters.lower_bound(to));
}

bool PartitionProgress::received(const TopicPartition& tp, std::int64_t offset) {
  Window& w = windows_[tp];
  if (w.expected >= 0 && offset < w.expected) return false;
  if (w.first < 0) w.first = offset;
  w.held.emplace(offset, false);
  w.expected = offset + 1;
  return true;
}

void PartitionProgress::done(const TopicPartition& tp, std::int64_t offset) {
  const auto it = windows_.find(tp);
  if (it == windows_.end()) return;
  Window& w = it->second;
  const auto at = w.held.find(offset);
  if (at == w.held.end()) return;
  at->second = true;
  while (!w.held.empty() && w.held.begin()->second) {
    advance(w, w.held.begin()->first + 1);
    w.held.erase(w.held.begin());
  }
}

void PartitionProgress::rewind(const TopicPartition& tp, std::int64_t offset) {
  Window& w = windows_[tp];
  w.held.erase(w.held.lower_bound(offset), w.held.end());
  w.expected = offset;
}

std::optional<std::int64_t> PartitionProgress::settle_batch(
    const PartitionOutcome& outcome, std::span<const std::int64_t> refused_letters) {
  // A letter the broker did not acknowledge is not done: the partition goes back to its
  // record, so a bad message is never lost.
  std::optional<std::int64_t> again = outcome.retry_at;
  for (const std::int64_t offset : refused_letters)
    again = std::min(again.value_or(offset), offset);
  const std::int64_t end = again ? std::min(outcome.decided_end, *again) : outcome.decided_end;
  Window& w = windows_[outcome.tp];
  if (w.first < 0) w.first = outcome.first_offset;
  if (w.held.empty()) {
    // The common case, in O(1): the batch's records of the partition follow what was
    // done before, so the done prefix ends where the batch's done records end.
    if (end > outcome.first_offset) advance(w, end);
    w.expected = std::max(w.expected, end);
  } else {
    for (std::int64_t offset = outcome.first_offset; offset < end; ++offset) {
      if (received(outcome.tp, offset)) done(outcome.tp, offset);
    }
  }
  if (again) rewind(outcome.tp, *again);
  return again;
}

void PartitionProgress::acknowledge_letter(const TopicPartition& tp, std::int64_t offset) {
  Window& w = windows_[tp];
  if (offset >= w.commit) w.letters.insert(offset);
}

bool PartitionProgress::letter_acknowledged(const TopicPartition& tp, std::int64_t offset) const {
  const auto it = windows_.find(tp);
  return it != windows_.end() && it->second.letters.contains(offset);
}

std::vector<std::int64_t> PartitionProgress::letters_from(const Window& w, std::int64_t from) {
  return {w.letters.lower_bound(from), w.letters.end()};
}

std::optional<StoredOffset> PartitionProgress::row_after(
    const TopicPartition& tp, std::span<const std::int64_t> done_on_commit) const {
  const auto it = windows_.find(tp);
  const Window none;
  const Window& w = it == windows_.end() ? none : it->second;
  // The records held and those the transaction decides, in offset order: the position
  // moves over each done one and stops at the first that is not (a gap between them is
  // the log's own, as in done()).
  std::int64_t position = w.commit;
  auto held = w.held.begin();
  auto decided = done_on_commit.begin();
  while (held != w.held.end() || decided != done_on_commit.end()) {
    std::int64_t offset = 0;
    bool done = true;
    if (decided == done_on_commit.end() || (held != w.held.end() && held->first < *decided)) {
      offset = held->first;
      done = held->second;
      ++held;
    } else {
      offset = *decided;
      if (held != w.held.end() && held->first == offset) ++held;
      ++decided;
    }
    if (offset < position) continue;
    if (!done) {
      if (position < 0) position = offset;
      break;
    }
    position = offset + 1;
  }
  if (position < 0) return std::nullopt;
  return StoredOffset{tp.topic, tp.partition, position, letters_from(w, position), {}};
}

std::optional<std::int64_t> PartitionProgress::first_seen(const TopicPartition& tp) const {
  const auto it = windows_.find(tp);
  if (it == windows_.end() || it->second.first < 0) return std::nullopt;
  return it->second.first;
}

std::optional<std::int64_t> PartitionProgress::commit_position(const TopicPartition& tp) const {
  const auto it = windows_.find(tp);
  if (it == windows_.end() || it->second.commit < 0) return std::nullopt;
  return it->second.commit;
}

std::size_t PartitionProgress::held(const TopicPartition& tp) const {
  const auto it = windows_.find(tp);
  return it == windows_.end() ? 0 : it->second.held.size();
}

std::optional<std::int64_t> PartitionProgress::next_expected(const TopicPartition& tp) const {
  const auto it = windows_.find(tp);
  if (it == windows_.end() || it->second.expected < 0) return std::nullopt;
  return it->second.expected;
}

std::vector<PartitionOffset> PartitionProgress::take_moved() {
  std::vector<PartitionOffset> out;
  for (auto& [tp, w] : windows_) {
    if (!w.moved) continue;
    w.moved = false;
    out.push_back({tp, w.commit});
  }
  return out;
}

std::vector<PartitionOffset> PartitionProgress::positions(
    std::span<const TopicPartition> partitions) {
  std::vector<PartitionOffset> out;
  const auto take = [&](const TopicPartition& tp, Window& w) {
    if (w.commit < 0) return;
    w.moved = false;
    out.push_back({tp, w.commit});
  };
  if (partitions.empty()) {
    for (auto& [tp, w] : windows_) take(tp, w);
    return out;
  }
  for (const auto& tp : partitions) {
    if (const auto it = windows_.find(tp); it != windows_.end()) take(tp, it->second);
  }
  return out;
}

void PartitionProgress::forget(std::span<const TopicPartition> partitions) {
  for (const auto& tp : partitions) windows_.erase(tp);
}

}  // namespace idem::detail
