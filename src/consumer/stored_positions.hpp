#pragma once
// Offsets in the store (ConsumerConfig::offsets_in_store; docs/consumer-offsets.md): what
// the consumer does with the rows of idem_consumer_offsets besides writing them in each
// transaction (BatchProcessor::commit). It reads them at assignment, where they win over
// Kafka's committed offsets, and after the store connection was replaced, where they show
// how far a failover took the consumer's work back; it reports each disagreement (a log
// line, the offset_* counters of ConsumerStats); and it writes positions that moved with
// no transaction of their own (letters acknowledged after their transaction committed).
// It also tells Kafka, in the metadata of every offset commit, from which offset the store
// keeps each partition's row, so that a start without a row can tell a store that lost the
// row from one that never had it. Consumer::Impl does the seeking and the forgetting these
// decisions call for.
#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "consumer/batch_processor.hpp"
#include "consumer/partition_progress.hpp"
#include "consumer/topic_partition.hpp"
#include "idem/consumer.hpp"
#include "idem/consumer_offsets.hpp"
#include "idem/store.hpp"
#include "kafka/kafka_handle.hpp"

namespace idem::detail {

class StoredPositions {
 public:
  /// Everything must outlive this. `store` is the consumer's first connection.
  StoredPositions(const ConsumerConfig& config, Store& store, PartitionProgress& progress,
                  const LogFn& log)
      : config_(config), store_(store), progress_(progress), log_(log) {}

  [[nodiscard]] bool enabled() const noexcept { return config_.offsets_in_store; }

  /// The group's rows, read on the first connection; a transient failure is tried again
  /// up to `attempts` times in all (backoff of ConsumerConfig::retry), unless `stop` is
  /// set. \throws what the last attempt threw, or stopping_error when the store refuses
  /// for good (no table: `idem migrate` not run).
  [[nodiscard]] std::vector<StoredOffset> read(const std::atomic<bool>& stop,
                                               std::uint32_t attempts);

  /// After the store connection was replaced: the rows, read once; nullopt (logged) when
  /// the store does not answer. \throws stopping_error as read() does.
  [[nodiscard]] std::optional<std::vector<StoredOffset>> read_again();

  /// At assignment: where each of `partitions` starts (nullopt: at Kafka's committed
  /// offset, else auto.offset.reset). `kafka` holds Kafka's committed offsets with their
  /// metadata (empty entries: none, or unknown).
  ///  - A row: its next_offset (its letters are known as acknowledged); a disagreement
  ///    with Kafka's offset is logged and counted in `delta`.
  ///  - No row, and Kafka's offset was committed by a consumer with offsets in the store
  ///    (its metadata names the offset F the store kept the row from): the store lost the
  ///    row, as when a failover took back every transaction that wrote it (a new group's
  ///    or a new partition's first seconds). The start is F, never past anything the
  ///    failover took back; logged and counted.
  ///  - No row, and Kafka's offset without that metadata (a release before offsets in the
  ///    store, or Kafka's own tools): Kafka's offset, nothing read again.
  [[nodiscard]] std::vector<std::optional<std::int64_t>> starts(
      std::span<const TopicPartition> partitions, std::span<const StoredOffset> rows,
      std::span<const CommittedOffset> kafka, ConsumerStats& delta);

  /// The metadata of an offset commit of `tp`: `idem.store-from=F`, F the offset from
  /// which the store keeps the partition's row (where the partition stood when the store
  /// began keeping it); empty with offsets in the store off, or before anything of the
  /// partition was received.
  [[nodiscard]] std::string_view commit_metadata(const TopicPartition& tp);
  /// Drops what is known of `partitions` (revoked).
  void forget(std::span<const TopicPartition> partitions);

  /// After the store connection was replaced: where each of `owned` goes back to (its
  /// row's next_offset, or the first record received since its assignment when the store
  /// lost even the row), for those the consumer received anything of. Logged, and counted
  /// in `delta` where the consumer's position differs.
  [[nodiscard]] std::vector<PartitionOffset> rewinds(std::span<const TopicPartition> owned,
                                                     std::span<const StoredOffset> rows,
                                                     ConsumerStats& delta);
  /// Restores the rows of `partitions` (after PartitionProgress::forget of them).
  void restore(std::span<const TopicPartition> partitions, std::span<const StoredOffset> rows);

  /// Writes the positions that moved with no transaction (PartitionProgress::unstored)
  /// through `processor` (the first connection, nothing in flight on it). Returns false
  /// when its connection was replaced since the offsets were read (read them again).
  /// A failure is logged; the rows are written at the next call.
  bool write_unstored(BatchProcessor& processor);

 private:
  void report(const TopicPartition& tp, std::int64_t stored, std::int64_t other,
              std::string_view what, ConsumerStats& delta) const;

  const ConsumerConfig& config_;
  Store& store_;
  PartitionProgress& progress_;
  const LogFn& log_;
  /// Records F of `tp` as the metadata of its commits, formatted once: every offset commit
  /// (one per batch) reads it.
  void keep_from(const TopicPartition& tp, std::int64_t offset);

  /// Per partition owned, commit_metadata() (`idem.store-from=F`); absent until F is known.
  std::unordered_map<TopicPartition, std::string, TopicPartitionHash> kept_from_;
};

/// The offset F of `metadata` written by commit_metadata(), or nullopt when it is not one.
[[nodiscard]] std::optional<std::int64_t> store_kept_from(std::string_view metadata);

}  // namespace idem::detail
