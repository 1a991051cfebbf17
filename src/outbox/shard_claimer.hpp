#pragma once
// Which outbox shards this relay may publish. A relay publishes a shard only while it
// owns it, so no two relays ever publish one key's events concurrently.
//
// PostgreSQL: a session-level advisory lock per shard, pg_try_advisory_lock(kShardLockKey,
// shard). The server releases it the moment the session ends, so a SIGKILLed relay's
// shards are free at once (no lease to expire), and a stalled relay that still has its
// connection keeps them (no second publisher behind its back). Every relay also holds
// a shared "member" lock; counting its holders gives the number of live relays, and
// each relay owns at most ceil(kOutboxShards / live) shards, handing back the excess at
// a batch boundary. Plain FOR UPDATE SKIP LOCKED on outbox rows is not used: a second
// relay would skip the locked head of a key's queue and publish that key's later
// events first.
//
// SQLite: one relay at a time, by an exclusive flock on `<db file>-relay.lock` (released
// by the kernel when the process dies). The owner owns every shard.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "idem/store.hpp"

namespace idem::detail {

class ShardClaimer {
 public:
  virtual ~ShardClaimer() = default;
  /// Brings ownership to this relay's fair share. Returns true when the owned set
  /// changed (the caller must then restart its scan from the oldest unpublished row).
  /// Call only when nothing is in flight. Throws idem::Error on database failure.
  virtual bool rebalance() = 0;
  /// True when rebalance() would change nothing (this relay holds its fair share, or
  /// less with no free shard left). Cheap; safe with batches in flight. Throws
  /// idem::Error on database failure.
  [[nodiscard]] virtual bool balanced() = 0;
  /// Forgets ownership after the connection broke (the server dropped the locks).
  virtual void lost() noexcept = 0;
  [[nodiscard]] virtual const std::vector<int>& owned() const noexcept = 0;
  /// PostgreSQL: the backend pid of the session holding the locks, as of the last
  /// rebalance (a claim on another session means the connection was silently replaced
  /// and the locks are gone). 0 on SQLite.
  [[nodiscard]] virtual std::int64_t session() const noexcept = 0;
};

/// `store` is the relay's claim connection (locks live on its session); `url` is used
/// to find the SQLite database file.
[[nodiscard]] std::unique_ptr<ShardClaimer> make_shard_claimer(Store& store, const std::string& url);

}  // namespace idem::detail
