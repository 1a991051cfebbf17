#pragma once
// Per partition: the next offset to commit. Only the batch processor's "everything
// before this offset is done" positions enter it, so a commit never covers a record
// that was not processed (CONS-X1).
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "consumer/topic_partition.hpp"

namespace idem::detail {

class OffsetTracker {
 public:
  /// Everything in `tp` before `next_offset` is processed (DB committed, DLQ acknowledged).
  /// Positions only move forward.
  void advance(const TopicPartition& tp, std::int64_t next_offset);

  /// Positions that moved since the last take_dirty(), for an (async) commit.
  [[nodiscard]] std::vector<PartitionOffset> take_dirty();

  /// Every known position among `partitions` (all known ones when empty), for a
  /// synchronous commit on revoke or close; clears their dirty flag.
  [[nodiscard]] std::vector<PartitionOffset> positions(std::span<const TopicPartition> partitions);

  /// Drops the state of partitions this consumer no longer owns.
  void forget(std::span<const TopicPartition> partitions);

 private:
  struct Position {
    std::int64_t next = 0;
    bool dirty = false;
  };
  std::unordered_map<TopicPartition, Position, TopicPartitionHash> positions_;
};

}  // namespace idem::detail
