// The relay's statements on SQLite. Times are Unix milliseconds (idem's SQLite schema
// stores them that way), computed by SQLite itself, as PostgreSQL uses its now().
#include "stores/sqlite/sqlite_outbox.hpp"

#include <algorithm>

#include "stores/sqlite/sqlite_outbox_sql.hpp"

namespace idem::detail::sqlite {

namespace {

using std::chrono::milliseconds;

constexpr std::string_view kLagSql =
    "SELECT count(CASE WHEN rejected_at IS NULL THEN 1 END), "
    "coalesce(CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) - "
    "min(CASE WHEN rejected_at IS NULL THEN created_at END), -1), "
    "count(rejected_at) FROM idem_outbox WHERE published_at IS NULL";
constexpr std::string_view kRejectSql =
    "UPDATE idem_outbox SET rejected_at = CAST((julianday('now') - 2440587.5) * 86400000 AS "
    "INTEGER), "
    "rejected_reason = $2 WHERE id = $1 AND published_at IS NULL AND rejected_at IS NULL";
constexpr std::string_view kListRejectedSql =
    "SELECT id, event_id, topic, message_key, length(CAST(payload AS BLOB)), rejected_reason, "
    "rejected_at FROM idem_outbox WHERE rejected_at IS NOT NULL AND published_at IS NULL "
    "ORDER BY id LIMIT $1";
constexpr std::string_view kDeletePublishedSql =
    "DELETE FROM idem_outbox WHERE id IN (SELECT id FROM idem_outbox WHERE published_at < "
    "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) - $1 LIMIT $2)";

class SqliteOutboxQueries final : public OutboxQueries {
 public:
  // Every shard is the one relay's: the claim does not filter.
  std::string shard_filter(std::span<const int>) const override { return {}; }

  Rows claim(Store& store, std::int64_t after_id, std::string_view,
             std::size_t limit) const override {
    auto tx = store.begin_read();
    Rows rows = tx->execute(kClaimOutboxSql, after_id, static_cast<std::int64_t>(limit));
    tx->commit();
    return rows;
  }

  // The ids travel as one JSON array per statement (json_each), in the same chunks as
  // on PostgreSQL.
  void mark_published(Store& store, std::span<const std::int64_t> ids,
                      std::size_t ids_per_statement, std::string& list) const override {
    mark_ids_in_chunks(store, kMarkOutboxSql, ids, ids_per_statement, '[', ']', list);
  }

  void mark_rejected(Store& store, std::span<const RejectedRow> rows) const override {
    reject_rows(store, kRejectSql, rows);
  }

  Rows list_rejected(Store& store, std::int64_t limit) const override {
    return read_rejected_rows(store, kListRejectedSql, limit);
  }

  OutboxLag lag(Store& store) const override { return read_lag(store, kLagSql); }

  std::int64_t delete_published(Store& store, milliseconds older_than,
                                std::int64_t limit) const override {
    return delete_published_rows(store, kDeletePublishedSql, older_than, limit);
  }

  // One writer at a time: a second marker would only wait for the first.
  std::size_t concurrent_writers() const noexcept override { return 1; }

  std::unique_ptr<ShardClaimer> shard_claimer(Store&, std::string_view url) const override {
    std::string path(url.substr(std::min(url.size(), std::string_view("sqlite://").size())));
    if (path == ":memory:") path.clear();
    return make_shard_claimer(path.empty() ? path : path + "-relay.lock");
  }

  // SQLite has no notifications: the relay polls.
  std::unique_ptr<OutboxListener> listen(std::string_view, const StoreOptions&) const override {
    return nullptr;
  }
};

}  // namespace

const OutboxQueries& outbox_queries() {
  static const SqliteOutboxQueries queries;
  return queries;
}

}  // namespace idem::detail::sqlite
