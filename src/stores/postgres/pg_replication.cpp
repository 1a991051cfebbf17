// The primary's view of its standbys (stores/replication.hpp), on PostgreSQL.
#include <charconv>
#include <string_view>

#include "idem/error.hpp"
#include "stores/replication.hpp"
#include "stores/store_errors.hpp"

namespace idem::detail {

namespace {

// The timeline of the WAL the server writes now: the first eight hex digits of the WAL
// file name of its current position. (pg_control_checkpoint() names the timeline of the
// last checkpoint, which stays the old one after a promotion until the next checkpoint.)
constexpr std::string_view kTimelineSql = "substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)";

std::uint32_t parse_timeline(std::string_view hex) {
  std::uint32_t timeline = 0;
  const auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), timeline, 16);
  if (ec != std::errc() || end != hex.data() + hex.size()) {
    throw Error(ErrorCode::Internal, ErrorSource::Postgres,
                "postgres: unexpected WAL file name prefix '" + std::string(hex) + "'");
  }
  return timeline;
}

void require_postgres(const Store& store) {
  if (store.backend() != Backend::Postgres) {
    throw Error(ErrorCode::InvalidArgument, error_source(store.backend()),
                "a SQLite store has no standbys: replication applies to PostgreSQL only");
  }
}

}  // namespace

WalPosition wal_insert_position(Transaction& tx) {
  const Rows r = tx.execute(std::string("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), "
                                        "'0/0')::bigint, ") +
                            std::string(kTimelineSql));
  return WalPosition{parse_timeline(r[0].text(1)), static_cast<std::uint64_t>(r[0].int64(0))};
}

ReplicationView read_replication(Store& store) {
  require_postgres(store);
  auto tx = store.begin_read();
  // One row even without standbys (the LEFT JOIN), for the timeline. A walsender with a
  // logical slot serves a subscriber, not a standby: its flush position is the
  // subscriber's, and promoting it is not possible.
  const Rows rows = tx->execute(
      std::string("SELECT ") + std::string(kTimelineSql) +
      ", r.pid, r.application_name, pg_wal_lsn_diff(r.flush_lsn, '0/0')::bigint, r.sync_state, "
      "current_setting('synchronous_commit'), "
      "pg_wal_lsn_diff(pg_current_wal_flush_lsn(), '0/0')::bigint, "
      "current_setting('synchronous_standby_names') "
      "FROM (SELECT 1) one LEFT JOIN pg_stat_replication r ON NOT EXISTS (SELECT 1 FROM "
      "pg_replication_slots s WHERE s.active_pid = r.pid AND s.slot_type = 'logical')");
  tx->commit();
  ReplicationView view;
  view.timeline = parse_timeline(rows[0].text(0));
  view.synchronous_commit = std::string(rows[0].text(5));
  view.primary_flush_lsn = static_cast<std::uint64_t>(rows[0].int64(6));
  view.synchronous_standby_names = std::string(rows[0].text(7));
  for (const auto row : rows) {
    if (row.is_null(1)) continue;  // no walsender at all
    StandbyReplication standby;
    if (!row.is_null(2)) standby.name = std::string(row.text(2));
    if (!row.is_null(3)) standby.flush_lsn = static_cast<std::uint64_t>(row.int64(3));
    if (!row.is_null(4)) standby.sync_state = std::string(row.text(4));
    view.standbys.push_back(std::move(standby));
  }
  return view;
}

void flush_primary_wal(Store& store) {
  require_postgres(store);
  auto tx = store.begin();
  // SET LOCAL: a session whose default is synchronous_commit = off would not flush.
  tx->execute_deferred("SET LOCAL synchronous_commit = local");
  // A commit flushes only when its transaction wrote WAL (one that merely took a
  // transaction id commits asynchronously): a transactional logical message is the
  // smallest such write, and readable by any role.
  tx->execute("SELECT pg_logical_emit_message(true, 'idem', 'flush')");
  tx->commit();
}

bool can_read_replication(Store& store) {
  require_postgres(store);
  auto tx = store.begin_read();
  const bool may =
      tx->execute("SELECT pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')")[0].boolean(0);
  tx->commit();
  return may;
}

}  // namespace idem::detail
