#include "outbox/shard_claimer.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "idem/outbox.hpp"

namespace idem::detail {

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
      tx->execute("SELECT pg_advisory_unlock($1::int, s) FROM unnest($2::int[]) s",
                  kShardLockKey, int_array(excess));
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

class SqliteShardClaimer final : public ShardClaimer {
 public:
  explicit SqliteShardClaimer(std::string lock_path) : lock_path_(std::move(lock_path)) {}
  ~SqliteShardClaimer() override {
    if (fd_ >= 0) ::close(fd_);
  }

  bool rebalance() override {
    if (!owned_.empty()) return false;
    if (!lock_path_.empty()) {
      if (fd_ < 0) {
        fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd_ < 0) {
          throw Error(ErrorCode::Connection, ErrorSource::Sqlite,
                      fmt::format("relay: cannot open {}: {}", lock_path_, std::strerror(errno)));
        }
      }
      if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) return false;  // another relay runs
    }
    for (int s = 0; s < kOutboxShards; ++s) owned_.push_back(s);
    return true;
  }
  // The owner owns everything; a standby has nothing in flight and tries the lock.
  bool balanced() override { return !owned_.empty(); }
  void lost() noexcept override {}  // the file lock does not depend on the connection
  [[nodiscard]] const std::vector<int>& owned() const noexcept override { return owned_; }
  [[nodiscard]] std::int64_t session() const noexcept override { return 0; }

 private:
  std::string lock_path_;  // empty for :memory: (private to one connection anyway)
  int fd_ = -1;
  std::vector<int> owned_;
};

}  // namespace

std::unique_ptr<ShardClaimer> make_shard_claimer(Store& store, const std::string& url) {
  if (store.backend() == Backend::Postgres) return std::make_unique<PostgresShardClaimer>(store);
  std::string path = url.substr(std::string_view("sqlite://").size());
  if (path == ":memory:") path.clear();
  return std::make_unique<SqliteShardClaimer>(path.empty() ? path : path + "-relay.lock");
}

}  // namespace idem::detail
