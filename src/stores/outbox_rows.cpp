#include "stores/outbox_rows.hpp"

#include <cstdint>

namespace idem::detail {

void insert_outbox_row(Transaction& tx, const Uuid& event_id, const OutboxMessage& message,
                       std::string_view key, int shard, std::string_view headers_json) {
  tx.execute(
      "INSERT INTO idem_outbox (event_id, aggregate_type, aggregate_id, topic, message_key, shard, "
      "payload, headers) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
      event_id, message.aggregate_type, message.aggregate_id, message.topic, key,
      static_cast<std::int64_t>(shard), message.payload, headers_json);
}

}  // namespace idem::detail
