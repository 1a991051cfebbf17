#include "stores/outbox_rows.hpp"

#include <cstdint>

namespace idem {

std::string_view outbox_insert_statement() noexcept {
  return "INSERT INTO idem_outbox (event_id, aggregate_type, aggregate_id, topic, message_key, "
         "shard, payload, headers) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
}

}  // namespace idem

namespace idem::detail {

void insert_outbox_row(Transaction& tx, const OutboxRow& row) {
  tx.execute(outbox_insert_statement(), row.event_id, row.message.aggregate_type,
             row.message.aggregate_id, row.message.topic, row.message_key,
             static_cast<std::int64_t>(row.shard), row.message.payload, row.headers_json);
}

}  // namespace idem::detail
