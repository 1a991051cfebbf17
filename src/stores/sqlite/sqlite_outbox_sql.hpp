#pragma once
// The relay's hot statements on SQLite, shared with bench/bench_relay.cpp so that the
// benchmark's raw SQL baseline issues exactly what the relay issues.
#include <string_view>

namespace idem::detail::sqlite {

// See pg_outbox_sql.hpp for the cursor. One relay at a time owns every shard, so the
// claim does not filter by shard; the last column stands for the session (none here).
constexpr std::string_view kClaimOutboxSql =
    "SELECT id, event_id, topic, message_key, payload, headers, 0 "
    "FROM idem_outbox WHERE published_at IS NULL AND rejected_at IS NULL AND id > $1 ORDER BY id "
    "LIMIT $2";
constexpr std::string_view kMarkOutboxSql =
    "UPDATE idem_outbox SET published_at = CAST((julianday('now') - 2440587.5) * 86400000 AS "
    "INTEGER) "
    "WHERE id IN (SELECT value FROM json_each($1)) AND published_at IS NULL";

}  // namespace idem::detail::sqlite
