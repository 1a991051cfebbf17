#pragma once
// The relay's claim and mark statements, shared with bench/bench_relay.cpp so that
// the benchmark's raw SQL baseline issues exactly what the relay issues.
#include <string_view>

namespace idem::detail {

// Claims read past `cursor` (the last id already in flight) so that the next batch can
// be claimed while earlier ones wait for acks. The partial index holds only unpublished
// rows, so a scan from id 0 costs the same; the cursor only skips what is in flight, and
// it goes back to 0 whenever nothing is in flight (rows that committed late with a lower
// id are then found).
constexpr std::string_view kClaimPostgres =
    "SELECT id, event_id, topic, message_key, payload, headers::text, pg_backend_pid() "
    "FROM outbox WHERE published_at IS NULL AND id > $1 AND shard = ANY($2::int[]) "
    "ORDER BY id LIMIT $3";
constexpr std::string_view kClaimSqlite =
    "SELECT id, event_id, topic, message_key, payload, headers, 0 "
    "FROM outbox WHERE published_at IS NULL AND id > $1 ORDER BY id LIMIT $2";
constexpr std::string_view kMarkPostgres =
    "UPDATE outbox SET published_at = now() WHERE id = ANY($1::bigint[]) AND published_at IS NULL";
constexpr std::string_view kMarkSqlite =
    "UPDATE outbox SET published_at = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) "
    "WHERE id IN (SELECT value FROM json_each($1)) AND published_at IS NULL";

}  // namespace idem::detail
