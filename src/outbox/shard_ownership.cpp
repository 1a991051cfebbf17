#include "outbox/shard_ownership.hpp"

namespace idem::detail {

ShardOwnership::ShardOwnership(SharedConnection& connection, const OutboxQueries& queries,
                               std::string_view url, std::chrono::milliseconds interval)
    : connection_(connection),
      queries_(queries),
      claimer_(queries.shard_claimer(connection.store(), url)),
      interval_(interval),
      filter_(queries.shard_filter({})),
      next_(std::chrono::steady_clock::now()) {}

bool ShardOwnership::rebalance() {
  const bool changed = connection_.with([&](Store&) { return claimer_->rebalance(); });
  if (changed) filter_ = queries_.shard_filter(claimer_->owned());
  next_ = std::chrono::steady_clock::now() + interval_;
  return changed;
}

bool ShardOwnership::balanced() {
  return connection_.with([&](Store&) { return claimer_->balanced(); });
}

}  // namespace idem::detail
