#pragma once
// Where each partition of the consumer stands: the one owner of that decision
// (docs/consumer-offsets.md). It holds
//   - the progress of each partition (PartitionProgress: the records held, done and
//     expected next, the letters acknowledged, the commit position);
//   - with offsets in the store (ConsumerConfig::offsets_in_store), the rows of
//     idem_consumer_offsets: what each transaction writes (rows_after(), write()), what
//     the store holds (committed()), the positions that moved with no transaction of
//     their own (write_moved(): letters acknowledged after their transaction committed);
//   - where an assigned partition starts (starts(): the stored row wins over Kafka's
//     committed offset; without a row, the metadata of Kafka's commit tells a store that
//     lost the row from one that never had it);
//   - the reconnect check: the store connections whose transactions write rows, whether
//     one was replaced since the rows were read (then nothing commits on it, and the
//     consumer goes back to the rows read again: a failover may have taken back what it
//     counts as done), and when an idle consumer looks at them (IdleStoreCheck);
//   - the next offset to process of each partition, for lag().
// The consumer sequences (reads Kafka's offsets, settles what is in flight, seeks through
// the FetchGate); every decision about a position is made here. Only the run() thread
// calls it, but for replaced() and unverified() (a background commit) and next_to_process()
// (any thread).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "consumer/positions/idle_store_check.hpp"
#include "consumer/positions/partition_progress.hpp"
#include "consumer/topic_partition.hpp"
#include "idem/consumer.hpp"
#include "idem/consumer_offsets.hpp"
#include "idem/kafka/kafka_handle.hpp"
#include "idem/store.hpp"

namespace idem::detail {

class PartitionPositions {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  /// Everything must outlive this. `store` is the consumer's first connection.
  PartitionPositions(const ConsumerConfig& config, Store& store, const LogFn& log);

  /// Whether positions are kept in the store (ConsumerConfig::offsets_in_store).
  [[nodiscard]] bool in_store() const noexcept { return in_store_; }
  [[nodiscard]] PartitionProgress& progress() noexcept { return progress_; }
  [[nodiscard]] const PartitionProgress& progress() const noexcept { return progress_; }

  // ---- Connections whose transactions write rows (the reconnect check).

  /// `connection` writes rows in its transactions (a BatchProcessor's store); it must
  /// outlive this or be unwatched as often as it was watched. Only while nothing commits.
  void watch(Store& connection);
  void unwatch(const Store& connection) noexcept;
  /// Whether `connection` was replaced since the rows were last read (verified()); always
  /// false without offsets in the store. Any thread, while verified() is not running.
  [[nodiscard]] bool replaced(const Store& connection) const noexcept;
  /// A transaction did not commit because its connection was replaced: the rows are read
  /// again (resync_due()). Any thread.
  void unverified() noexcept { resync_due_.store(true, std::memory_order_relaxed); }
  [[nodiscard]] bool resync_due() const noexcept {
    return resync_due_.load(std::memory_order_relaxed);
  }
  /// Records were polled in the turn that began at `now` (IdleStoreCheck).
  void records_polled(TimePoint now) noexcept { idle_check_.records_polled(now); }
  /// Idle: when the look is due, looks at every connection (a broken one is replaced:
  /// Store::begin_read, rolled back unused); one replaced since the rows were read makes
  /// a resync due. Only while nothing is in flight on any of them.
  void idle_look(TimePoint now);

  // ---- Where assigned partitions start.

  /// The group's rows, read on the first connection; a transient failure is tried again
  /// up to `attempts` times in all (backoff of ConsumerConfig::retry), unless `stop` is
  /// set. \throws what the last attempt threw, or stopping_error when the store refuses
  /// for good (no table: `idem migrate` not run).
  [[nodiscard]] std::vector<StoredOffset> read(const std::atomic<bool>& stop,
                                               std::uint32_t attempts);
  /// At assignment, with the rows just read: where each of `partitions` starts (nullopt:
  /// at Kafka's committed offset, else auto.offset.reset). `kafka` holds Kafka's committed
  /// offsets with their metadata (empty entries: none, or unknown).
  ///  - A row: its next_offset (its letters are known as acknowledged); a disagreement
  ///    with Kafka's offset is logged and counted in `delta`.
  ///  - No row, and Kafka's offset was committed by a consumer with offsets in the store
  ///    (its metadata names the offset F the store kept the row from): the store lost the
  ///    row, as when a failover took back every transaction that wrote it (a new group's
  ///    or a new partition's first seconds). The start is F, never past anything the
  ///    failover took back; logged and counted.
  ///  - No row, and Kafka's offset without that metadata (a release before offsets in the
  ///    store, or Kafka's own tools): Kafka's offset, nothing read again.
  /// Every connection then counts as verified. Starts Kafka disagrees with are kept for
  /// take_start_commits().
  [[nodiscard]] std::vector<std::optional<std::int64_t>> starts(
      std::span<const TopicPartition> partitions, std::span<const StoredOffset> rows,
      std::span<const CommittedOffset> kafka, ConsumerStats& delta);
  /// The starts that differ from Kafka's committed offsets, once: committed to Kafka so
  /// that lag tools, which read Kafka's, follow the store.
  [[nodiscard]] std::vector<PartitionOffset> take_start_commits() {
    return std::exchange(start_commits_, {});
  }
  /// The metadata of an offset commit of `tp`: `idem.store-from=F`, F the offset from
  /// which the store keeps the partition's row (where the partition stood when the store
  /// began keeping it); empty with offsets in the store off, or before anything of the
  /// partition was received.
  [[nodiscard]] std::string_view commit_metadata(const TopicPartition& tp);

  // ---- The rows of a transaction.

  /// The rows a transaction deciding `outcomes` writes (PartitionProgress::row_after of
  /// each, less those the store holds already); nullopt without offsets in the store.
  [[nodiscard]] std::optional<std::vector<StoredOffset>> rows_after(
      std::span<const PartitionOutcome> outcomes) const;
  /// Writes `rows` in `tx` (deferred: they go with the transaction's next round trip).
  void write(Transaction& tx, std::span<const StoredOffset> rows) const;
  /// A transaction that wrote `rows` committed: the store holds them.
  void committed(std::span<const StoredOffset> rows);
  /// With nothing in flight: writes, on the first connection, the positions that moved
  /// with no transaction (letters acknowledged after theirs committed). A connection
  /// replaced since the rows were read writes nothing and makes a resync due; a failure is
  /// logged and the rows are written at the next call. \throws stopping_error when the
  /// store refuses for good.
  void write_moved();

  // ---- Kafka's commits and lag.

  /// Commit positions that moved since the last call (for an asynchronous commit); they
  /// are the next offsets to process from now on.
  [[nodiscard]] std::vector<PartitionOffset> take_moved();
  /// The commit positions of `partitions` (every known one when empty), for a synchronous
  /// commit on revoke or close.
  [[nodiscard]] std::vector<PartitionOffset> positions(std::span<const TopicPartition> partitions) {
    return progress_.positions(partitions);
  }
  /// The next offset to process of `tp` as last committed, for lag(); any thread.
  [[nodiscard]] std::optional<std::int64_t> next_to_process(const TopicPartition& tp) const;

  // ---- Going back after a replaced connection, and revokes.

  /// After the store connection was replaced: the rows, read once; nullopt (logged) when
  /// the store does not answer. \throws stopping_error as read() does.
  [[nodiscard]] std::optional<std::vector<StoredOffset>> read_again();
  /// With the rows read again: where each of `owned` goes back to (its row's next_offset,
  /// or the first record received since its assignment when the store lost even the row),
  /// for those the consumer received anything of; logged, and counted in `delta` where the
  /// consumer's position differs. Those partitions start afresh from there (as if revoked
  /// and assigned again, with no commit in between), every connection counts as verified
  /// and the resync is done. The caller rewinds them (FetchGate::rewind).
  [[nodiscard]] std::vector<PartitionOffset> go_back(std::span<const TopicPartition> owned,
                                                     std::span<const StoredOffset> rows,
                                                     ConsumerStats& delta);
  /// Drops what is known of `partitions` (revoked).
  void forget(std::span<const TopicPartition> partitions);

 private:
  /// What is known of a partition's row.
  struct Kept {
    std::optional<StoredOffset> held;  ///< what the store holds, as far as known
    std::string metadata;              ///< commit_metadata(), formatted once; empty: F unknown
  };
  struct Watched {
    Store* connection = nullptr;
    std::uint64_t verified_reconnects = 0;  ///< its reconnects() when the rows were read
    std::uint32_t watchers = 1;             ///< watch() calls not yet undone
  };

  void verified() noexcept;
  /// Looks at every connection as the start of a transaction does (Store::begin_read,
  /// rolled back unused: a broken one is replaced); whether one was replaced since the rows
  /// were read.
  bool look_at_connections();
  /// Takes `row` as what the store holds, its letters as acknowledged.
  void restore(const StoredOffset& row);
  void keep_from(const TopicPartition& tp, std::int64_t offset);
  void report(const TopicPartition& tp, std::int64_t stored, std::int64_t other,
              std::string_view what, ConsumerStats& delta) const;

  const ConsumerConfig& config_;
  Store& store_;
  const LogFn& log_;
  const bool in_store_;
  PartitionProgress progress_;
  std::unordered_map<TopicPartition, Kept, TopicPartitionHash> kept_;
  std::vector<PartitionOffset> start_commits_;
  std::vector<Watched> watched_;
  std::atomic<bool> resync_due_{false};
  IdleStoreCheck idle_check_;
  // Next offset to process per partition, for lag(), read from other threads.
  mutable std::mutex next_mutex_;
  std::unordered_map<TopicPartition, std::int64_t, TopicPartitionHash> next_to_process_;
};

/// The offset F of `metadata` written by commit_metadata(), or nullopt when it is not one.
[[nodiscard]] std::optional<std::int64_t> store_kept_from(std::string_view metadata);

}  // namespace idem::detail
