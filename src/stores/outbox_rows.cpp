#include "stores/outbox_rows.hpp"

#include <cstdint>

namespace idem {

std::string_view outbox_insert_statement() noexcept {
  return "INSERT INTO idem_outbox (event_id, aggregate_type, aggregate_id, topic, message_key, "
         "shard, payload, headers) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
}

// The audit statements below are the same on both backends too: the ids are bigint /
// INTEGER, the event ids compare as stored (uuid / BLOB) on both sides of the join.

OutboxSlice outbox_rows_after(Transaction& tx, std::int64_t after_id) {
  const Rows rows = tx.execute(
      "SELECT count(*), count(*) - count(published_at) FROM idem_outbox WHERE id > $1", after_id);
  return {.rows = rows[0].int64(0), .unpublished = rows[0].int64(1)};
}

std::int64_t outbox_last_row_id(Transaction& tx) {
  return tx.execute("SELECT COALESCE(MAX(id), 0) FROM idem_outbox")[0].int64(0);
}

std::int64_t outbox_events_processed(Transaction& tx, std::string_view consumer_group,
                                     std::int64_t after_id) {
  return tx
      .execute(
          "SELECT count(*) FROM idem_outbox o JOIN processed_event p ON p.event_id = o.event_id "
          "AND p.consumer_group = $1 WHERE o.id > $2",
          consumer_group, after_id)[0]
      .int64(0);
}

std::int64_t republish_outbox_rows(Transaction& tx, std::int64_t first_id, std::int64_t end_id) {
  return tx
      .execute("UPDATE idem_outbox SET published_at = NULL WHERE id >= $1 AND id < $2", first_id,
               end_id)
      .affected();
}

}  // namespace idem

namespace idem::detail {

void insert_outbox_row(Transaction& tx, const OutboxRow& row) {
  tx.execute(outbox_insert_statement(), row.event_id, row.message.aggregate_type,
             row.message.aggregate_id, row.message.topic, row.message_key,
             static_cast<std::int64_t>(row.shard), row.message.payload, row.headers_json);
}

}  // namespace idem::detail
