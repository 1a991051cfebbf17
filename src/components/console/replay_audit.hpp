#pragma once
// The console's replay audit (idem_console_replay, the console's own migration set:
// sql/console/<backend>/, console_migrations()). Plain statements through the store's
// Transaction API, the same text on every backend.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idem/store.hpp"

namespace idem::console {

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
/// \throws Error(Schema) when the console's migrations were never applied to the store.
[[nodiscard]] std::int64_t insert_replay_audit(Store& store, const ReplayAuditEntry& entry);

/// Sets the outcome of audit row `id`.
void finish_replay_audit(Store& store, std::int64_t id, std::string_view outcome,
                         std::string_view detail);

/// The `limit` most recent audit rows, newest first, in a read transaction (a console on
/// a SQLite store never queues behind a consumer's write).
/// \throws Error(Schema) as insert_replay_audit() does.
[[nodiscard]] std::vector<ReplayAuditEntry> list_replay_audit(Store& store, std::int64_t limit);

}  // namespace idem::console
