#pragma once
// Writing an outbox row: the one statement of Outbox::enqueue, the same on every
// backend (the Uuid binds as text, cast to uuid by PostgreSQL, and as a 16-byte BLOB on
// SQLite; headers bind as text, jsonb / TEXT).
#include <string_view>

#include "idem/outbox.hpp"
#include "idem/store.hpp"

namespace idem::detail {

/// Inserts `row` (Outbox::prepare) inside `tx` with outbox_insert_statement(). Throws like
/// execute().
void insert_outbox_row(Transaction& tx, const OutboxRow& row);

}  // namespace idem::detail
