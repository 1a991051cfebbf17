#include "console/replay_audit.hpp"

#include "idem/error.hpp"
#include "idem/store.hpp"

namespace idem::console {

namespace {

using Millis = std::chrono::sys_time<std::chrono::milliseconds>;

/// A replay must not run unrecorded: refuse a store without the console's table.
void require_audit_table(Store& store, Transaction& tx) {
  require_table(store, tx, "idem_console_replay",
                "the store has no replay audit table (idem_console_replay): run `idem "
                "migrate` first (a program of your own: "
                "store.migrate_set(idem::console_migrations()))");
}

}  // namespace

std::int64_t insert_replay_audit(Store& store, const ReplayAuditEntry& e) {
  auto tx = store.begin();
  require_audit_table(store, *tx);
  const Rows rows = tx->execute(
      "INSERT INTO idem_console_replay (started_at_ms, operator, remote_addr, dlq_topic, "
      "dlq_partition, dlq_offset, event_id, target_topic, outcome, detail) VALUES ($1, $2, $3, "
      "$4, $5, $6, $7, $8, 'started', $9) RETURNING id",
      e.started_at.time_since_epoch().count(), e.operator_name, e.remote_addr, e.dlq_topic,
      static_cast<std::int64_t>(e.dlq_partition), e.dlq_offset, e.event_id, e.target_topic,
      e.detail);
  const std::int64_t id = rows[0].int64(0);
  tx->commit();
  return id;
}

void finish_replay_audit(Store& store, std::int64_t id, std::string_view outcome,
                         std::string_view detail) {
  auto tx = store.begin();
  tx->execute("UPDATE idem_console_replay SET outcome = $1, detail = $2 WHERE id = $3", outcome,
              detail, id);
  tx->commit();
}

std::vector<ReplayAuditEntry> list_replay_audit(Store& store, std::int64_t limit) {
  auto tx = store.begin_read();
  require_audit_table(store, *tx);
  std::vector<ReplayAuditEntry> out;
  for (const RowView row :
       tx->execute("SELECT id, started_at_ms, operator, remote_addr, dlq_topic, dlq_partition, "
                   "dlq_offset, event_id, target_topic, outcome, detail FROM idem_console_replay "
                   "ORDER BY id DESC LIMIT $1",
                   limit)) {
    ReplayAuditEntry e;
    e.id = row.int64(0);
    e.started_at = Millis(std::chrono::milliseconds(row.int64(1)));
    e.operator_name = row.text(2);
    e.remote_addr = row.text(3);
    e.dlq_topic = row.text(4);
    e.dlq_partition = static_cast<std::int32_t>(row.int64(5));
    e.dlq_offset = row.int64(6);
    if (!row.is_null(7)) e.event_id = std::string(row.text(7));
    e.target_topic = row.text(8);
    e.outcome = row.text(9);
    e.detail = row.text(10);
    out.push_back(std::move(e));
  }
  tx->commit();
  return out;
}

}  // namespace idem::console
