#pragma once
// A (topic, partition) pair as a hashable value: the key of every per-partition state.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace idem::detail {

struct TopicPartition {
  std::string topic;
  std::int32_t partition = 0;

  friend bool operator==(const TopicPartition&, const TopicPartition&) = default;
};

/// A position in a partition: the offset of the next record to process (or commit).
struct PartitionOffset {
  TopicPartition tp;
  std::int64_t offset = 0;

  friend bool operator==(const PartitionOffset&, const PartitionOffset&) = default;
};

/// A group's committed offset of a partition as Kafka keeps it.
struct CommittedOffset {
  std::optional<std::int64_t> offset;  ///< nullopt: none committed
  std::string metadata;                ///< the string the commit carried beside the offset
};

struct TopicPartitionHash {
  std::size_t operator()(const TopicPartition& tp) const noexcept {
    return std::hash<std::string>{}(tp.topic) * 31u + static_cast<std::size_t>(tp.partition);
  }
};

}  // namespace idem::detail
