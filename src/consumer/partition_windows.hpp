#pragma once
// The effect path's per-partition window: ContiguousOffsets (what may be committed) plus
// the bound on records held per partition. A partition that holds
// ConsumerConfig::max_buffered_per_partition records pauses at the record after its last
// one held (librdkafka purges what it had fetched beyond) and resumes there once it holds
// half as many.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_set>

#include "consumer/contiguous_offsets.hpp"
#include "consumer/poll_loop.hpp"

namespace idem::detail {

class PartitionWindows {
 public:
  PartitionWindows(PollLoop& poll, std::size_t limit) : poll_(poll), limit_(limit) {}

  /// Holds `offset` of `tp`; false when the record must be dropped (its partition is
  /// paused, or it was fetched again after a seek: it comes back in order).
  bool admit(const TopicPartition& tp, std::int64_t offset);
  void finished(const TopicPartition& tp, std::int64_t offset) { offsets_.finished(tp, offset); }
  [[nodiscard]] std::optional<std::int64_t> commit_position(const TopicPartition& tp) const {
    return offsets_.commit_position(tp);
  }
  /// Pauses `tp` if it is full.
  void pause_if_full(const TopicPartition& tp);
  /// Resumes paused partitions that drained to half.
  void resume_drained();
  void forget(std::span<const TopicPartition> partitions);

 private:
  PollLoop& poll_;
  std::size_t limit_;
  ContiguousOffsets offsets_;
  std::unordered_set<TopicPartition, TopicPartitionHash> paused_;
};

}  // namespace idem::detail
