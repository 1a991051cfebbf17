#pragma once
// How far each partition got: the one place that decides, per partition, the next offset
// to commit, for the batch path and the effect path alike (CONS-X1: a commit never covers
// a record that is not finished).
//
// A partition's records are received in offset order. Each is then done (handled, a
// duplicate, skipped, or dead-lettered with the letter acknowledged by the broker), or it
// is to be fetched again from its offset (a retry, a letter the broker refused, a record
// the consumer could not hold). The commit position is one past the partition's
// contiguous prefix of done records: Confluent Parallel Consumer commits the same way (it
// also encodes the done offsets above that in the commit metadata, which idem does not
// need: after a crash those records are delivered again and their dedup marks make the
// repeat harmless).
//
// The record expected next is tracked across rewinds: a record below it is one fetched
// before the rewind took effect and is refused; a record above it is a gap of the log
// (compaction, transaction markers). So every record the consumer drops must be rewound
// to, or the gap it leaves would be taken for the log's own.
//
// Where a partition would stand once a transaction commits (row_after): the done prefix
// extended over the records the transaction decides, stopping at the first record whose
// letter is not yet acknowledged, plus the letters acknowledged above that position, so a
// restart neither reads those records as undone nor sends their letters again.
// PartitionPositions, which owns this class, decides what of that the store is to hold.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "consumer/topic_partition.hpp"
#include "idem/consumer_offsets.hpp"

namespace idem::detail {

/// What became of one partition's records in a batch transaction (BatchProcessor).
struct PartitionOutcome {
  TopicPartition tp;
  std::int64_t first_offset = 0;  ///< its first record in the batch
  /// One past the last record decided: handled, a duplicate, skipped or dead-lettered (a
  /// dead letter counts as done once the broker acknowledged it: settle_batch()).
  std::int64_t decided_end = 0;
  /// Set when the partition must be fetched again from this offset (a retry).
  std::optional<std::int64_t> retry_at;
  /// The records done once the transaction commits (applied, duplicates, skipped), in
  /// offset order, up to the first one that is not: a letter (done only once the broker
  /// acknowledged it) or a retry. What PartitionProgress::row_after() takes.
  std::vector<std::int64_t> done_on_commit;
};

class PartitionProgress {
 public:
  /// `offset` of `tp` was delivered and is held until done. False (and ignored) when it is
  /// below the record expected next: fetched before a rewind took effect.
  bool received(const TopicPartition& tp, std::int64_t offset);

  /// The held record at `offset` of `tp` is done. Unknown offsets are ignored.
  void done(const TopicPartition& tp, std::int64_t offset);

  /// `tp` will be fetched again from `offset`: records held at or above it are dropped and
  /// `offset` is the record expected next.
  void rewind(const TopicPartition& tp, std::int64_t offset);

  /// A batch's outcome for one partition, with the offsets of that partition whose
  /// letters the broker refused: the records before the first refusal or retry are done.
  /// Returns where the partition must be fetched again from (the retry or the first
  /// refused letter, whichever comes first), having rewound it there; nullopt when the
  /// whole batch of it is done.
  std::optional<std::int64_t> settle_batch(const PartitionOutcome& outcome,
                                           std::span<const std::int64_t> refused_letters);

  /// The letter of the record at `offset` of `tp` (a dead letter or a retry-topic letter)
  /// was acknowledged by the broker: the record counts as such until the done prefix
  /// passes it, in what is stored and for letter_acknowledged().
  void acknowledge_letter(const TopicPartition& tp, std::int64_t offset);
  /// Whether the letter of that record was acknowledged (by this process, or before a
  /// restart as the store said): it is not to be sent again.
  [[nodiscard]] bool letter_acknowledged(const TopicPartition& tp, std::int64_t offset) const;

  /// Where `tp` stands once a transaction commits in which the records `done_on_commit`
  /// (ascending; none of them a letter) become done: one past the done prefix extended
  /// over them, and the acknowledged letters above it. nullopt when no position is known.
  [[nodiscard]] std::optional<StoredOffset> row_after(
      const TopicPartition& tp, std::span<const std::int64_t> done_on_commit) const;
  /// Calls `f(tp)` for every partition with a window (received, settled, rewound to or
  /// with letters). Without copying them: the consumer's loop asks at every turn.
  template <class F>
  void for_each_partition(F&& f) const {
    for (const auto& entry : windows_) f(entry.first);
  }
  /// The first record of `tp` received or settled since it was assigned (or forgotten).
  [[nodiscard]] std::optional<std::int64_t> first_seen(const TopicPartition& tp) const;

  /// One past the end of the contiguous done prefix; nullopt before the first is done.
  [[nodiscard]] std::optional<std::int64_t> commit_position(const TopicPartition& tp) const;
  /// Received and not yet in the done prefix.
  [[nodiscard]] std::size_t held(const TopicPartition& tp) const;
  /// The record expected next; nullopt when nothing was received (or rewound to) yet.
  [[nodiscard]] std::optional<std::int64_t> next_expected(const TopicPartition& tp) const;

  /// Commit positions that moved since the last call (for an asynchronous commit).
  [[nodiscard]] std::vector<PartitionOffset> take_moved();
  /// The commit positions of `partitions` (of every known partition when empty), for a
  /// synchronous commit on revoke or close; they count as taken.
  [[nodiscard]] std::vector<PartitionOffset> positions(std::span<const TopicPartition> partitions);

  /// Drops the state of partitions this consumer no longer owns.
  void forget(std::span<const TopicPartition> partitions);

 private:
  struct Window {
    std::map<std::int64_t, bool> held;  // offset -> done, above the done prefix
    std::int64_t commit = -1;           // one past the done prefix; -1: none yet
    std::int64_t expected = -1;         // the record expected next; -1: any
    bool moved = false;                 // commit moved since taken
    std::int64_t first = -1;            // the first record seen; -1: none yet
    std::set<std::int64_t> letters;     // acknowledged letters at or above commit
  };
  [[nodiscard]] static std::vector<std::int64_t> letters_from(const Window& w, std::int64_t from);
  void advance(Window& w, std::int64_t to);
  std::unordered_map<TopicPartition, Window, TopicPartitionHash> windows_;
};

}  // namespace idem::detail
