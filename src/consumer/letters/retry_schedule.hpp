#pragma once
// Partitions waiting for a blocking retry or a retry-topic record's not-before: when
// each may be fetched again, and how many attempts the record that failed has had (for
// the backoff and `idem.attempts`). Where a partition resumes is not kept here: FetchGate
// resumes it at the record PartitionProgress expects next.
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "consumer/topic_partition.hpp"
#include "idem/retry.hpp"

namespace idem::detail {

class RetrySchedule {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  /// An attempt at `offset` of `tp` failed at `now`: the partition waits until
  /// now + backoff. Returns that delay. The attempt count grows while the offset
  /// stays the same and restarts at 1 for a new offset.
  std::chrono::milliseconds failed(const TopicPartition& tp, std::int64_t offset, TimePoint now,
                                   Backoff& backoff);

  /// A record of `tp` is not due before `resume_at` (a retry topic's not-before): the
  /// partition waits until then. Attempt counts are untouched.
  void defer(const TopicPartition& tp, TimePoint resume_at);

  /// Failed attempts so far at `offset` of `tp` (0 when none).
  [[nodiscard]] std::uint32_t attempts(const TopicPartition& tp, std::int64_t offset) const;

  /// The partition got past `next_offset - 1`: forget its retry history below that.
  void progressed(const TopicPartition& tp, std::int64_t next_offset);

  /// Waiting partitions whose time has come; they count as running again (their attempt
  /// count is kept until they progress).
  [[nodiscard]] std::vector<TopicPartition> take_due(TimePoint now);

  [[nodiscard]] bool paused(const TopicPartition& tp) const;
  [[nodiscard]] bool any_paused() const noexcept { return paused_count_ != 0; }
  /// When the next paused partition is due, or nullopt when none is paused.
  [[nodiscard]] std::optional<TimePoint> next_due() const;

  void forget(std::span<const TopicPartition> partitions);

 private:
  struct Entry {
    std::int64_t offset = 0;
    std::uint32_t attempts = 0;
    bool paused = false;
    TimePoint resume_at{};
  };
  std::unordered_map<TopicPartition, Entry, TopicPartitionHash> entries_;
  std::size_t paused_count_ = 0;
};

}  // namespace idem::detail
