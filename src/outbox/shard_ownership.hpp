#pragma once
// Which outbox shards this relay publishes, and when that is checked again. The
// backend's ShardClaimer (src/stores/<backend>/) holds the ownership itself (advisory
// locks on PostgreSQL, a file lock on SQLite); this part keeps the claim filter that
// goes with it and the rebalancing schedule, and runs the claimer on the shared
// connection whose session holds the locks.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "outbox/shared_connection.hpp"
#include "stores/outbox_queries.hpp"

namespace idem::detail {

class ShardOwnership {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  /// Owns nothing yet; the first rebalance is due at once.
  ShardOwnership(SharedConnection& connection, const OutboxQueries& queries, std::string_view url,
                 std::chrono::milliseconds interval);

  [[nodiscard]] bool due(TimePoint now) const noexcept { return now >= next_; }
  [[nodiscard]] TimePoint next() const noexcept { return next_; }
  /// Brings ownership to this relay's fair share and schedules the next check. Returns
  /// true when the owned set changed. Only with nothing in flight. Throws idem::Error.
  bool rebalance();
  /// True when rebalance() would change nothing. Safe with batches in flight.
  [[nodiscard]] bool balanced();
  /// Schedules the next check one interval after `now` (ownership was found balanced).
  void postpone(TimePoint now) noexcept { next_ = now + interval_; }
  /// The next turn checks again (after an error, or a replaced session).
  void recheck() noexcept { next_ = std::chrono::steady_clock::now(); }
  /// Forgets ownership after the connection broke (the server dropped the locks).
  void lost() noexcept { claimer_->lost(); }

  [[nodiscard]] const std::vector<int>& owned() const noexcept { return claimer_->owned(); }
  /// The session holding the ownership (compare with a claim's ClaimedBatch::session).
  [[nodiscard]] std::int64_t session() const noexcept { return claimer_->session(); }
  /// The owned shards in the form claims take.
  [[nodiscard]] const std::string& filter() const noexcept { return filter_; }

 private:
  SharedConnection& connection_;
  const OutboxQueries& queries_;
  std::unique_ptr<ShardClaimer> claimer_;
  const std::chrono::milliseconds interval_;
  std::string filter_;
  TimePoint next_;
};

}  // namespace idem::detail
