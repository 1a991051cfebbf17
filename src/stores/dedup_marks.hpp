#pragma once
// Dedup-mark statements beyond the Transaction interface's own marks.
//
// unmark_processed is a free function rather than a Transaction method only to keep
// this change apart from concurrent work on Transaction; its statement is the same on
// every backend (a Uuid binds as each backend stores it). dedup_group_stats is what the
// web console shows of the marks; it reads processed_event's columns, whose types differ
// per backend, so it stays with the store that defines them.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idem/store.hpp"
#include "idem/uuid.hpp"

namespace idem::detail {

/// processed_event rows of one consumer group.
struct DedupGroupStats {
  std::string group;
  std::int64_t rows = 0;
  std::optional<Uuid> oldest_event;  ///< smallest event_id (UUIDv7: the oldest born)
  std::optional<Uuid> newest_event;  ///< largest event_id
  std::optional<std::chrono::sys_time<std::chrono::milliseconds>> first_processed;
  std::optional<std::chrono::sys_time<std::chrono::milliseconds>> last_processed;
};

/// One row per group, by group name, in a read transaction (on SQLite it never queues
/// behind a consumer's write). A full scan of processed_event: callers cache it.
[[nodiscard]] std::vector<DedupGroupStats> dedup_group_stats(Store& store);

/// Removes the dedup mark of `event_id` for `consumer_group` inside `tx`, so that an
/// event dead-lettered (or to be retried) is processed, not skipped as a duplicate, when
/// it comes back. Part of `tx`: rolls back with it. Throws idem::Error like execute().
void unmark_processed(Transaction& tx, const Uuid& event_id, std::string_view consumer_group);

}  // namespace idem::detail
