// Retention on PostgreSQL: a session advisory lock for the single instance, batched
// DELETEs, and the partitions of a RANGE-partitioned processed_event.
#include <fmt/format.h>

#include "idem/timestamp.hpp"
#include "stores/maintenance_operations.hpp"
#include "stores/postgres/pg_partitions.hpp"

namespace idem::detail::pg {

namespace {

using Millis = std::chrono::sys_time<std::chrono::milliseconds>;

// The session advisory lock that makes maintenance single-instance. Two-int form with a
// class id of its own, so it cannot collide with the relay's shard locks (class ids are
// small integers there). 0x69646d6e is "idmn".
constexpr std::int64_t kMaintenanceLockClass = 0x69646d6e;
constexpr std::int64_t kMaintenanceLockObject = 1;

// Bounded DELETEs, one per transaction. event_id is the first column of the primary key,
// so "born before the horizon" is a range scan of the key.
constexpr std::string_view kDeleteDedupSql =
    "DELETE FROM {table} p USING (SELECT event_id, consumer_group FROM {table} "
    "WHERE event_id < $1::uuid LIMIT $2::bigint) d "
    "WHERE p.event_id = d.event_id AND p.consumer_group = d.consumer_group";
constexpr std::string_view kDeleteOutboxSql =
    "DELETE FROM idem_outbox WHERE id IN (SELECT id FROM idem_outbox WHERE published_at < "
    "$1::timestamptz "
    "LIMIT $2::bigint)";

// Parses pg_get_expr(relpartbound): "FOR VALUES FROM ('uuid') TO ('uuid')" or "DEFAULT".
std::optional<DedupPartition> parse_bound(std::string name, std::string_view bound) {
  DedupPartition p;
  p.name = std::move(name);
  if (bound == "DEFAULT") {
    p.is_default = true;
    return p;
  }
  const auto quoted = [&](std::size_t from) -> std::optional<std::pair<Uuid, std::size_t>> {
    const auto open = bound.find('\'', from);
    if (open == std::string_view::npos) return std::nullopt;
    const auto close = bound.find('\'', open + 1);
    if (close == std::string_view::npos) return std::nullopt;
    auto id = Uuid::parse(bound.substr(open + 1, close - open - 1));
    if (!id) return std::nullopt;
    return std::pair(*id, close + 1);
  };
  const auto lower = quoted(bound.find("FROM"));
  if (!lower) return std::nullopt;
  const auto upper = quoted(lower->second);
  if (!upper) return std::nullopt;
  p.from = lower->first.timestamp();
  p.to = upper->first.timestamp();
  return p;
}

std::string quote_ident(std::string_view name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

class PostgresMaintenance final : public MaintenanceOperations {
 public:
  explicit PostgresMaintenance(Store& store) : store_(store) {}

  ErrorSource source() const noexcept override { return ErrorSource::Postgres; }
  void prepare() override {}

  bool try_lock() override {
    auto tx = store_.begin();
    // Session-level: it outlives this transaction and dies with the connection, so a
    // crashed maintenance process never blocks the next one.
    const bool got = tx->execute("SELECT pg_try_advisory_lock($1::int, $2::int)",
                                 kMaintenanceLockClass, kMaintenanceLockObject)[0]
                         .boolean(0);
    tx->commit();
    return got;
  }

  void unlock() noexcept override {
    try {
      auto tx = store_.begin();
      tx->execute("SELECT pg_advisory_unlock($1::int, $2::int)", kMaintenanceLockClass,
                  kMaintenanceLockObject);
      tx->commit();
    } catch (...) {
      // The lock goes with the connection.
    }
  }

  std::int64_t delete_dedup_batch(const Uuid& cutoff, std::int64_t limit,
                                  const std::optional<std::string>& partition) override {
    const std::string sql = fmt::format(
        fmt::runtime(kDeleteDedupSql),
        fmt::arg("table", partition ? quote_ident(*partition) : std::string("processed_event")));
    auto tx = store_.begin();
    const Rows r = tx->execute(sql, cutoff, limit);
    tx->commit();
    return r.affected();
  }

  std::int64_t delete_outbox_batch(std::chrono::system_clock::time_point cutoff,
                                   std::int64_t limit) override {
    auto tx = store_.begin();
    const Rows r = tx->execute(
        kDeleteOutboxSql, Timestamp(std::chrono::floor<std::chrono::microseconds>(cutoff)), limit);
    tx->commit();
    return r.affected();
  }

  std::optional<std::vector<DedupPartition>> partitions() override {
    {
      auto tx = store_.begin();
      const Rows r = tx->execute(
          "SELECT c.relkind::text FROM pg_class c WHERE c.oid = to_regclass('processed_event')");
      tx->commit();
      if (r.empty() || r[0].text(0) != "p") return std::nullopt;
    }
    auto tx = store_.begin();
    const Rows rows = tx->execute(
        "SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
        "JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = to_regclass('processed_event') ORDER BY 1");
    tx->commit();
    std::vector<DedupPartition> out;
    for (const RowView row : rows) {
      auto p = parse_bound(std::string(row.text(0)), row.text(1));
      if (!p) {
        throw Error(ErrorCode::Schema, ErrorSource::Postgres,
                    fmt::format("retention: cannot read the bounds of partition {}: {}",
                                row.text(0), row.text(1)));
      }
      out.push_back(std::move(*p));
    }
    return out;
  }

  std::vector<DedupPartition> plan_partitions(
      const MigrateOptions& plan, std::chrono::system_clock::time_point now) const override {
    std::vector<DedupPartition> out;
    for (auto& spec : pg::plan_partitions(plan, now)) {
      out.push_back(DedupPartition{std::move(spec.name), false, spec.from, spec.to});
    }
    return out;
  }

  std::int64_t create_partition(const DedupPartition& partition,
                                const std::optional<std::string>& default_partition) override {
    auto tx = store_.begin();
    tx->execute("SET LOCAL lock_timeout = '5s'");
    std::int64_t moved = 0;
    if (default_partition) {
      // Rows of this range that landed in the DEFAULT partition (a producer clock ahead
      // of ours) would make CREATE ... PARTITION OF fail; move them into the new
      // partition in the same transaction. The lock keeps new ones from arriving
      // meanwhile; it is held for as long as this (normally empty) move takes.
      const std::string from = Uuid::lower_bound_for(partition.from).to_string();
      const std::string to = Uuid::lower_bound_for(partition.to).to_string();
      const std::string def = quote_ident(*default_partition);
      tx->execute("LOCK TABLE processed_event IN SHARE ROW EXCLUSIVE MODE");
      tx->execute(
          fmt::format("CREATE TEMP TABLE idem_moving ON COMMIT DROP AS SELECT * FROM {} "
                      "WHERE event_id >= '{}' AND event_id < '{}'",
                      def, from, to));
      moved = tx->execute(fmt::format("DELETE FROM {} WHERE event_id >= '{}' AND event_id < '{}'",
                                      def, from, to))
                  .affected();
    }
    std::string ddl = partition_ddl(PartitionSpec{partition.name, partition.from, partition.to});
    while (!ddl.empty() && (ddl.back() == '\n' || ddl.back() == ';')) ddl.pop_back();
    tx->execute(ddl);
    if (moved > 0) tx->execute("INSERT INTO processed_event SELECT * FROM idem_moving");
    tx->commit();
    return moved;
  }

  void drop_partition(const std::string& name) override {
    auto tx = store_.begin();
    // A short wait for the lock, not a queue that stalls every consumer behind us: if a
    // long transaction holds the table, the partition goes on the next run.
    tx->execute("SET LOCAL lock_timeout = '5s'");
    tx->execute("DROP TABLE " + quote_ident(name));
    tx->commit();
  }

 private:
  Store& store_;
};

}  // namespace

std::unique_ptr<MaintenanceOperations> make_maintenance_operations(Store& store) {
  return std::make_unique<PostgresMaintenance>(store);
}

}  // namespace idem::detail::pg
