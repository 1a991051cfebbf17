#pragma once
// Retention's backend half: the single-instance lock, the batched DELETEs and the
// partitions of processed_event, one implementation per backend (src/stores/<backend>/).
// The policy (what expires when, batch bounds, which partitions to create and drop)
// stays in src/retention/ and never sees a backend's SQL or which backend it runs on.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "idem/clock.hpp"
#include "idem/error.hpp"
#include "idem/retention.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"

namespace idem::detail {

/// The operations of one maintenance run on one store (which must have no open
/// transaction). Each call commits on its own and throws idem::Error on failure.
class MaintenanceOperations {
 public:
  virtual ~MaintenanceOperations() = default;

  /// The source of this backend's errors.
  [[nodiscard]] virtual ErrorSource source() const noexcept = 0;
  /// Creates what maintenance needs beyond the dedup table when an older idem migrated
  /// the database (SQLite: the lease table of a later migration).
  virtual void prepare() = 0;

  /// Takes the single-instance lock (PostgreSQL: a session advisory lock, gone with the
  /// connection; SQLite: a lease row, renewed by every batch). False: another holds it.
  [[nodiscard]] virtual bool try_lock() = 0;
  /// Releases it; a failure is left to the lock's own end (connection, lease expiry).
  virtual void unlock() noexcept = 0;

  /// One batch, one transaction: deletes at most `limit` dedup rows born before `cutoff`
  /// from processed_event, or from `partition` when given. Returns the rows deleted.
  [[nodiscard]] virtual std::int64_t delete_dedup_batch(
      const Uuid& cutoff, std::int64_t limit, const std::optional<std::string>& partition) = 0;
  /// One batch, one transaction: deletes at most `limit` outbox rows published before
  /// `cutoff`. Returns the rows deleted.
  [[nodiscard]] virtual std::int64_t delete_outbox_batch(
      std::chrono::system_clock::time_point cutoff, std::int64_t limit) = 0;

  /// processed_event's partitions; nullopt when it is not partitioned (always on SQLite).
  [[nodiscard]] virtual std::optional<std::vector<DedupPartition>> partitions() = 0;
  /// The partitions `plan` asks for around `now` (see MigrateOptions), none DEFAULT.
  [[nodiscard]] virtual std::vector<DedupPartition> plan_partitions(
      const MigrateOptions& plan, std::chrono::system_clock::time_point now) const = 0;
  /// Creates `partition`, moving the rows of its range out of `default_partition` (when
  /// there is one) in the same transaction. Returns the rows moved.
  virtual std::int64_t create_partition(const DedupPartition& partition,
                                        const std::optional<std::string>& default_partition) = 0;
  virtual void drop_partition(const std::string& name) = 0;
};

/// The operations for `store`'s backend; `clock` times SQLite's lease.
[[nodiscard]] std::unique_ptr<MaintenanceOperations> make_maintenance_operations(
    Store& store, const Clock& clock);

namespace pg {
[[nodiscard]] std::unique_ptr<MaintenanceOperations> make_maintenance_operations(Store& store);
}  // namespace pg

namespace sqlite {
[[nodiscard]] std::unique_ptr<MaintenanceOperations> make_maintenance_operations(
    Store& store, const Clock& clock);
}  // namespace sqlite

}  // namespace idem::detail
