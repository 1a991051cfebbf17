// Retention on SQLite: a lease row (idem_lease) for the single instance, renewed by
// every batch, and batched DELETEs. processed_event is never partitioned here.
#include <array>

#include <fmt/format.h>

#include "stores/maintenance_operations.hpp"

namespace idem::detail::sqlite {

namespace {

using std::chrono::milliseconds;

// How long a lease lasts without renewal; renewed after every batch.
constexpr milliseconds kLeaseLength = std::chrono::minutes(10);

// Bounded DELETEs, one per transaction. event_id is the first column of the primary key,
// so "born before the horizon" is a range scan of the key. published_at is Unix ms.
constexpr std::string_view kDeleteDedupSql =
    "DELETE FROM processed_event WHERE (event_id, consumer_group) IN "
    "(SELECT event_id, consumer_group FROM processed_event WHERE event_id < $1 LIMIT $2)";
constexpr std::string_view kDeleteOutboxSql =
    "DELETE FROM idem_outbox WHERE id IN (SELECT id FROM idem_outbox WHERE published_at < $1 LIMIT "
    "$2)";

class SqliteMaintenance final : public MaintenanceOperations {
 public:
  SqliteMaintenance(Store& store, const Clock& clock) : store_(store), clock_(clock) {}

  ErrorSource source() const noexcept override { return ErrorSource::Sqlite; }
  // The lease lives in a table of a later migration than the dedup table: a database
  // migrated by an older idem gets it here (the other migrations are no-ops).
  void prepare() override { store_.migrate(); }

  bool try_lock() override {
    auto tx = store_.begin();
    lease_holder_ = new_uuid_v7().to_string();
    const bool got = renew_lease(*tx);
    tx->commit();
    return got;
  }

  void unlock() noexcept override {
    try {
      auto tx = store_.begin();
      tx->execute("DELETE FROM idem_lease WHERE name = 'maintenance' AND holder = $1",
                  lease_holder_);
      tx->commit();
    } catch (...) {
      // The lease expires.
    }
  }

  std::int64_t delete_dedup_batch(const Uuid& cutoff, std::int64_t limit,
                                  const std::optional<std::string>&) override {
    return delete_batch(kDeleteDedupSql, Param(cutoff), limit);
  }

  std::int64_t delete_outbox_batch(std::chrono::system_clock::time_point cutoff,
                                   std::int64_t limit) override {
    return delete_batch(kDeleteOutboxSql,
                        Param(static_cast<std::int64_t>(
                            std::chrono::floor<milliseconds>(cutoff).time_since_epoch().count())),
                        limit);
  }

  std::optional<std::vector<DedupPartition>> partitions() override { return std::nullopt; }

  std::vector<DedupPartition> plan_partitions(
      const MigrateOptions&, std::chrono::system_clock::time_point) const override {
    unsupported();
  }
  std::int64_t create_partition(const DedupPartition&, const std::optional<std::string>&) override {
    unsupported();
  }
  void drop_partition(const std::string&) override { unsupported(); }

 private:
  [[noreturn]] static void unsupported() {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Sqlite,
                "retention: SQLite's processed_event has no partitions");
  }

  std::int64_t delete_batch(std::string_view sql, const Param& cutoff, std::int64_t limit) {
    auto tx = store_.begin();
    const std::array<Param, 2> params{cutoff, Param(limit)};
    const Rows r = tx->execute_params(sql, params);
    renew_lease(*tx);
    tx->commit();
    return r.affected();
  }

  // Takes or extends the lease when it is free, expired, or ours.
  bool renew_lease(Transaction& tx) {
    const auto now_ms = std::chrono::floor<milliseconds>(clock_.now()).time_since_epoch().count();
    const Rows r = tx.execute(
        "INSERT INTO idem_lease (name, holder, expires_at) VALUES ('maintenance', $1, $2) "
        "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = "
        "excluded.expires_at "
        "WHERE idem_lease.expires_at < $3 OR idem_lease.holder = excluded.holder",
        lease_holder_, static_cast<std::int64_t>(now_ms + kLeaseLength.count()),
        static_cast<std::int64_t>(now_ms));
    return r.affected() == 1;
  }

  Store& store_;
  const Clock& clock_;
  std::string lease_holder_;
};

}  // namespace

std::unique_ptr<MaintenanceOperations> make_maintenance_operations(Store& store,
                                                                   const Clock& clock) {
  return std::make_unique<SqliteMaintenance>(store, clock);
}

}  // namespace idem::detail::sqlite
