#include <fmt/format.h>

#include "idem/reference/count_handler.hpp"

namespace idem {

void record_effect(Transaction& tx, const Uuid& event_id, const RecordInfo& record) {
  // Deferred: the handler needs no answer, so on PostgreSQL a batch's inserts share one
  // round trip (a failure surfaces at the batch's sync and the batch re-runs isolated).
  tx.execute_deferred(
      "INSERT INTO effect_log(consumer_group, event_id, topic, kafka_partition, kafka_offset) "
      "VALUES ($1, $2, $3, $4, $5)",
      record.consumer_group, event_id, record.topic, static_cast<std::int64_t>(record.partition),
      record.offset);
}

namespace {
std::int64_t scalar(Store& store, std::string_view sql, std::string_view group) {
  auto tx = store.begin();
  const Rows rows = tx->execute(sql, group);
  const std::int64_t value = rows.empty() || rows[0].is_null(0) ? 0 : rows[0].int64(0);
  tx->rollback();
  return value;
}
}  // namespace

std::int64_t count_effects(Store& store, std::string_view consumer_group) {
  return scalar(store, "SELECT count(*) FROM effect_log WHERE consumer_group = $1", consumer_group);
}

std::int64_t max_effects_per_event(Store& store, std::string_view consumer_group) {
  return scalar(store,
                "SELECT max(n) FROM (SELECT count(*) AS n FROM effect_log "
                "WHERE consumer_group = $1 GROUP BY event_id) AS per_event",
                consumer_group);
}

}  // namespace idem
