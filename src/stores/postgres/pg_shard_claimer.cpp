// Shard ownership on PostgreSQL: a session-level advisory lock per shard,
// pg_try_advisory_lock(kShardLockKey, shard). The server releases it the moment the
// session ends, so a SIGKILLed relay's shards are free at once (no lease to expire), and
// a stalled relay that still has its connection keeps them (no second publisher behind
// its back). Every relay also holds a shared "member" lock; counting its holders gives
// the number of live relays, and each relay owns at most ceil(kOutboxShards / live)
// shards, handing back the excess at a batch boundary. Plain FOR UPDATE SKIP LOCKED on
// outbox rows is not used: a second relay would skip the locked head of a key's queue
// and publish that key's later events first.
#include <algorithm>
#include <random>

#include "idem/outbox.hpp"
#include "stores/postgres/pg_outbox.hpp"

namespace idem::detail::pg {

namespace {

// Advisory lock keys (two-int form: classid = key, objid = shard, objsubid = 2).
constexpr std::int64_t kShardLockKey = 0x1de0b0;   // one per shard
constexpr std::int64_t kMemberLockKey = 0x1de0b1;  // shared, one per live relay

std::string int_array(const std::vector<int>& v) {
  std::string s = "{";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s.push_back(',');
    s += std::to_string(v[i]);
  }
  s.push_back('}');
  return s;
}

class PostgresShardClaimer final : public ShardClaimer {
 public:
  explicit PostgresShardClaimer(Store& store) : store_(store) {}

  bool rebalance() override {
    auto tx = store_.begin();
    // Our session's locks, as the server sees them: the truth after a silent reconnect.
    const Rows held = tx->execute(
        "SELECT objid::int FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
        "AND classid::bigint = $1 AND objsubid = 2 AND granted ORDER BY 1",
        kShardLockKey);
    std::vector<int> now;
    for (const auto row : held) now.push_back(static_cast<int>(row.int64(0)));
    const Rows member = tx->execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
        "AND classid::bigint = $1 AND objsubid = 2 AND granted",
        kMemberLockKey);
    if (member[0].int64(0) == 0) {
      tx->execute("SELECT pg_advisory_lock_shared($1::int, 0)", kMemberLockKey);
    }
    // Advisory locks are per database, and so are relays: relays of other databases
    // on the same server must not count, or this relay would take too small a share
    // and leave shards that nobody publishes.
    const Rows live = tx->execute(
        "SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory' "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND classid::bigint = $1 AND objsubid = 2 AND granted",
        kMemberLockKey);
    const auto relays = std::max<std::int64_t>(1, live[0].int64(0));
    const auto share = static_cast<std::size_t>((kOutboxShards + relays - 1) / relays);
    if (now.size() > share) {
      // Hand back the excess, highest shards first (nothing is in flight for them).
      const std::vector<int> excess(now.begin() + static_cast<std::ptrdiff_t>(share), now.end());
      tx->execute("SELECT pg_advisory_unlock($1::int, s) FROM unnest($2::int[]) s", kShardLockKey,
                  int_array(excess));
      now.resize(share);
    } else if (now.size() < share) {
      // Try free shards from a random starting point, so relays starting together do
      // not all contend for shard 0. Locks already ours are excluded: the lock is
      // re-entrant and a second acquisition would need a second unlock.
      const Rows got = tx->execute(
          "SELECT s FROM (SELECT s FROM generate_series(0, $2::int - 1) s "
          "WHERE s <> ALL($3::int[]) ORDER BY (s + $4::int) % $2::int) c "
          "WHERE pg_try_advisory_lock($1::int, s) LIMIT $5::bigint",
          kShardLockKey, static_cast<std::int64_t>(kOutboxShards), int_array(now),
          static_cast<std::int64_t>(offset_), static_cast<std::int64_t>(share - now.size()));
      for (const auto row : got) now.push_back(static_cast<int>(row.int64(0)));
      std::sort(now.begin(), now.end());
    }
    session_ = tx->execute("SELECT pg_backend_pid()")[0].int64(0);
    tx->commit();  // session-level locks outlive the transaction
    const bool changed = now != owned_;
    owned_ = std::move(now);
    return changed;
  }

  bool balanced() override {
    auto tx = store_.begin();
    // Live relays and shards held by anyone, in this database (see rebalance()).
    const Rows r = tx->execute(
        "SELECT count(DISTINCT pid) FILTER (WHERE classid::bigint = $1), "
        "count(*) FILTER (WHERE classid::bigint = $2), pg_backend_pid() FROM pg_locks "
        "WHERE locktype = 'advisory' AND objsubid = 2 AND granted "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        kMemberLockKey, kShardLockKey);
    tx->commit();
    if (r[0].int64(2) != session_) return false;  // a new session: our locks are gone
    const auto relays = std::max<std::int64_t>(1, r[0].int64(0));
    const auto share = static_cast<std::size_t>((kOutboxShards + relays - 1) / relays);
    return owned_.size() == share || (owned_.size() < share && r[0].int64(1) >= kOutboxShards);
  }
  void lost() noexcept override { owned_.clear(); }
  [[nodiscard]] const std::vector<int>& owned() const noexcept override { return owned_; }
  [[nodiscard]] std::int64_t session() const noexcept override { return session_; }

 private:
  Store& store_;
  std::int64_t session_ = 0;
  std::vector<int> owned_;
  int offset_ = static_cast<int>(std::random_device{}() % kOutboxShards);
};

}  // namespace

std::unique_ptr<ShardClaimer> make_shard_claimer(Store& claim_store) {
  return std::make_unique<PostgresShardClaimer>(claim_store);
}

}  // namespace idem::detail::pg
