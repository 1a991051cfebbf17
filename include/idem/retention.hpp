#pragma once
/// \file
/// Retention of the dedup table, the outbox and other idem tables (IDEM-2 TTL).
///
/// Dedup rows age by **event time** (the UUIDv7 timestamp of event_id), the clock the
/// dedup-horizon guard uses, never by processed_at:
///  - PostgreSQL, `processed_event` RANGE-partitioned on event_id: maintenance creates
///    partitions `partitions_ahead` periods ahead of now, and DROPs a partition only
///    when its upper bound is at or below the retention horizon, i.e. when every event
///    it can hold was born before `now - retention`. Rows in the DEFAULT partition (ids
///    outside every partition: a producer clock far ahead, or events older than the
///    oldest partition) are moved into a partition when one is created for their
///    range, and expired ones are deleted in batches like the unpartitioned table.
///  - Unpartitioned PostgreSQL and SQLite: `DELETE` of expired rows in bounded batches,
///    each its own short transaction, so no long lock is held and consumers keep going.
///  - Published outbox rows are deleted in batches the same way, by published_at.
///
/// One maintenance run at a time per database across processes: a session advisory
/// lock on PostgreSQL, a lease row (`idem_lease`) on SQLite. A run that finds the lock
/// held does nothing and says so.
///
/// One dedup retention per store (docs/retention.md): every consumer declares in the
/// store the retention its dedup horizon relies on (DedupRetentionDeclaration) and
/// renews it while it runs; a pass keeps marks for the longest live declaration when
/// that is longer than its own policy, and records what it dropped (DroppedDedupMarks),
/// which consumers read so an event whose mark may be gone is never executed again.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idem/clock.hpp"
#include "idem/dedup_horizon.hpp"
#include "idem/store.hpp"

namespace idem {

/// What to keep and how to clean. Plain data; validated by run_maintenance().
struct RetentionPolicy {
  /// Dedup retention (event time) and the horizon derived from it.
  DedupHorizon dedup;
  /// Published outbox rows older than this (by published_at) are deleted; 0 = keep all.
  std::chrono::milliseconds outbox_retention{std::chrono::hours(24)};
  /// Rows per DELETE statement (and transaction).
  std::size_t batch_size = 5000;
  /// Pause between two batches, so a busy database gets room; 0 = none.
  std::chrono::milliseconds batch_pause{0};
  /// At most this many batches per table per run (bounds a run's length); 0 = no limit.
  std::size_t max_batches = 0;
  /// Partitioned PostgreSQL: the period of partitions created ahead (must match the
  /// period the table was created with, see MigrateOptions::partition_period).
  std::chrono::hours partition_period{24};
  /// Partitioned PostgreSQL: periods after the current one that must have a partition.
  int partitions_ahead = 3;
  const Clock* clock = &SystemClock::instance();
};

/// A consumer group's statement that it relies on dedup marks of events born within
/// `retention` (event time); maintenance keeps them until the declaration expires,
/// `retention` after its last renewal: by then every event the group marked before it
/// stopped is past the group's own horizon, so nothing it could still rely on goes.
struct DedupRetentionDeclaration {
  std::string consumer_group;
  std::chrono::milliseconds retention{0};
  std::string declared_by;  ///< host and pid of the process that renewed it last
  std::chrono::sys_time<std::chrono::milliseconds> renewed_at{};

  [[nodiscard]] std::chrono::sys_time<std::chrono::milliseconds> expires_at() const noexcept {
    return renewed_at + retention;
  }
};

/// A running consumer renews its declaration at least this often (more often for a
/// retention under an hour), so one renewed less than two of these ago is still in use.
inline constexpr std::chrono::minutes kDedupRetentionRenewal{10};

/// What maintenance has dropped so far: marks of events born before `born_before` may be
/// gone (for every group). Default (epoch): nothing recorded as dropped.
struct DroppedDedupMarks {
  std::chrono::sys_time<std::chrono::milliseconds> born_before{};
  std::chrono::sys_time<std::chrono::milliseconds> dropped_at{};  ///< the pass that set it
  std::chrono::milliseconds retention{0};                         ///< what that pass kept
};

/// The store's declarations, live and expired, by group. \throws Error from the store.
[[nodiscard]] std::vector<DedupRetentionDeclaration> dedup_retention_declarations(Store& store);
/// What maintenance has recorded as dropped. \throws Error from the store.
[[nodiscard]] DroppedDedupMarks dropped_dedup_marks(Store& store);

/// One partition of processed_event: event ids born in [from, to), or the DEFAULT one.
struct DedupPartition {
  std::string name;
  bool is_default = false;
  std::chrono::sys_time<std::chrono::milliseconds> from{};
  std::chrono::sys_time<std::chrono::milliseconds> to{};
};

/// processed_event's partitions (PostgreSQL, when migrated partitioned); nullopt when it is
/// not partitioned (always on SQLite). Read on its own transaction.
[[nodiscard]] std::optional<std::vector<DedupPartition>> dedup_partitions(Store& store);
/// Removes every declaration of `consumer_group` (a group that no longer runs), so the
/// next pass no longer keeps marks for it. Returns the rows removed. A group still
/// running declares itself again at its next renewal.
std::int64_t forget_dedup_retention(Store& store, std::string_view consumer_group);

/// What one maintenance run did.
struct MaintenanceReport {
  bool ran = false;          ///< false when another instance held the lock
  bool partitioned = false;  ///< processed_event is RANGE-partitioned
  std::vector<std::string> partitions_created;
  std::vector<std::string> partitions_dropped;
  std::int64_t rows_moved_from_default = 0;  ///< rows moved into a newly created partition
  std::int64_t dedup_rows_deleted = 0;       ///< batched DELETE (table or default partition)
  std::int64_t outbox_rows_deleted = 0;
  /// The dedup retention this pass kept: the policy's, or longer when a live declaration
  /// asked for more (then `retention_held_by` names those declarations).
  std::chrono::milliseconds dedup_retention{0};
  std::chrono::milliseconds configured_dedup_retention{0};  ///< RetentionPolicy::dedup
  std::vector<DedupRetentionDeclaration> retention_held_by;
  std::vector<DedupRetentionDeclaration> expired_declarations;  ///< ignored by this pass
  std::size_t batches = 0;                                      ///< DELETE statements issued
  std::chrono::milliseconds elapsed{0};

  /// One line, `key=value ...`, for logs and `idem maintain`.
  [[nodiscard]] std::string summary() const;
  /// Sentences for an operator about the retention: why it kept more than configured,
  /// which declarations expired. Empty when the policy's retention held on its own.
  [[nodiscard]] std::vector<std::string> retention_notes() const;
};

/// Runs one maintenance pass on `store` (which must be migrated and have no open
/// transaction). Each step commits on its own; a failure part-way leaves what was done.
/// Blocks for the whole pass; never holds a lock on a dedup row for longer than one batch.
/// \throws Error(InvalidArgument, Config) for a bad policy; Error from the store.
MaintenanceReport run_maintenance(Store& store, const RetentionPolicy& policy);

/// A background maintenance task: runs run_maintenance() on a store of its own every
/// `interval`, on a thread of its own, until destroyed. Used inside a consumer process
/// (`idem consume --maintain-every`); `idem maintain` runs one pass for cron instead.
class MaintenanceTask {
 public:
  /// Opens the store now (throws like open_store) and starts the thread; the first
  /// pass runs at once. Errors of a pass go to `on_error` (the task keeps going).
  MaintenanceTask(std::string store_url, RetentionPolicy policy, std::chrono::milliseconds interval,
                  std::function<void(const MaintenanceReport&)> on_report,
                  std::function<void(std::string_view)> on_error);
  /// Stops: waits for the current batch (not the whole pass) and joins the thread.
  ~MaintenanceTask();
  MaintenanceTask(const MaintenanceTask&) = delete;
  MaintenanceTask& operator=(const MaintenanceTask&) = delete;

  /// Passes completed so far. Thread-safe.
  [[nodiscard]] std::uint64_t passes() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idem
