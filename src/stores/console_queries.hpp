#pragma once
// The web console's statements (src/console/): what the dedup table holds per consumer
// group, and the replay audit (idem_console_replay). Reads run in read transactions, so a
// console open on a SQLite store never queues behind a consumer's write.
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

/// One row per group, by group name. A full scan of processed_event: callers cache it.
[[nodiscard]] std::vector<DedupGroupStats> dedup_group_stats(Store& store);

/// One replay recorded by the console.
struct ReplayAuditEntry {
  std::int64_t id = 0;
  std::chrono::sys_time<std::chrono::milliseconds> started_at{};
  std::string operator_name;
  std::string remote_addr;
  std::string dlq_topic;
  std::int32_t dlq_partition = 0;
  std::int64_t dlq_offset = 0;
  std::optional<std::string> event_id;
  std::string target_topic;
  std::string outcome;  ///< started until finish_replay_audit()
  std::string detail;
};

/// Records `entry` (outcome `started`) in a transaction of its own; returns its id.
/// \throws Error(Schema) when the store was migrated by an idem without the audit table.
[[nodiscard]] std::int64_t insert_replay_audit(Store& store, const ReplayAuditEntry& entry);

/// Sets the outcome of audit row `id`.
void finish_replay_audit(Store& store, std::int64_t id, std::string_view outcome,
                         std::string_view detail);

/// The `limit` most recent audit rows, newest first.
[[nodiscard]] std::vector<ReplayAuditEntry> list_replay_audit(Store& store, std::int64_t limit);

}  // namespace idem::detail
