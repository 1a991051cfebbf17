#pragma once
// The effect path's bound on records held per partition (PartitionProgress counts them).
// A partition that holds ConsumerConfig::max_buffered_per_partition records is held by
// the FetchGate at the record after its last one held (librdkafka purges what it had
// fetched beyond) until it holds half as many; the gate resumes it then, unless a retry
// holds it too.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_set>

#include "consumer/intake/fetch_gate.hpp"
#include "consumer/positions/partition_progress.hpp"

namespace idem::detail {

class PartitionWindows {
 public:
  PartitionWindows(FetchGate& gate, PartitionProgress& progress, std::size_t limit)
      : gate_(gate), progress_(progress), limit_(limit) {}

  /// Holds `offset` of `tp`; false when the record must be dropped (fetched again after a
  /// seek: it comes back in order). Records of held partitions never get here
  /// (FetchGate::drop_held).
  bool admit(const TopicPartition& tp, std::int64_t offset);
  /// Holds `tp` in the gate if it is full.
  void pause_if_full(const TopicPartition& tp);
  /// Releases the partitions that drained to half.
  void resume_drained();
  void forget(std::span<const TopicPartition> partitions);

 private:
  FetchGate& gate_;
  PartitionProgress& progress_;
  std::size_t limit_;
  std::unordered_set<TopicPartition, TopicPartitionHash> full_;  // held here for Buffer
};

}  // namespace idem::detail
