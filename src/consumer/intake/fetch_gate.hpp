#pragma once
// Whether each partition may be fetched now: the one owner of pausing and resuming.
//
// A partition is held for one or more reasons at once: the effect path holds as many of
// its records as it may (PartitionWindows), or a record of it is not to be processed yet
// (a blocking retry's backoff, a retry-topic record's not-before: the RetrySchedule kept
// here). It is paused by the first hold and resumed only when no reason is left, and
// then at the record PartitionProgress expects next. Records that arrive for a held
// partition anyway (fetched before the pause took effect) are dropped, and a hold never
// moves the expected record forward, so whatever was dropped is fetched again at the
// resume: a record is never skipped because two reasons paused and resumed its partition
// independently, and a seek never makes a gap of its own (every gap PartitionProgress
// sees is one of the log: compaction, transaction markers).
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "consumer/intake/fetch_control.hpp"
#include "consumer/letters/retry_schedule.hpp"
#include "consumer/letters/retry_topics.hpp"
#include "consumer/positions/partition_progress.hpp"
#include "consumer/topic_partition.hpp"
#include "idem/kafka/kafka_handle.hpp"
#include "idem/retry.hpp"

namespace idem::detail {

class FetchGate {
 public:
  using TimePoint = RetrySchedule::TimePoint;

  /// Why a partition is held.
  enum class Hold : std::uint8_t {
    Buffer = 1,  ///< the effect path holds as many of its records as it may
    Retry = 2,   ///< a record of it is not due yet (RetrySchedule)
  };

  /// `fetch` and `progress` must outlive the gate. `retry` spaces the blocking retries.
  FetchGate(FetchControl& fetch, PartitionProgress& progress, const RetryPolicy& retry = {})
      : fetch_(fetch), progress_(progress), backoff_(retry) {}

  /// Holds `tp` for `why` from `at` on (at or after the record PartitionProgress expects
  /// next): it is paused there. The expected record does not move: records before `at`
  /// that are not received yet still are (the rest of the batch that found `at` not due),
  /// and the resume is at whatever is expected then.
  void hold(const TopicPartition& tp, Hold why, std::int64_t at);
  /// Ends the hold `why` of `tp`; with no other hold left, resumes it at the record
  /// PartitionProgress expects next.
  void release(const TopicPartition& tp, Hold why);
  [[nodiscard]] bool held(const TopicPartition& tp) const;
  [[nodiscard]] bool held(const TopicPartition& tp, Hold why) const;
  /// Removes the records of held partitions from `batch`: they come again when resumed.
  void drop_held(std::vector<KafkaMessage>& batch) const;
  /// Makes a waiting poll return promptly. Thread-safe.
  void wake() noexcept { fetch_.wake(); }

  /// A blocking retry of the record at `offset` of `tp` (PartitionProgress already
  /// rewound there): holds the partition until now + the backoff of its attempts so far.
  /// Returns the delay.
  std::chrono::milliseconds retry_later(const TopicPartition& tp, std::int64_t offset,
                                        TimePoint now);
  /// Retry-topic records of `batch` whose not-before is after `wall_now_ms`: each such
  /// partition is held from its first one until that is due, and that record and the
  /// partition's later ones leave the batch (they come again); its earlier ones stay.
  void defer_not_due(std::vector<KafkaMessage>& batch, const RetryTopicMap& retry_topics,
                     std::int64_t wall_now_ms, TimePoint now);
  /// Ends the retry holds whose time has come.
  void release_due(TimePoint now);
  /// The partition got past `next_offset - 1`: forget its retry history below that.
  void progressed(const TopicPartition& tp, std::int64_t next_offset) {
    schedule_.progressed(tp, next_offset);
  }
  /// Failed attempts so far (for `idem.attempts`).
  [[nodiscard]] const RetrySchedule& schedule() const noexcept { return schedule_; }
  /// When the next retry hold ends, or nullopt.
  [[nodiscard]] std::optional<TimePoint> next_due() const { return schedule_.next_due(); }

  /// Drops everything of partitions this consumer no longer owns (librdkafka resumes them
  /// at their next assignment).
  void forget(std::span<const TopicPartition> partitions);
  /// Takes each partition of `to` back to its offset, as if it were revoked and assigned
  /// there again (PartitionProgress forgot it first): its holds and retry history are
  /// dropped, and it is paused, rewound (what was fetched beyond is purged) and resumed.
  void rewind(std::span<const PartitionOffset> to);

 private:
  struct Held {
    std::uint8_t reasons = 0;  // Hold bits
    std::int64_t at = 0;       // where it was paused: the resume when nothing was received
  };
  FetchControl& fetch_;
  PartitionProgress& progress_;
  Backoff backoff_;
  RetrySchedule schedule_;
  std::unordered_map<TopicPartition, Held, TopicPartitionHash> held_;
};

}  // namespace idem::detail
