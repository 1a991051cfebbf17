#pragma once
// Per partition, which received records are finished, and so how far the partition may
// be committed: up to (not including) its lowest unfinished offset (Confluent Parallel
// Consumer commits the same way; it also encodes the finished offsets above that in the
// commit metadata, which idem does not need: after a crash the records above are
// delivered again and their dedup marks make the repeat harmless). Also the count of
// records held per partition, for pausing a full partition. Offsets of a partition must be
// received in increasing order; gaps (compaction, transaction markers) are fine.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>

#include "consumer/topic_partition.hpp"

namespace idem::detail {

class ContiguousOffsets {
 public:
  /// `offset` of `tp` is held and unfinished. Returns false (and ignores it) when it is
  /// not above every offset received before (a record fetched again after a seek).
  bool received(const TopicPartition& tp, std::int64_t offset);

  /// `offset` of `tp` is finished (committed, dead-lettered or a duplicate). Unknown
  /// offsets are ignored.
  void finished(const TopicPartition& tp, std::int64_t offset);

  /// The offset to commit for `tp`: one past the end of its contiguous finished prefix;
  /// nullopt before the first received record is finished.
  [[nodiscard]] std::optional<std::int64_t> commit_position(const TopicPartition& tp) const;

  /// Received and not finished, or finished but above an unfinished one.
  [[nodiscard]] std::size_t held(const TopicPartition& tp) const;

  /// One past the highest offset received; nullopt when nothing was received.
  [[nodiscard]] std::optional<std::int64_t> next_expected(const TopicPartition& tp) const;

  void forget(std::span<const TopicPartition> partitions);

 private:
  struct Window {
    std::map<std::int64_t, bool> held;  // offset -> finished
    std::int64_t commit = -1;           // one past the finished prefix; -1: none yet
    std::int64_t next = -1;             // one past the highest received
  };
  std::unordered_map<TopicPartition, Window, TopicPartitionHash> windows_;
};

}  // namespace idem::detail
