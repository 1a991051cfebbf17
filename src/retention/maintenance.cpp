#include "retention/maintenance.hpp"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "idem/error.hpp"
#include "idem/timestamp.hpp"
#include "idem/uuid.hpp"
#include "stores/postgres/pg_partitions.hpp"

namespace idem {

namespace {

using Millis = std::chrono::sys_time<std::chrono::milliseconds>;
using std::chrono::milliseconds;

// The session advisory lock that makes maintenance single-instance on PostgreSQL.
// Two-int form with a class id of its own, so it cannot collide with the relay's shard
// locks (class ids are small integers there). 0x69646d6e is "idmn".
constexpr std::int64_t kMaintenanceLockClass = 0x69646d6e;
constexpr std::int64_t kMaintenanceLockObject = 1;
// How long a SQLite lease lasts without renewal; renewed after every batch.
constexpr milliseconds kLeaseLength = std::chrono::minutes(10);

// Bounded DELETEs, one per transaction. event_id is the first column of the primary key,
// so "born before the horizon" is a range scan of the key on both backends.
constexpr std::string_view kDeleteDedupPostgres =
    "DELETE FROM {table} p USING (SELECT event_id, consumer_group FROM {table} "
    "WHERE event_id < $1::uuid LIMIT $2::bigint) d "
    "WHERE p.event_id = d.event_id AND p.consumer_group = d.consumer_group";
constexpr std::string_view kDeleteDedupSqlite =
    "DELETE FROM processed_event WHERE (event_id, consumer_group) IN "
    "(SELECT event_id, consumer_group FROM processed_event WHERE event_id < $1 LIMIT $2)";
constexpr std::string_view kDeleteOutboxPostgres =
    "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE published_at < $1::timestamptz "
    "LIMIT $2::bigint)";
constexpr std::string_view kDeleteOutboxSqlite =
    "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE published_at < $1 LIMIT $2)";

/// One partition of processed_event as the catalog describes it.
struct Partition {
  std::string name;
  bool is_default = false;
  Millis from{};
  Millis to{};
};

// Parses pg_get_expr(relpartbound): "FOR VALUES FROM ('uuid') TO ('uuid')" or "DEFAULT".
std::optional<Partition> parse_bound(std::string name, std::string_view bound) {
  Partition p;
  p.name = std::move(name);
  if (bound == "DEFAULT") {
    p.is_default = true;
    return p;
  }
  const auto quoted = [&](std::size_t from) -> std::optional<std::pair<Uuid, std::size_t>> {
    const auto open = bound.find('\'', from);
    if (open == std::string_view::npos) return std::nullopt;
    const auto close = bound.find('\'', open + 1);
    if (close == std::string_view::npos) return std::nullopt;
    auto id = Uuid::parse(bound.substr(open + 1, close - open - 1));
    if (!id) return std::nullopt;
    return std::pair(*id, close + 1);
  };
  const auto lower = quoted(bound.find("FROM"));
  if (!lower) return std::nullopt;
  const auto upper = quoted(lower->second);
  if (!upper) return std::nullopt;
  p.from = lower->first.timestamp();
  p.to = upper->first.timestamp();
  return p;
}

std::string quote_ident(std::string_view name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

class Maintenance {
 public:
  Maintenance(Store& store, const RetentionPolicy& policy, const std::atomic<bool>& stop)
      : store_(store), policy_(policy), stop_(stop),
        clock_(policy.clock != nullptr ? *policy.clock : SystemClock::instance()),
        postgres_(store.backend() == Backend::Postgres) {}

  MaintenanceReport run() {
    validate();
    const auto started = std::chrono::steady_clock::now();
    if (store_.schema_version() == 0) {
      throw Error(ErrorCode::Schema, postgres_ ? ErrorSource::Postgres : ErrorSource::Sqlite,
                  "retention: the database has no idem schema; run `idem migrate` first");
    }
    // SQLite keeps its lease in a table of a later migration than the dedup table: a
    // database migrated by an older idem gets it here (the other migrations are no-ops).
    if (!postgres_) store_.migrate();
    if (!acquire()) {
      report_.elapsed = elapsed_since(started);
      return report_;
    }
    report_.ran = true;
    try {
      const auto now = clock_.now();
      const Uuid dedup_cutoff =
          Uuid::lower_bound_for(std::chrono::floor<milliseconds>(now - policy_.dedup.retention));
      if (postgres_ && partitioned()) {
        report_.partitioned = true;
        maintain_partitions(now);
        if (default_partition_) {
          report_.dedup_rows_deleted += delete_in_batches(
              fmt::format(fmt::runtime(kDeleteDedupPostgres), fmt::arg("table", quote_ident(*default_partition_))),
              Param(dedup_cutoff));
        }
      } else {
        report_.dedup_rows_deleted += delete_in_batches(
            postgres_ ? fmt::format(fmt::runtime(kDeleteDedupPostgres), fmt::arg("table", "processed_event"))
                      : std::string(kDeleteDedupSqlite),
            Param(dedup_cutoff));
      }
      if (policy_.outbox_retention.count() > 0) {
        const auto cutoff = now - policy_.outbox_retention;
        report_.outbox_rows_deleted += delete_in_batches(
            std::string(postgres_ ? kDeleteOutboxPostgres : kDeleteOutboxSqlite),
            postgres_ ? Param(std::chrono::floor<std::chrono::microseconds>(cutoff))
                      : Param(static_cast<std::int64_t>(
                            std::chrono::floor<milliseconds>(cutoff).time_since_epoch().count())));
      }
    } catch (...) {
      release();
      throw;
    }
    release();
    report_.elapsed = elapsed_since(started);
    return report_;
  }

 private:
  static milliseconds elapsed_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t);
  }

  void validate() const {
    const auto bad = [](const std::string& what) {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config, "retention: " + what);
    };
    if (policy_.dedup.retention <= std::chrono::hours(0)) bad("the dedup retention must be positive");
    if (policy_.dedup.safety_margin < std::chrono::hours(0) ||
        policy_.dedup.safety_margin >= policy_.dedup.retention) {
      bad("the safety margin must be at least 0 and shorter than the dedup retention");
    }
    if (policy_.batch_size == 0) bad("batch_size must be at least 1");
    if (policy_.outbox_retention.count() < 0) bad("outbox_retention must not be negative");
    if (policy_.partition_period <= std::chrono::hours(0)) bad("partition_period must be at least one hour");
    if (policy_.partitions_ahead < 0) bad("partitions_ahead must not be negative");
  }

  // --- single instance -----------------------------------------------------------

  bool acquire() {
    auto tx = store_.begin();
    bool got = false;
    if (postgres_) {
      // Session-level: it outlives this transaction and dies with the connection, so a
      // crashed maintenance process never blocks the next one.
      got = tx->execute("SELECT pg_try_advisory_lock($1::int, $2::int)", kMaintenanceLockClass,
                        kMaintenanceLockObject)[0]
                .boolean(0);
    } else {
      lease_holder_ = new_uuid_v7().to_string();
      got = renew_lease(*tx);
    }
    tx->commit();
    return got;
  }

  // SQLite: take or extend the lease when it is free, expired, or ours.
  bool renew_lease(Transaction& tx) {
    const auto now_ms = std::chrono::floor<milliseconds>(clock_.now()).time_since_epoch().count();
    const Rows r = tx.execute(
        "INSERT INTO idem_lease (name, holder, expires_at) VALUES ('maintenance', $1, $2) "
        "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at "
        "WHERE idem_lease.expires_at < $3 OR idem_lease.holder = excluded.holder",
        lease_holder_, static_cast<std::int64_t>(now_ms + kLeaseLength.count()),
        static_cast<std::int64_t>(now_ms));
    return r.affected() == 1;
  }

  void release() noexcept {
    try {
      auto tx = store_.begin();
      if (postgres_) {
        tx->execute("SELECT pg_advisory_unlock($1::int, $2::int)", kMaintenanceLockClass,
                    kMaintenanceLockObject);
      } else {
        tx->execute("DELETE FROM idem_lease WHERE name = 'maintenance' AND holder = $1", lease_holder_);
      }
      tx->commit();
    } catch (...) {
      // PostgreSQL: the lock goes with the connection; SQLite: the lease expires.
    }
  }

  // --- batched DELETE --------------------------------------------------------------

  std::int64_t delete_in_batches(const std::string& sql, const Param& cutoff) {
    std::int64_t total = 0;
    const auto limit = static_cast<std::int64_t>(policy_.batch_size);
    for (std::size_t batch = 0; policy_.max_batches == 0 || batch < policy_.max_batches; ++batch) {
      if (stop_.load(std::memory_order_relaxed)) break;
      auto tx = store_.begin();
      const std::array<Param, 2> params{cutoff, Param(limit)};
      const Rows r = tx->execute_params(sql, params);
      if (!postgres_) renew_lease(*tx);
      tx->commit();
      ++report_.batches;
      total += r.affected();
      if (r.affected() < limit) break;
      if (policy_.batch_pause.count() > 0) std::this_thread::sleep_for(policy_.batch_pause);
    }
    return total;
  }

  // --- partitions (PostgreSQL) -----------------------------------------------------

  bool partitioned() {
    auto tx = store_.begin();
    const Rows r = tx->execute(
        "SELECT c.relkind::text FROM pg_class c WHERE c.oid = to_regclass('processed_event')");
    tx->commit();
    return !r.empty() && r[0].text(0) == "p";
  }

  std::vector<Partition> list_partitions() {
    auto tx = store_.begin();
    const Rows rows = tx->execute(
        "SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
        "JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = to_regclass('processed_event') ORDER BY 1");
    tx->commit();
    std::vector<Partition> out;
    for (const RowView row : rows) {
      auto p = parse_bound(std::string(row.text(0)), row.text(1));
      if (!p) {
        throw Error(ErrorCode::Schema, ErrorSource::Postgres,
                    fmt::format("retention: cannot read the bounds of partition {}: {}", row.text(0),
                                row.text(1)));
      }
      out.push_back(std::move(*p));
    }
    return out;
  }

  void maintain_partitions(std::chrono::system_clock::time_point now) {
    std::vector<Partition> existing = list_partitions();
    for (const auto& p : existing) {
      if (p.is_default) default_partition_ = p.name;
    }

    // Ahead: every period from the current one to `partitions_ahead` after it, and
    // also the periods between the newest existing partition and now (maintenance that
    // did not run for a while must not leave a gap that only DEFAULT would catch).
    // Periods already past the retention horizon are not worth creating.
    const milliseconds period = policy_.partition_period;
    const Millis now_ms = std::chrono::floor<milliseconds>(now);
    const Millis current(now_ms.time_since_epoch() - now_ms.time_since_epoch() % period);
    std::optional<Millis> newest_end;
    for (const auto& p : existing) {
      if (!p.is_default && (!newest_end || p.to > *newest_end)) newest_end = p.to;
    }
    const auto max_behind = policy_.dedup.retention / period + 1;
    std::int64_t behind = 0;
    if (newest_end && *newest_end < current) {
      behind = std::min<std::int64_t>((current - *newest_end + period - milliseconds(1)) / period, max_behind);
    }
    MigrateOptions plan;
    plan.partitioned = true;
    plan.partition_period = policy_.partition_period;
    plan.partitions_behind = static_cast<int>(behind);
    plan.partitions_ahead = policy_.partitions_ahead;
    for (const auto& spec : detail::pg::plan_partitions(plan, now)) {
      const bool overlaps = std::any_of(existing.begin(), existing.end(), [&](const Partition& p) {
        return !p.is_default && p.from < spec.to && spec.from < p.to;
      });
      if (overlaps || stop_.load(std::memory_order_relaxed)) continue;
      create_partition(spec);
      existing.push_back(Partition{spec.name, false, spec.from, spec.to});
    }

    // Behind: a partition goes only when its upper bound is at or below the retention
    // horizon, so every event it can hold was born before now - retention.
    const Millis horizon = std::chrono::floor<milliseconds>(now - policy_.dedup.retention);
    for (const auto& p : existing) {
      if (p.is_default || p.to > horizon || stop_.load(std::memory_order_relaxed)) continue;
      auto tx = store_.begin();
      // A short wait for the lock, not a queue that stalls every consumer behind us: if
      // a long transaction holds the table, the partition goes on the next run.
      tx->execute("SET LOCAL lock_timeout = '5s'");
      tx->execute("DROP TABLE " + quote_ident(p.name));
      tx->commit();
      report_.partitions_dropped.push_back(p.name);
    }
  }

  void create_partition(const detail::pg::PartitionSpec& spec) {
    auto tx = store_.begin();
    tx->execute("SET LOCAL lock_timeout = '5s'");
    std::int64_t moved = 0;
    if (default_partition_) {
      // Rows of this range that landed in the DEFAULT partition (a producer clock ahead
      // of ours) would make CREATE ... PARTITION OF fail; move them into the new
      // partition in the same transaction. The lock keeps new ones from arriving
      // meanwhile; it is held for as long as this (normally empty) move takes.
      const std::string from = Uuid::lower_bound_for(spec.from).to_string();
      const std::string to = Uuid::lower_bound_for(spec.to).to_string();
      const std::string def = quote_ident(*default_partition_);
      tx->execute("LOCK TABLE processed_event IN SHARE ROW EXCLUSIVE MODE");
      tx->execute(fmt::format("CREATE TEMP TABLE idem_moving ON COMMIT DROP AS SELECT * FROM {} "
                              "WHERE event_id >= '{}' AND event_id < '{}'",
                              def, from, to));
      moved = tx->execute(fmt::format("DELETE FROM {} WHERE event_id >= '{}' AND event_id < '{}'", def,
                                      from, to))
                  .affected();
    }
    std::string ddl = detail::pg::partition_ddl(spec);
    while (!ddl.empty() && (ddl.back() == '\n' || ddl.back() == ';')) ddl.pop_back();
    tx->execute(ddl);
    if (moved > 0) tx->execute("INSERT INTO processed_event SELECT * FROM idem_moving");
    tx->commit();
    report_.partitions_created.push_back(spec.name);
    report_.rows_moved_from_default += moved;
  }

  Store& store_;
  const RetentionPolicy& policy_;
  const std::atomic<bool>& stop_;
  const Clock& clock_;
  const bool postgres_;
  std::string lease_holder_;
  std::optional<std::string> default_partition_;
  MaintenanceReport report_;
};

}  // namespace

std::string MaintenanceReport::summary() const {
  if (!ran) return fmt::format("skipped: another maintenance holds the lock elapsed_ms={}", elapsed.count());
  return fmt::format(
      "partitioned={} partitions_created={} partitions_dropped={} moved_from_default={} "
      "dedup_rows_deleted={} outbox_rows_deleted={} batches={} elapsed_ms={}",
      partitioned, partitions_created.empty() ? "-" : fmt::format("{}", fmt::join(partitions_created, ",")),
      partitions_dropped.empty() ? "-" : fmt::format("{}", fmt::join(partitions_dropped, ",")),
      rows_moved_from_default, dedup_rows_deleted, outbox_rows_deleted, batches, elapsed.count());
}

namespace detail {

MaintenanceReport run_maintenance(Store& store, const RetentionPolicy& policy,
                                  const std::atomic<bool>& stop) {
  return Maintenance(store, policy, stop).run();
}

}  // namespace detail

MaintenanceReport run_maintenance(Store& store, const RetentionPolicy& policy) {
  const std::atomic<bool> never{false};
  return detail::run_maintenance(store, policy, never);
}

// --- MaintenanceTask -------------------------------------------------------------------

struct MaintenanceTask::Impl {
  std::unique_ptr<Store> store;
  RetentionPolicy policy;
  std::chrono::milliseconds interval;
  std::function<void(const MaintenanceReport&)> on_report;
  std::function<void(std::string_view)> on_error;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> passes{0};
  std::mutex mutex;
  std::condition_variable wake;
  std::thread thread;

  void loop() {
    for (;;) {
      try {
        const MaintenanceReport report = detail::run_maintenance(*store, policy, stop);
        if (on_report) on_report(report);
      } catch (const std::exception& e) {
        if (on_error) on_error(fmt::format("idem maintenance: {}", e.what()));
      }
      passes.fetch_add(1);
      std::unique_lock lock(mutex);
      if (wake.wait_for(lock, interval, [this] { return stop.load(); })) return;
    }
  }
};

MaintenanceTask::MaintenanceTask(std::string store_url, RetentionPolicy policy,
                                 std::chrono::milliseconds interval,
                                 std::function<void(const MaintenanceReport&)> on_report,
                                 std::function<void(std::string_view)> on_error)
    : impl_(std::make_unique<Impl>()) {
  if (interval.count() <= 0) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config, "maintenance interval must be positive");
  }
  StoreOptions options;
  options.application_name = "idem-maintenance";
  impl_->store = open_store(store_url, options);
  impl_->policy = policy;
  impl_->interval = interval;
  impl_->on_report = std::move(on_report);
  impl_->on_error = std::move(on_error);
  impl_->thread = std::thread([impl = impl_.get()] { impl->loop(); });
}

MaintenanceTask::~MaintenanceTask() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stop.store(true);
  }
  impl_->wake.notify_all();
  impl_->thread.join();
}

std::uint64_t MaintenanceTask::passes() const noexcept { return impl_->passes.load(); }

}  // namespace idem
