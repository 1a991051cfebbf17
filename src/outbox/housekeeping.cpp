#include "outbox/housekeeping.hpp"

#include <fmt/format.h>

namespace idem::detail {

Housekeeping::Housekeeping(SharedConnection& connection, const OutboxQueries& queries,
                           const RelayConfig& config, std::function<void(std::string_view)> log)
    : connection_(connection), queries_(queries), config_(config), log_(std::move(log)) {
  const auto now = std::chrono::steady_clock::now();
  next_cleanup_ = now;
  next_progress_ = now + config_.progress_interval;
}

bool Housekeeping::progress_due(TimePoint now) const noexcept {
  return config_.progress_interval.count() > 0 && now >= next_progress_;
}

std::optional<Housekeeping::TimePoint> Housekeeping::next_progress() const noexcept {
  // A disabled report (interval 0) stays in the past: as a deadline it would turn the
  // idle wait into a 1 ms busy poll.
  if (config_.progress_interval.count() <= 0) return std::nullopt;
  return next_progress_;
}

void Housekeeping::measure_lag(RelayProgress& progress) {
  next_progress_ = std::chrono::steady_clock::now() + config_.progress_interval;
  const OutboxLag lag = connection_.with([&](Store& store) { return queries_.lag(store); });
  progress.backlog = lag.backlog;
  progress.oldest_unpublished_age = lag.oldest_unpublished_age;
  progress.rejected_rows = lag.rejected;
}

bool Housekeeping::cleanup_due(TimePoint now) const noexcept {
  return config_.cleanup_interval.count() > 0 && now >= next_cleanup_;
}

void Housekeeping::clean(RelayProgress& progress, const std::atomic<bool>& stop) {
  next_cleanup_ = std::chrono::steady_clock::now() + config_.cleanup_interval;
  const auto batch = static_cast<std::int64_t>(config_.cleanup_batch);
  // One transaction per batch keeps each DELETE's locks and WAL small.
  std::int64_t deleted = 0;
  int batches = 0;
  while (batches < 100 && !stop.load(std::memory_order_relaxed)) {
    const std::int64_t n = connection_.with(
        [&](Store& store) { return queries_.delete_published(store, config_.retention, batch); });
    ++batches;
    deleted += n;
    progress.cleaned += static_cast<std::uint64_t>(n);
    if (n < batch) break;
  }
  if (deleted > 0 && log_) {
    log_(
        fmt::format("idem relay: cleanup deleted {} published rows older than {} ms in {} "
                    "batch(es) of at most {}",
                    deleted, config_.retention.count(), batches, batch));
  }
}

}  // namespace idem::detail
