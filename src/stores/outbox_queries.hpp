#pragma once
// The outbox's backend half: every statement the relay issues, its wake-up channel and
// its shard ownership, one implementation per backend (src/stores/<backend>/). The relay
// (src/outbox/) holds the policy (what to claim when, the pipeline, retries) and never
// sees a backend's SQL, its native handle or which backend it runs on.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "idem/outbox.hpp"
#include "idem/store.hpp"
#include "stores/replication.hpp"

namespace idem::detail {

/// The columns of OutboxQueries::claim()'s rows, in this order.
enum ClaimColumn : std::size_t {
  kClaimId = 0,   ///< idem_outbox.id (bigint)
  kClaimEventId,  ///< event_id (UUID, born with the event)
  kClaimTopic,
  kClaimKey,  ///< message_key
  kClaimPayload,
  kClaimHeaders,  ///< headers as JSON text
  kClaimSession,  ///< the database session that ran the claim (PostgreSQL: backend pid; else 0)
};

/// An outbox row the producer or the broker refused for good, and why.
struct RejectedRow {
  std::int64_t id = 0;
  std::string reason;
};

/// Which outbox shards this relay may publish. A relay publishes a shard only while it
/// owns it, so no two relays ever publish one key's events concurrently. Its calls run
/// on the claim connection it was made for (the one whose session holds the locks).
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
  /// The database session holding the ownership as of the last rebalance, as claims
  /// report it in kClaimSession: a claim on another session means the connection was
  /// silently replaced and the ownership is gone. 0 where ownership has no session.
  [[nodiscard]] virtual std::int64_t session() const noexcept = 0;
};

/// A connection that is told when outbox rows are inserted (PostgreSQL LISTEN
/// idem_outbox): a wake-up hint only, polling stays the correctness path.
class OutboxListener {
 public:
  enum class Wake { Notified, TimedOut, Lost };
  virtual ~OutboxListener() = default;
  /// Blocks up to `timeout` for a notification. Lost: the connection broke (drop the
  /// listener and poll; a new one may be opened later). Never throws.
  [[nodiscard]] virtual Wake wait(std::chrono::milliseconds timeout) noexcept = 0;
};

/// The relay's statements on one backend. Stateless: one instance per backend serves
/// every relay and thread; each call runs on the Store it is given (which must have no
/// open transaction) and throws idem::Error like the Store does.
class OutboxQueries {
 public:
  virtual ~OutboxQueries() = default;

  /// The owned shards in the form claim() takes (encoded once per ownership change,
  /// not per claim).
  [[nodiscard]] virtual std::string shard_filter(std::span<const int> shards) const = 0;

  /// Up to `limit` unpublished rows with id > `after_id` in the filtered shards, in id
  /// order, columns as ClaimColumn; never a rejected row; in a read transaction (on SQLite a claim
  /// then never queues behind a marker's write). With `wal_after` (PostgreSQL only), the
  /// same transaction then reads the WAL position every claimed row's commit lies at or
  /// below (wal_insert_position): in one transaction, so both come from one session on
  /// one server, never from a connection replaced between them.
  [[nodiscard]] virtual Rows claim(Store& store, std::int64_t after_id,
                                   std::string_view shard_filter, std::size_t limit,
                                   WalPosition* wal_after = nullptr) const = 0;

  /// Marks `ids` published (rows already published stay as they are), in one
  /// transaction of one statement per `ids_per_statement` ids, pipelined where the
  /// backend can. `scratch` is a reusable buffer for the id lists.
  virtual void mark_published(Store& store, std::span<const std::int64_t> ids,
                              std::size_t ids_per_statement, std::string& scratch) const = 0;

  /// Sets `rows` aside: rejected now, with their reasons, never claimed again (until
  /// requeue_rejected()); in one transaction. Published or already rejected rows stay
  /// as they are.
  virtual void mark_rejected(Store& store, std::span<const RejectedRow> rows) const = 0;

  /// Up to `limit` rejected rows in id order, columns as RejectedColumn.
  [[nodiscard]] virtual Rows list_rejected(Store& store, std::int64_t limit) const = 0;

  [[nodiscard]] virtual OutboxLag lag(Store& store) const = 0;

  /// Deletes at most `limit` rows published more than `older_than` ago (by the
  /// database's clock), in one transaction. Returns the number deleted.
  [[nodiscard]] virtual std::int64_t delete_published(Store& store,
                                                      std::chrono::milliseconds older_than,
                                                      std::int64_t limit) const = 0;

  /// How many connections can usefully mark at once (SQLite has one writer at a time).
  [[nodiscard]] virtual std::size_t concurrent_writers() const noexcept = 0;

  /// Shard ownership on `claim_store`'s session; `url` is the store's URL (SQLite finds
  /// its lock file next to the database file).
  [[nodiscard]] virtual std::unique_ptr<ShardClaimer> shard_claimer(Store& claim_store,
                                                                    std::string_view url) const = 0;

  /// Opens a listener on a connection of its own. nullptr when the backend has no
  /// notifications, or when the server refused to LISTEN. Throws Error when the
  /// connection cannot be opened.
  [[nodiscard]] virtual std::unique_ptr<OutboxListener> listen(
      std::string_view url, const StoreOptions& options) const = 0;
};

/// The columns of OutboxQueries::list_rejected()'s rows, in this order.
enum RejectedColumn : std::size_t {
  kRejectedId = 0,
  kRejectedEventId,
  kRejectedTopic,
  kRejectedKey,
  kRejectedPayloadBytes,
  kRejectedReason,
  kRejectedAtMs,  ///< Unix ms
};

/// The statements for `store`'s backend.
[[nodiscard]] const OutboxQueries& outbox_queries(const Store& store);

// The parts of OutboxQueries that differ between backends only in their SQL, written
// once for both.

/// Marks `ids` with `mark_sql` ($1: the ids as one list literal `open id,id,... close`),
/// `ids_per_statement` per statement, deferred, in one transaction. `list` is the
/// caller's reusable buffer.
void mark_ids_in_chunks(Store& store, std::string_view mark_sql, std::span<const std::int64_t> ids,
                        std::size_t ids_per_statement, char open, char close, std::string& list);

/// Runs `reject_sql` ($1: id, $2: reason) once per row, in one transaction.
void reject_rows(Store& store, std::string_view reject_sql, std::span<const RejectedRow> rows);

/// Runs `list_sql` ($1: limit) in a read transaction.
[[nodiscard]] Rows read_rejected_rows(Store& store, std::string_view list_sql, std::int64_t limit);

/// Puts rejected row `id` back in line (the same statement on every backend). Returns
/// false when no rejected row has that id.
[[nodiscard]] bool requeue_rejected_row(Store& store, std::int64_t id);

/// Runs `lag_sql` (one row: backlog, age in ms of the oldest unpublished row or -1,
/// rejected rows).
[[nodiscard]] OutboxLag read_lag(Store& store, std::string_view lag_sql);

/// Runs `delete_sql` ($1: age in ms, $2: limit) in one transaction; the rows deleted.
[[nodiscard]] std::int64_t delete_published_rows(Store& store, std::string_view delete_sql,
                                                 std::chrono::milliseconds older_than,
                                                 std::int64_t limit);

}  // namespace idem::detail
