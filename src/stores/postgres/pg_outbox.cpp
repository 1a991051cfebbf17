// The relay's statements on PostgreSQL and its LISTEN connection.
#include "stores/postgres/pg_outbox.hpp"

#include <libpq-fe.h>
#include <poll.h>

#include "idem/stores/postgres.hpp"
#include "stores/postgres/pg_outbox_sql.hpp"

namespace idem::detail::pg {

namespace {

using std::chrono::milliseconds;

constexpr std::string_view kLagSql =
    "SELECT count(*) FILTER (WHERE rejected_at IS NULL), "
    "coalesce((extract(epoch FROM now() - min(created_at) FILTER (WHERE rejected_at IS NULL)) "
    "* 1000)::bigint, -1), count(*) FILTER (WHERE rejected_at IS NOT NULL) "
    "FROM idem_outbox WHERE published_at IS NULL";
constexpr std::string_view kRejectSql =
    "UPDATE idem_outbox SET rejected_at = now(), rejected_reason = $2 "
    "WHERE id = $1 AND published_at IS NULL AND rejected_at IS NULL";
constexpr std::string_view kListRejectedSql =
    "SELECT id, event_id, topic, message_key, octet_length(payload), rejected_reason, "
    "(extract(epoch FROM rejected_at) * 1000)::bigint "
    "FROM idem_outbox WHERE rejected_at IS NOT NULL AND published_at IS NULL ORDER BY id LIMIT $1";
constexpr std::string_view kDeletePublishedSql =
    "DELETE FROM idem_outbox WHERE id IN (SELECT id FROM idem_outbox WHERE published_at < now() - "
    "$1::bigint * interval '1 millisecond' LIMIT $2::bigint)";

/// `LISTEN idem_outbox` on a connection of its own; the outbox trigger NOTIFYs it.
class PostgresOutboxListener final : public OutboxListener {
 public:
  explicit PostgresOutboxListener(std::unique_ptr<Store> store) : store_(std::move(store)) {}

  Wake wait(milliseconds timeout) noexcept override {
    PGconn* conn = postgres_native_handle(*store_);
    pollfd pfd{PQsocket(conn), POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(timeout.count())) <= 0) return Wake::TimedOut;
    if (PQconsumeInput(conn) == 0) return Wake::Lost;
    bool notified = false;
    while (PGnotify* n = PQnotifies(conn)) {
      PQfreemem(n);
      notified = true;
    }
    return notified ? Wake::Notified : Wake::TimedOut;
  }

 private:
  std::unique_ptr<Store> store_;
};

class PostgresOutboxQueries final : public OutboxQueries {
 public:
  std::string shard_filter(std::span<const int> shards) const override {
    std::string a = "{";
    for (std::size_t i = 0; i < shards.size(); ++i) {
      if (i > 0) a.push_back(',');
      a += std::to_string(shards[i]);
    }
    a.push_back('}');
    return a;
  }

  Rows claim(Store& store, std::int64_t after_id, std::string_view shard_filter,
             std::size_t limit) const override {
    auto tx = store.begin_read();
    Rows rows =
        tx->execute(kClaimOutboxSql, after_id, shard_filter, static_cast<std::int64_t>(limit));
    tx->commit();
    return rows;
  }

  // One statement per claim's worth of ids: PostgreSQL plans `id = ANY($1)` by the
  // array's length, and a few thousand ids turn the index scan into a sequential scan
  // of the whole outbox (published rows included), so one merged mark of 20,000 ids cost
  // more than twenty marks of 1,000. The statements are deferred: one round trip.
  void mark_published(Store& store, std::span<const std::int64_t> ids,
                      std::size_t ids_per_statement, std::string& list) const override {
    mark_ids_in_chunks(store, kMarkOutboxSql, ids, ids_per_statement, '{', '}', list);
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

  std::size_t concurrent_writers() const noexcept override { return static_cast<std::size_t>(-1); }

  std::unique_ptr<ShardClaimer> shard_claimer(Store& claim_store, std::string_view) const override {
    return make_shard_claimer(claim_store);
  }

  std::unique_ptr<OutboxListener> listen(std::string_view url,
                                         const StoreOptions& options) const override {
    auto store = open_store(url, options);
    PGresult* r = PQexec(postgres_native_handle(*store), "LISTEN idem_outbox");
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) return nullptr;
    return std::make_unique<PostgresOutboxListener>(std::move(store));
  }
};

}  // namespace

const OutboxQueries& outbox_queries() {
  static const PostgresOutboxQueries queries;
  return queries;
}

}  // namespace idem::detail::pg
