// What idem::Consumer reports: its counters (ConsumerStats: one batch's delta added to the
// totals) and the names of its hook points.
#include "idem/consumer.hpp"

namespace idem {

std::string_view to_string(HookPoint point) noexcept {
  switch (point) {
    case HookPoint::BatchPolled: return "batch_polled";
    case HookPoint::AfterHandler: return "after_handler";
    case HookPoint::BeforeDbCommit: return "before_db_commit";
    case HookPoint::AfterDbCommit: return "after_db_commit";
    case HookPoint::AfterOffsetCommit: return "after_offset_commit";
  }
  return "unknown";
}

void RouteStats::add(const RouteStats& delta) {
  applied += delta.applied;
  duplicates += delta.duplicates;
  dead_lettered += delta.dead_lettered;
  for (const auto& [reason, n] : delta.dead_lettered_by_reason)
    dead_lettered_by_reason[reason] += n;
}

RouteStats& ConsumerStats::route(std::string_view name) {
  auto it = routes.find(name);
  if (it == routes.end()) it = routes.emplace(std::string(name), RouteStats{}).first;
  return it->second;
}

void ConsumerStats::add(const ConsumerStats& delta) {
  delivered += delta.delivered;
  processed += delta.processed;
  duplicates += delta.duplicates;
  dead_lettered += delta.dead_lettered;
  for (const auto& [reason, n] : delta.dead_lettered_by_reason)
    dead_lettered_by_reason[reason] += n;
  retries += delta.retries;
  retry_topic_sends += delta.retry_topic_sends;
  dead_letters_refused += delta.dead_letters_refused;
  transactions += delta.transactions;
  offset_commits += delta.offset_commits;
  calls += delta.calls;
  call_retries += delta.call_retries;
  offset_disagreements += delta.offset_disagreements;
  offset_records_read_again += delta.offset_records_read_again;
  offset_records_not_read_again += delta.offset_records_not_read_again;
  for (const auto& [name, d] : delta.routes) route(name).add(d);
}

}  // namespace idem
