#pragma once
// What the primary knows about its standbys, for the relay that publishes only what a
// failover cannot take back (publish_after = replicated) and for the start-up warning
// about asynchronous standbys. PostgreSQL only: SQLite has no standbys, and every
// function here refuses a SQLite store with Error(InvalidArgument).
//
// PostgreSQL 15 has no synchronized_standby_slots (17 stops logical decoding from
// getting ahead of physical standbys); its pg_stat_replication says how far each standby
// has flushed the WAL, and its LSN columns are shown only to superusers and members of
// pg_read_all_stats (pg_monitor includes it). Everyone else sees NULLs there.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "idem/store.hpp"

namespace idem::detail {

/// A position in a server's write-ahead log. LSNs of two timelines are not comparable:
/// after a promotion the new primary writes a new timeline from a point that may lie
/// before what the old primary had written, so an LSN read on the old primary says
/// nothing about what the new one holds.
struct WalPosition {
  std::uint32_t timeline = 0;
  std::uint64_t lsn = 0;

  /// True when this position is at or past `other` on the same timeline.
  [[nodiscard]] bool covers(const WalPosition& other) const noexcept {
    return timeline == other.timeline && lsn >= other.lsn;
  }
};

/// One physical standby as its primary sees it (a row of pg_stat_replication).
struct StandbyReplication {
  std::string name;  ///< application_name; empty when hidden from this role
  /// How far it has flushed the WAL (on the primary's current timeline); nullopt when it
  /// reported nothing yet, or when this role may not see it.
  std::optional<std::uint64_t> flush_lsn;
  std::string sync_state;  ///< async, potential, sync or quorum; empty when hidden
};

/// The primary's physical standbys (logical walsenders are not standbys and are left out).
struct ReplicationView {
  std::uint32_t timeline = 0;  ///< the primary's current timeline
  std::vector<StandbyReplication> standbys;
  /// synchronous_commit as this session has it (the database's and role's default):
  /// `local` and `off` commits do not wait for synchronous standbys.
  std::string synchronous_commit;
  /// How far the primary itself has flushed its WAL. A walsender sends a standby only
  /// flushed WAL, so no standby can report a position past this one.
  std::uint64_t primary_flush_lsn = 0;
  /// The primary's synchronous_standby_names: which application_names it makes
  /// synchronous (sync_state sync or quorum); empty: none, every standby is asynchronous.
  std::string synchronous_standby_names;
};

/// The end of the WAL inserted so far on the server `tx` runs on. Every commit visible to
/// a statement that ran before this call in the same transaction lies at or below it,
/// also a commit made with synchronous_commit off (inserted, not yet flushed).
/// PostgreSQL only. \throws Error like any statement.
[[nodiscard]] WalPosition wal_insert_position(Transaction& tx);

/// The physical standbys of the primary `store` is connected to.
/// \throws Error(InvalidArgument) on SQLite; Error like any statement.
[[nodiscard]] ReplicationView read_replication(Store& store);

/// Makes the primary flush its WAL up to at least the position it has inserted now, so
/// that its walsenders can send it: a commit of a transaction that wrote one logical
/// decoding message (prefix "idem"), flushed locally whatever synchronous_commit says. Without it,
/// WAL inserted by work that does not commit (a read pruning a page, a transaction still
/// open) waits for the next commit or for the WAL writer (wal_writer_delay, 200 ms by
/// default) before any standby can hold it. Uses one transaction id.
/// \throws Error(InvalidArgument) on SQLite; Error like any statement.
void flush_primary_wal(Store& store);

/// True when this session's role may read pg_stat_replication's LSN columns (a
/// superuser, or a member of pg_read_all_stats, e.g. through pg_monitor).
/// \throws Error(InvalidArgument) on SQLite; Error like any statement.
[[nodiscard]] bool can_read_replication(Store& store);

}  // namespace idem::detail
