#pragma once
/// \file
/// The transactional outbox (rule OUTBOX): an event born together with a database
/// change is written to the `idem_outbox` table in the same transaction, and a relay
/// (idem/relay.hpp) publishes it afterwards. The event_id is created here, once, when
/// the row is written (IDEM-1): the caller's factory receives it and puts it into the
/// payload, so the payload's id and the row's event_id are the same value, and every
/// later resend of the row carries it again.
///
///   idem::Outbox outbox;
///   auto tx = store.begin();
///   tx->execute("UPDATE orders SET status = 'confirmed' WHERE id = $1", order_id);
///   outbox.enqueue(*tx, [&](const idem::Uuid& event_id) {
///     return idem::OutboxMessage{.aggregate_type = "order", .aggregate_id = "42",
///                                .topic = "orders", .payload = make_json(event_id)};
///   });
///   tx->commit();  // the update and the event commit together, or neither does

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/store.hpp"
#include "idem/uuid.hpp"

namespace idem {

/// Number of shards the outbox rows are spread over by message key. Fixed by the
/// schema (a CHECK constraint): changing it would move keys between shards.
inline constexpr int kOutboxShards = 64;

/// The shard of a message key: FNV-1a 32-bit of the key's bytes, mod kOutboxShards.
/// Stable across processes, platforms and versions (it is stored in the rows).
[[nodiscard]] int outbox_shard(std::string_view message_key) noexcept;

/// What a factory returns for enqueue(): one event, not yet with its row.
struct OutboxMessage {
  std::string aggregate_type;  ///< e.g. "order"
  std::string aggregate_id;    ///< e.g. "42"; the Kafka key unless message_key is set
  std::string topic;           ///< Kafka topic
  std::string payload;         ///< the event, normally JSON carrying the event_id
  /// Extra Kafka headers, e.g. {"traceparent", "00-..."}. The relay always adds
  /// `event_id` itself; a header of that name here is rejected.
  std::vector<std::pair<std::string, std::string>> headers;
  std::optional<std::string> message_key;  ///< Kafka key; defaults to aggregate_id
};

/// A factory that builds the message for a freshly generated event_id.
using OutboxEventFactory = std::function<OutboxMessage(const Uuid& event_id)>;

/// An outbox row as Outbox::enqueue() writes it, for a writer that inserts it through a
/// database connection of its own (a service in another language holding its own
/// connection and transaction): insert it with outbox_insert_statement().
struct OutboxRow {
  Uuid event_id;             ///< born once, in Outbox::prepare() (IDEM-1)
  OutboxMessage message;     ///< as the factory made it, `traceparent` added when absent
  std::string message_key;   ///< message.message_key, or message.aggregate_id
  int shard = 0;             ///< outbox_shard(message_key)
  std::string headers_json;  ///< outbox_headers_to_json(message.headers)
};

/// The INSERT of one outbox row, with placeholders `$1`..`$8` for, in this order: event_id
/// (uuid on PostgreSQL, a 16-byte BLOB on SQLite), aggregate_type, aggregate_id, topic,
/// message_key, shard, payload and headers_json (jsonb on PostgreSQL) of an OutboxRow.
/// The same text on both backends.
[[nodiscard]] std::string_view outbox_insert_statement() noexcept;

/// Writes outbox rows through the caller's transaction.
///
/// Thread-safe: enqueue() may be called from several threads on different
/// transactions (the UUIDv7 generator is shared and thread-safe).
class Outbox {
 public:
  /// Uses the process-wide UUIDv7 generator (new_uuid_v7()).
  Outbox() = default;
  /// Uses `generator`, which must outlive the Outbox (tests pass one with a fake clock).
  explicit Outbox(UuidV7Generator& generator) noexcept : generator_(&generator) {}

  /// Generates a UUIDv7 once, calls `factory(id)`, and inserts the row inside `tx`.
  /// Returns the id. Nothing is published until `tx` commits; if it rolls back, the
  /// row and its event never existed. Call it after the statement that locks the
  /// aggregate's row (e.g. the UPDATE of the order), so that events of one aggregate
  /// get ids in the order their transactions commit.
  /// \throws Error(InvalidArgument) for an empty topic or key or an `event_id` header;
  ///   whatever `tx.execute` throws (the transaction is then unusable, as always);
  ///   whatever `factory` throws.
  Uuid enqueue(Transaction& tx, const OutboxEventFactory& factory);

  /// What enqueue() inserts, without inserting it: the id born now, the factory's message
  /// checked and its `traceparent` added, the key, its shard and the headers' JSON.
  /// \throws as enqueue() does, before anything is written.
  [[nodiscard]] OutboxRow prepare(const OutboxEventFactory& factory);

 private:
  UuidV7Generator* generator_ = nullptr;
};

/// An outbox row the relay set aside because the producer or the broker refused it for
/// good (docs/outbox.md, "Rows the broker refuses"). It stays unpublished and is never
/// claimed again until requeued.
struct RejectedOutboxRow {
  std::int64_t id = 0;
  Uuid event_id;
  std::string topic;
  std::string message_key;
  std::int64_t payload_bytes = 0;
  std::string reason;               ///< the producer's or the broker's error
  std::int64_t rejected_at_ms = 0;  ///< Unix ms
};

/// Up to `limit` rejected rows, oldest id first. \throws Error like the store does.
[[nodiscard]] std::vector<RejectedOutboxRow> list_rejected_outbox_rows(Store& store,
                                                                       std::int64_t limit = 1000);

/// Puts rejected row `id` back in line once the cause is fixed: the relay claims it again
/// (after the rows it published meanwhile, so after later rows of its key). Returns false
/// when no rejected row has that id. \throws Error like the store does.
bool requeue_rejected_outbox_row(Store& store, std::int64_t id);

/// Serializes headers as a flat JSON object of strings (the outbox `headers` column).
[[nodiscard]] std::string outbox_headers_to_json(
    const std::vector<std::pair<std::string, std::string>>& headers);
/// Parses what outbox_headers_to_json wrote (any flat JSON object of strings).
/// \throws Error(Query) for anything else.
[[nodiscard]] std::vector<std::pair<std::string, std::string>> outbox_headers_from_json(
    std::string_view json);

/// Unpublished rows and the age of the oldest, by the database's clock. Rejected rows
/// (set aside, never claimed) are counted apart: they do not wait for the relay.
struct OutboxLag {
  std::int64_t backlog = 0;
  std::optional<std::chrono::milliseconds> oldest_unpublished_age;  ///< nullopt: none left
  std::int64_t rejected = 0;                                        ///< rows in the rejected state
};

/// The outbox's backlog on `store`: rows not yet published, the age of the oldest, and
/// the rows refused for good. Read on its own transaction.
[[nodiscard]] OutboxLag outbox_lag(Store& store);

/// The outbox rows with an id above `after_id` (one run's rows, for an audit): how many
/// there are and how many of them are not published yet.
struct OutboxSlice {
  std::int64_t rows = 0;
  std::int64_t unpublished = 0;
};
[[nodiscard]] OutboxSlice outbox_rows_after(Transaction& tx, std::int64_t after_id);

/// The id of the last outbox row written (0 when there is none): where a run's rows begin.
[[nodiscard]] std::int64_t outbox_last_row_id(Transaction& tx);

/// How many events of the outbox rows with an id above `after_id` consumer group
/// `consumer_group` has marked processed: for an audit, the effects applied.
[[nodiscard]] std::int64_t outbox_events_processed(Transaction& tx, std::string_view consumer_group,
                                                   std::int64_t after_id);

/// Marks the rows with ids in [first_id, end_id) unpublished again, so the relay publishes
/// them once more, with their event ids: a producer's resend, for demos and tests of
/// duplicate delivery. Returns how many rows it marked.
std::int64_t republish_outbox_rows(Transaction& tx, std::int64_t first_id, std::int64_t end_id);

}  // namespace idem
