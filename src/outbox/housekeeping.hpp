#pragma once
// The relay's periodic work beside publishing: the progress report with the lag, and
// the cleanup of published rows past their retention. Both only read or delete
// published rows, so they run whenever due, also while a stalled broker keeps batches
// in flight.
#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string_view>

#include "idem/relay.hpp"
#include "outbox/shared_connection.hpp"
#include "stores/outbox_queries.hpp"

namespace idem::detail {

class Housekeeping {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  /// The first cleanup is due at once, the first progress report one interval from now.
  Housekeeping(SharedConnection& connection, const OutboxQueries& queries,
               const RelayConfig& config, std::function<void(std::string_view)> log);

  [[nodiscard]] bool progress_due(TimePoint now) const noexcept;
  /// When the next progress report is due; nullopt when progress is disabled.
  [[nodiscard]] std::optional<TimePoint> next_progress() const noexcept;
  /// Measures the backlog and the oldest row's age into `progress`; schedules the next.
  void measure_lag(RelayProgress& progress);

  [[nodiscard]] bool cleanup_due(TimePoint now) const noexcept;
  /// Deletes published rows older than the retention, in batches of one transaction
  /// each, at most 100 batches (so cleanup never starves publishing), stopping early when
  /// `stop` is set; counts them in `progress`. Schedules the next cleanup.
  void clean(RelayProgress& progress, const std::atomic<bool>& stop);

 private:
  SharedConnection& connection_;
  const OutboxQueries& queries_;
  const RelayConfig& config_;
  std::function<void(std::string_view)> log_;
  TimePoint next_progress_;
  TimePoint next_cleanup_;
};

}  // namespace idem::detail
