#include "stores/console_queries.hpp"

#include "idem/error.hpp"
#include "stores/store_errors.hpp"

namespace idem::detail {

namespace {

using Millis = std::chrono::sys_time<std::chrono::milliseconds>;

std::optional<Millis> optional_ms(const RowView& row, std::size_t col) {
  if (row.is_null(col)) return std::nullopt;
  return Millis(std::chrono::milliseconds(row.int64(col)));
}

std::optional<Uuid> optional_uuid(const RowView& row, std::size_t col) {
  if (row.is_null(col)) return std::nullopt;
  return row.uuid(col);
}

/// A replay must not run unrecorded: refuse a store migrated by an idem without the table.
void require_audit_table(Store& store, Transaction& tx) {
  require_table(store, tx, "idem_console_replay",
                "the store has no replay audit table (idem_console_replay: it was migrated by an "
                "older idem); run `idem migrate` first");
}

}  // namespace

std::vector<DedupGroupStats> dedup_group_stats(Store& store) {
  // PostgreSQL (before 16) has no min/max over uuid; the text form orders like the bytes
  // (fixed-width lower-case hex), so the text's extremes are the UUIDs' extremes.
  const char* sql =
      store.backend() == Backend::Postgres
          ? "SELECT consumer_group, count(*), min(event_id::text), max(event_id::text), "
            "(extract(epoch from min(processed_at)) * 1000)::bigint, "
            "(extract(epoch from max(processed_at)) * 1000)::bigint "
            "FROM processed_event GROUP BY consumer_group ORDER BY consumer_group"
          : "SELECT consumer_group, count(*), min(event_id), max(event_id), min(processed_at), "
            "max(processed_at) FROM processed_event GROUP BY consumer_group ORDER BY "
            "consumer_group";
  auto tx = store.begin_read();
  std::vector<DedupGroupStats> out;
  for (const RowView row : tx->execute(sql)) {
    out.push_back({std::string(row.text(0)), row.int64(1), optional_uuid(row, 2),
                   optional_uuid(row, 3), optional_ms(row, 4), optional_ms(row, 5)});
  }
  tx->commit();
  return out;
}

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

}  // namespace idem::detail
