#pragma once
// The effect path's bound on records held per partition (PartitionProgress counts them).
// A partition that holds
// ConsumerConfig::max_buffered_per_partition records pauses at the record after its last
// one held (librdkafka purges what it had fetched beyond) and resumes there once it holds
// half as many.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_set>

#include "consumer/fetch_control.hpp"
#include "consumer/partition_progress.hpp"

namespace idem::detail {

class PartitionWindows {
 public:
  PartitionWindows(FetchControl& poll, PartitionProgress& progress, std::size_t limit)
      : poll_(poll), progress_(progress), limit_(limit) {}

  /// Holds `offset` of `tp`; false when the record must be dropped (its partition is
  /// paused, or it was fetched again after a seek: it comes back in order).
  bool admit(const TopicPartition& tp, std::int64_t offset);
  /// Pauses `tp` if it is full.
  void pause_if_full(const TopicPartition& tp);
  /// Resumes paused partitions that drained to half.
  void resume_drained();
  void forget(std::span<const TopicPartition> partitions);

 private:
  FetchControl& poll_;
  PartitionProgress& progress_;
  std::size_t limit_;
  std::unordered_set<TopicPartition, TopicPartitionHash> paused_;
};

}  // namespace idem::detail
