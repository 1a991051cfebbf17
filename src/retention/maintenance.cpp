#include "retention/maintenance.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "idem/error.hpp"
#include "idem/timestamp.hpp"
#include "idem/uuid.hpp"
#include "stores/dedup_retention.hpp"
#include "stores/maintenance_operations.hpp"

namespace idem {

namespace {

using Millis = std::chrono::sys_time<std::chrono::milliseconds>;
using std::chrono::milliseconds;

class Maintenance {
 public:
  Maintenance(Store& store, const RetentionPolicy& policy, const std::atomic<bool>& stop)
      : store_(store),
        policy_(policy),
        stop_(stop),
        clock_(policy.clock != nullptr ? *policy.clock : SystemClock::instance()),
        ops_(detail::make_maintenance_operations(store, clock_)) {}

  MaintenanceReport run() {
    validate();
    const auto started = std::chrono::steady_clock::now();
    if (store_.schema_version() == 0) {
      throw Error(ErrorCode::Schema, ops_->source(),
                  "retention: the database has no idem schema; run `idem migrate` first");
    }
    ops_->prepare();
    if (!ops_->try_lock()) {
      report_.elapsed = elapsed_since(started);
      return report_;
    }
    report_.ran = true;
    // The lock is the session's (PostgreSQL): a connection replaced during the pass (a
    // failover) took it along. The pass stops at the next step instead of going on as a
    // second instance; run again, it takes the lock on the new session.
    session_ = store_.reconnects();
    try {
      const auto now = clock_.now();
      // One dedup retention per store: never drop a mark a live consumer declaration
      // still relies on, whatever this pass was configured with.
      detail::SettledDedupRetention settled =
          detail::settle_dedup_retention(store_, policy_.dedup.retention, now);
      report_.configured_dedup_retention = policy_.dedup.retention;
      report_.dedup_retention = settled.kept;
      report_.retention_held_by = std::move(settled.held_by);
      report_.expired_declarations = std::move(settled.expired);
      check_session();
      const Uuid dedup_cutoff =
          Uuid::lower_bound_for(std::chrono::floor<milliseconds>(now - report_.dedup_retention));
      if (auto partitions = ops_->partitions()) {
        report_.partitioned = true;
        maintain_partitions(std::move(*partitions), now);
        if (default_partition_) {
          report_.dedup_rows_deleted += delete_in_batches([&](std::int64_t limit) {
            return ops_->delete_dedup_batch(dedup_cutoff, limit, default_partition_);
          });
        }
      } else {
        report_.dedup_rows_deleted += delete_in_batches([&](std::int64_t limit) {
          return ops_->delete_dedup_batch(dedup_cutoff, limit, std::nullopt);
        });
      }
      if (policy_.outbox_retention.count() > 0) {
        const auto cutoff = now - policy_.outbox_retention;
        report_.outbox_rows_deleted += delete_in_batches(
            [&](std::int64_t limit) { return ops_->delete_outbox_batch(cutoff, limit); });
      }
    } catch (...) {
      ops_->unlock();
      throw;
    }
    ops_->unlock();
    report_.elapsed = elapsed_since(started);
    return report_;
  }

 private:
  static milliseconds elapsed_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t);
  }

  void check_session() const {
    if (store_.reconnects() == session_) return;
    throw Error(ErrorCode::Connection, ops_->source(),
                "retention: the connection was replaced during the pass (the server went away, "
                "or a failover); the single-instance lock went with the old session, so this "
                "pass stops here; run again, it takes the lock on the new session");
  }

  void validate() const {
    const auto bad = [](const std::string& what) {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config, "retention: " + what);
    };
    if (policy_.dedup.retention <= std::chrono::hours(0))
      bad("the dedup retention must be positive");
    if (policy_.dedup.safety_margin < std::chrono::hours(0) ||
        policy_.dedup.safety_margin >= policy_.dedup.retention) {
      bad("the safety margin must be at least 0 and shorter than the dedup retention");
    }
    if (policy_.batch_size == 0) bad("batch_size must be at least 1");
    if (policy_.outbox_retention.count() < 0) bad("outbox_retention must not be negative");
    if (policy_.partition_period <= std::chrono::hours(0))
      bad("partition_period must be at least one hour");
    if (policy_.partitions_ahead < 0) bad("partitions_ahead must not be negative");
  }

  /// Runs `one_batch(limit)` (one bounded DELETE in its own transaction, returning the
  /// rows deleted) until a batch deletes fewer than the limit, max_batches is reached or
  /// stop is asked for.
  template <class OneBatch>
  std::int64_t delete_in_batches(OneBatch&& one_batch) {
    std::int64_t total = 0;
    const auto limit = static_cast<std::int64_t>(policy_.batch_size);
    for (std::size_t batch = 0; policy_.max_batches == 0 || batch < policy_.max_batches; ++batch) {
      if (stop_.load(std::memory_order_relaxed)) break;
      const std::int64_t deleted = one_batch(limit);
      check_session();
      ++report_.batches;
      total += deleted;
      if (deleted < limit) break;
      if (policy_.batch_pause.count() > 0) std::this_thread::sleep_for(policy_.batch_pause);
    }
    return total;
  }

  void maintain_partitions(std::vector<DedupPartition> existing,
                           std::chrono::system_clock::time_point now) {
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
    const auto max_behind = report_.dedup_retention / period + 1;
    std::int64_t behind = 0;
    if (newest_end && *newest_end < current) {
      behind = std::min<std::int64_t>((current - *newest_end + period - milliseconds(1)) / period,
                                      max_behind);
    }
    MigrateOptions plan;
    plan.partitioned = true;
    plan.partition_period = policy_.partition_period;
    plan.partitions_behind = static_cast<int>(behind);
    plan.partitions_ahead = policy_.partitions_ahead;
    for (auto& spec : ops_->plan_partitions(plan, now)) {
      const bool overlaps =
          std::any_of(existing.begin(), existing.end(), [&](const DedupPartition& p) {
            return !p.is_default && p.from < spec.to && spec.from < p.to;
          });
      if (overlaps || stop_.load(std::memory_order_relaxed)) continue;
      report_.rows_moved_from_default += ops_->create_partition(spec, default_partition_);
      check_session();
      report_.partitions_created.push_back(spec.name);
      existing.push_back(std::move(spec));
    }

    // Behind: a partition goes only when its upper bound is at or below the retention
    // horizon, so every event it can hold was born before now - retention.
    const Millis horizon = std::chrono::floor<milliseconds>(now - report_.dedup_retention);
    for (const auto& p : existing) {
      if (p.is_default || p.to > horizon || stop_.load(std::memory_order_relaxed)) continue;
      ops_->drop_partition(p.name);
      report_.partitions_dropped.push_back(p.name);
      check_session();
    }
  }

  Store& store_;
  const RetentionPolicy& policy_;
  const std::atomic<bool>& stop_;
  const Clock& clock_;
  std::unique_ptr<detail::MaintenanceOperations> ops_;
  std::optional<std::string> default_partition_;
  MaintenanceReport report_;
  std::uint64_t session_ = 0;  // store_.reconnects() when the lock was taken
};

/// Hours with up to one decimal: retentions are set in hours but stored in ms.
std::string hours_text(milliseconds d) {
  const double h = static_cast<double>(d.count()) / 3'600'000.0;
  return h == static_cast<double>(static_cast<std::int64_t>(h))
             ? fmt::format("{}", static_cast<std::int64_t>(h))
             : fmt::format("{:.1f}", h);
}

}  // namespace

std::string MaintenanceReport::summary() const {
  if (!ran)
    return fmt::format("skipped: another maintenance holds the lock elapsed_ms={}",
                       elapsed.count());
  return fmt::format(
      "partitioned={} partitions_created={} partitions_dropped={} moved_from_default={} "
      "dedup_rows_deleted={} outbox_rows_deleted={} dedup_retention_h={} "
      "configured_dedup_retention_h={} batches={} elapsed_ms={}",
      partitioned,
      partitions_created.empty() ? "-" : fmt::format("{}", fmt::join(partitions_created, ",")),
      partitions_dropped.empty() ? "-" : fmt::format("{}", fmt::join(partitions_dropped, ",")),
      rows_moved_from_default, dedup_rows_deleted, outbox_rows_deleted, hours_text(dedup_retention),
      hours_text(configured_dedup_retention), batches, elapsed.count());
}

std::vector<std::string> MaintenanceReport::retention_notes() const {
  std::vector<std::string> notes;
  if (!retention_held_by.empty()) {
    std::vector<std::string> holders;
    for (const auto& d : retention_held_by) {
      holders.push_back(fmt::format("consumer group '{}' declared {} h (by {}, expires {})",
                                    d.consumer_group, hours_text(d.retention), d.declared_by,
                                    format_rfc3339(d.expires_at())));
    }
    notes.push_back(fmt::format(
        "kept dedup marks for {} h instead of the configured {} h: {}; marks younger than "
        "that are still relied on (remove a group that no longer runs with `idem retention "
        "forget --group NAME`)",
        hours_text(dedup_retention), hours_text(configured_dedup_retention),
        fmt::join(holders, "; ")));
  }
  for (const auto& d : expired_declarations) {
    notes.push_back(fmt::format(
        "ignored the expired declaration of consumer group '{}' ({} h, last renewed {} by {}): "
        "a consumer of it starting again treats events whose marks were dropped as stale",
        d.consumer_group, hours_text(d.retention), format_rfc3339(d.renewed_at), d.declared_by));
  }
  return notes;
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
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "maintenance interval must be positive");
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

std::uint64_t MaintenanceTask::passes() const noexcept {
  return impl_->passes.load();
}

std::optional<std::vector<DedupPartition>> dedup_partitions(Store& store) {
  return detail::make_maintenance_operations(store, SystemClock::instance())->partitions();
}

}  // namespace idem
