#pragma once
// The relay's hot statements on PostgreSQL, shared with bench/bench_relay.cpp so that
// the benchmark's raw SQL baseline issues exactly what the relay issues.
#include <string_view>

namespace idem::detail::pg {

// Claims read past `cursor` (the last id already in flight) so that the next batch can
// be claimed while earlier ones wait for acks. The partial index holds only unpublished
// rows, so a scan from id 0 costs the same; the cursor only skips what is in flight, and
// it goes back to 0 whenever nothing is in flight (rows that committed late with a lower
// id are then found).
constexpr std::string_view kClaimOutboxSql =
    "SELECT id, event_id, topic, message_key, payload, headers::text, pg_backend_pid() "
    "FROM idem_outbox WHERE published_at IS NULL AND rejected_at IS NULL AND id > $1 "
    "AND shard = ANY($2::int[]) "
    "ORDER BY id LIMIT $3";
constexpr std::string_view kMarkOutboxSql =
    "UPDATE idem_outbox SET published_at = now() WHERE id = ANY($1::bigint[]) AND published_at IS "
    "NULL";

}  // namespace idem::detail::pg
