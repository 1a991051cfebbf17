#pragma once
// Writing an outbox row: the one statement of Outbox::enqueue, the same on every
// backend (the Uuid binds as text, cast to uuid by PostgreSQL, and as a 16-byte BLOB on
// SQLite; headers bind as text, jsonb / TEXT).
#include <string_view>

#include "idem/outbox.hpp"
#include "idem/store.hpp"

namespace idem::detail {

/// Inserts the row of `message` (born with `event_id`, published under `key` to
/// `shard`, with its headers already as JSON) inside `tx`. Throws like execute().
void insert_outbox_row(Transaction& tx, const Uuid& event_id, const OutboxMessage& message,
                       std::string_view key, int shard, std::string_view headers_json);

}  // namespace idem::detail
