#pragma once
// What the web console shows of the dedup marks, per consumer group: the console's own
// query through the Transaction API (the marks themselves are Transaction's:
// mark_processed, mark_processed_batch, unmark_processed, processed_among). It reads
// processed_event's columns as each backend types them.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idem/store.hpp"
#include "idem/uuid.hpp"

namespace idem::console {

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

}  // namespace idem::console
