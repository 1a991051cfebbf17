#pragma once
/// \file
/// The outbox relay: publishes `idem_outbox` rows with an idempotent producer and marks
/// them published once the broker acknowledged them (rule OUTBOX).
///
/// Guarantees (docs/outbox.md has the reasoning):
/// - Nothing committed is lost: a row is marked published only after its ack; a crash
///   anywhere means the row is published again, with the same event_id (IDEM-1).
/// - Per-key order, also with several relays on PostgreSQL: rows are spread over
///   kOutboxShards shards by key; a relay publishes only shards it owns (a session-level
///   advisory lock per shard, released by the server the moment the relay's connection
///   dies), in id order, with in-order acks (idempotent producer, no message timeout).
///   The first occurrence of each event on the topic is therefore in id order per key;
///   later copies are duplicates that consumers drop by event_id.
/// - SQLite: one relay at a time (an exclusive lock on `<db>-relay.lock`); others wait.
/// - A row the producer or the broker refuses for good (too large, topic unknown or not
///   authorized, record invalid) is set aside as rejected, with its reason, and the relay
///   moves on; later rows, of its key too, are published. Transient errors are retried.
///   `list_rejected_outbox_rows` / `requeue_rejected_outbox_row` (idem/outbox.hpp).

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idem/producer.hpp"
#include "idem/store.hpp"

namespace idem {

/// When a claimed batch may be published (docs/failover.md).
enum class PublishAfter {
  /// As soon as its rows are committed on the primary. A failover to an asynchronous
  /// standby can then take back rows (and the orders that wrote them) whose events were
  /// already published.
  Committed,
  /// Once the commits of its rows are flushed on the standbys that `standbys` and
  /// `standby_quorum` name (PostgreSQL only; the relay's role needs pg_monitor): what a
  /// failover to one of them keeps, and nothing it can take back, is published.
  Replicated,
};

/// How to run a relay. Defaults are the production ones.
struct RelayConfig {
  std::string store_url;                  ///< open_store() URL (postgresql://... or sqlite://...)
  StoreOptions store_options;             ///< for the relay's own connections
  ProducerConfig producer;                ///< bootstrap servers, kafka pass-through, ...
  std::size_t batch_size = 1000;          ///< rows per claim
  std::size_t max_batches_in_flight = 8;  ///< claims produced but not yet acknowledged
  /// Connections (each with its own thread) that mark acknowledged batches published,
  /// so marks overlap with claims, produces and acks. 0: marks run inline on the relay's
  /// thread (the first design; kept for benchmarks and as a fallback). More than one
  /// lets marks also overlap each other: with fsync on, one mark's WAL flush overlaps the
  /// next mark's statements (12-38% faster in 7 of 9 same-run comparisons on PostgreSQL,
  /// bench/RELAY-RESULTS.md; only with fsync off did a second cost more in contention than
  /// it gained). sqlite://:memory: always marks inline (a second connection would be
  /// another database). SQLite uses at most one (it has one writer at a time).
  std::size_t mark_connections = 2;
  /// Polling interval when idle: the correctness path (LISTEN/NOTIFY only wakes earlier).
  std::chrono::milliseconds poll_interval{500};
  bool listen = true;  ///< PostgreSQL: LISTEN idem_outbox as a wake-up hint
  /// How often shard ownership is rebalanced among live relays (PostgreSQL) or the
  /// SQLite relay lock is retried by a standby relay.
  std::chrono::milliseconds rebalance_interval{2000};
  /// Published rows older than this are deleted, in batches of cleanup_batch rows.
  std::chrono::milliseconds retention{std::chrono::hours(24)};
  std::size_t cleanup_batch = 5000;
  std::chrono::milliseconds cleanup_interval{std::chrono::minutes(1)};
  /// How often progress (with the lag query) is reported; zero disables it.
  std::chrono::milliseconds progress_interval{5000};
  /// Wait after a database or permanent delivery error before trying again.
  std::chrono::milliseconds error_backoff{500};
  /// From request_stop() to run() returning, at most this long: the wait for the
  /// acknowledgements of what is in flight and for their marks ends there, also when the
  /// broker or the database is gone. Rows produced but not marked published by then stay
  /// unpublished and are sent again by the next relay (same event_id: consumers
  /// deduplicate them). Was `shutdown_timeout` (10 s), which bounded the acknowledgements
  /// only.
  std::chrono::milliseconds stop_timeout{30'000};
  /// When a claimed batch may be produced: committed (at once) or replicated (once its
  /// rows' commits are flushed on the standbys below). Up to max_batches_in_flight
  /// batches wait for the standbys besides those in flight, so the wait delays a batch
  /// without narrowing the pipeline; it is reported in RelayProgress.
  PublishAfter publish_after = PublishAfter::Committed;
  /// Replicated: the standbys that count, by their application_name in
  /// pg_stat_replication (set it in each standby's primary_conninfo), each name once.
  /// Empty: the standbys the primary makes synchronous (synchronous_standby_names) count,
  /// and the relay refuses to start when that setting is empty.
  std::vector<std::string> standbys;
  /// Replicated: how many of the counted standbys must have flushed a batch's commits
  /// before it is produced (ANY k, as in synchronous_standby_names). A failover to a
  /// standby outside those k can still take rows back: name the standbys your failover
  /// may promote and count them all to exclude it.
  std::size_t standby_quorum = 1;
};

/// Where the relay is in one batch; for observers (and crash tests, which kill the
/// process at a chosen step).
enum class RelayStep {
  Claimed,   ///< rows read, nothing sent yet
  Produced,  ///< handed to the producer, not acknowledged yet
  Acked,     ///< every row acknowledged by the broker, not marked yet
  Marked,    ///< marked published (committed)
  Rejected,  ///< refused for good by the producer or the broker, set aside (committed)
};

/// Progress, as reported to the observer and by progress().
struct RelayProgress {
  std::uint64_t published = 0;  ///< rows marked published by this relay
  std::uint64_t batches = 0;    ///< batches marked
  std::uint64_t resent = 0;     ///< rows sent again after a failure (same event_id)
  std::uint64_t rejected = 0;   ///< rows set aside as rejected by this relay
  std::uint64_t cleaned = 0;    ///< published rows deleted by retention
  std::uint64_t producer_rebuilds = 0;
  /// Rows produced and not marked published yet (waiting for the broker's ack or for
  /// their mark), when the progress was reported.
  std::uint64_t in_flight = 0;
  int owned_shards = 0;       ///< of kOutboxShards
  std::int64_t backlog = -1;  ///< unpublished rows (all shards); -1 = not measured yet
  /// Age of the oldest unpublished row (the lag); nullopt when there is none. Rejected
  /// rows count in neither: they wait for an operator, not for the relay.
  std::optional<std::chrono::milliseconds> oldest_unpublished_age;
  /// Rows in the rejected state (all shards, any relay); -1 = not measured yet.
  std::int64_t rejected_rows = -1;
  /// publish_after = replicated: batches that waited for the standbys before they were
  /// produced, and their waits summed (a mean is replication_wait_total divided by
  /// replication_waits).
  std::uint64_t replication_waits = 0;
  std::chrono::milliseconds replication_wait_total{0};
  /// How long the oldest batch still waiting for the standbys has waited (0: none
  /// waits). It grows without bound while a counted standby is down or held back.
  std::chrono::milliseconds replication_waiting{0};
};

/// Callbacks; each is optional and runs on the relay's thread.
struct RelayObserver {
  std::function<void(RelayStep, std::size_t rows)> on_step;
  std::function<void(const RelayProgress&)> on_progress;
  std::function<void(std::string_view)> log;
};

/// The relay loop. One thread runs it (and produces); the relay also starts a claim
/// thread that reads the next batch ahead, and `mark_connections` marker threads, each on
/// its own connection. request_stop() may be called from any thread (or a signal handler:
/// it only stores an atomic flag).
class Relay {
 public:
  /// Opens the relay's connections (and, on PostgreSQL, LISTENs) and builds the
  /// producer. Does not migrate. \throws Error on connection or configuration failure;
  /// Error(Schema) when the store's idem schema is missing, older than this idem needs or
  /// newer than it knows (the message says which).
  explicit Relay(RelayConfig config, RelayObserver observer = {});
  /// Joins the relay's threads; except when a stop gave up on a claim or mark thread
  /// blocked in a database that does not answer: then the relay's memory and threads are
  /// left to the process's exit (joining would wait without bound).
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  /// Publishes until request_stop(). Transient database errors and broker errors are
  /// logged and retried (after error_backoff). On stop, waits for the
  /// acknowledgements of what is in flight and marks what was acknowledged, returning
  /// within config.stop_timeout of request_stop().
  /// \throws Error(Timeout, Internal) after the stop when it could not finish cleanly: rows
  ///   produced and not acknowledged in time, marks or a claim the database did not
  ///   finish in time, or the relay was failing (database or broker error) when stopped.
  ///   The message says which and that the rows not marked published are sent again by
  ///   the next relay (at-least-once publication).
  ///   A database error that redoing cannot fix (a dropped idem_outbox table, a revoked
  ///   privilege) stops the relay at once instead of being retried: it drops what is in
  ///   flight (never marking what was not acknowledged) and throws an Error whose message
  ///   says "stopping: the store refused a statement for good" and what to do
  ///   (docs/outbox.md).
  void run();

  /// Publishes until no unpublished row is left in the shards this relay owns and
  /// nothing is in flight, or until `timeout`. Returns true when it drained. Throws
  /// like run().
  /// For tests, benchmarks and `idem relay --until-empty`.
  bool run_until_empty(std::chrono::milliseconds timeout);

  /// Asks run() to stop. Thread- and async-signal-safe.
  void request_stop() noexcept;

  /// A snapshot of the counters (same thread as run(), or after it returned).
  [[nodiscard]] RelayProgress progress() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idem
