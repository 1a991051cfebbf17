#pragma once
/// \file
/// Prometheus metrics for consumers, relays and TTL runs, and the admin HTTP server
/// that serves them with /healthz and /readyz.
///
/// Counters are read from Consumer::stats() (per route too, ConsumerStats::routes) and
/// RelayProgress when Prometheus scrapes, so they cost nothing per event. Histograms are fed per
/// batch (ConsumerHooks::on_batch) and per handler call (Metrics::timed). Metric names are declared
/// once, below.
///
/// prometheus-cpp is linked privately: this header does not include it.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idem/config_keys.hpp"
#include "idem/consumer.hpp"
#include "idem/relay.hpp"
#include "idem/store.hpp"

namespace idem {

/// Every metric idem exports (Prometheus naming: `_total` counters, base units).
namespace metric {
// Consumer; label `group` (and `topic`, `partition`, `reason` where noted).
inline constexpr std::string_view kRecordsDelivered = "idem_consumer_records_delivered_total";
inline constexpr std::string_view kEventsProcessed = "idem_consumer_events_processed_total";
inline constexpr std::string_view kDuplicatesSkipped = "idem_consumer_duplicates_skipped_total";
inline constexpr std::string_view kDeadLettered = "idem_consumer_dead_lettered_total";  // + reason
inline constexpr std::string_view kDeadLettersRefused = "idem_consumer_dead_letters_refused_total";
inline constexpr std::string_view kRetries = "idem_consumer_retries_total";
inline constexpr std::string_view kTransactions = "idem_consumer_transactions_total";
inline constexpr std::string_view kTransactionSeconds =
    "idem_consumer_transaction_duration_seconds";
inline constexpr std::string_view kBatchRecords = "idem_consumer_batch_records";
inline constexpr std::string_view kHandlerSeconds =
    "idem_consumer_handler_duration_seconds";  // + topic
inline constexpr std::string_view kOffsetCommits = "idem_consumer_offset_commits_total";
/// Offsets in the store: partitions where the stored offset and Kafka's committed offset
/// (or the consumer's position after a reconnect) disagreed, and by how many records.
inline constexpr std::string_view kOffsetDisagreements = "idem_consumer_offset_disagreements_total";
inline constexpr std::string_view kOffsetRecordsReadAgain =
    "idem_consumer_offset_records_read_again_total";
inline constexpr std::string_view kOffsetRecordsNotReadAgain =
    "idem_consumer_offset_records_not_read_again_total";
inline constexpr std::string_view kLag = "idem_consumer_lag_records";  // + topic, partition
inline constexpr std::string_view kAssignedPartitions = "idem_consumer_assigned_partitions";
// Routes of sinks declared in a file (ConsumerStats::routes); labels `group`, `route`
// (and `reason` where noted).
inline constexpr std::string_view kRouteApplied = "idem_route_events_applied_total";
inline constexpr std::string_view kRouteDuplicates = "idem_route_duplicates_skipped_total";
inline constexpr std::string_view kRouteDeadLettered = "idem_route_dead_lettered_total";  // reason
inline constexpr std::string_view kRouteCallSeconds = "idem_route_call_duration_seconds";
inline constexpr std::string_view kRoutePaused = "idem_route_paused";
// Relay.
inline constexpr std::string_view kRelayPublished = "idem_relay_events_published_total";
inline constexpr std::string_view kRelayBatches = "idem_relay_batches_total";
inline constexpr std::string_view kRelayResent = "idem_relay_events_resent_total";
inline constexpr std::string_view kRelayCleaned = "idem_relay_outbox_rows_deleted_total";
inline constexpr std::string_view kRelayRejected = "idem_relay_outbox_rows_rejected_total";
inline constexpr std::string_view kRelayRejectedRows = "idem_relay_outbox_rejected_rows";
inline constexpr std::string_view kRelayBacklog = "idem_relay_outbox_backlog_rows";
inline constexpr std::string_view kRelayLagSeconds = "idem_relay_outbox_lag_seconds";
inline constexpr std::string_view kRelayOwnedShards = "idem_relay_owned_shards";
// Relay with publish_after = replicated: batches that waited for the standbys, the
// waits summed, and how long the oldest batch still waiting has waited.
inline constexpr std::string_view kRelayReplicationWaits = "idem_relay_replication_waits_total";
inline constexpr std::string_view kRelayReplicationWaitSeconds =
    "idem_relay_replication_wait_seconds_total";
inline constexpr std::string_view kRelayReplicationWaiting =
    "idem_relay_replication_waiting_seconds";
// TTL (retention) runs; label `table`.
inline constexpr std::string_view kTtlRuns = "idem_ttl_runs_total";
inline constexpr std::string_view kTtlDeletedRows = "idem_ttl_deleted_rows_total";
}  // namespace metric

/// Records durations into one histogram. Cheap to copy; valid while its Metrics lives.
class DurationRecorder {
 public:
  void record(std::chrono::nanoseconds d) const noexcept;

 private:
  friend class Metrics;
  explicit DurationRecorder(void* histogram) noexcept : histogram_(histogram) {}
  void* histogram_;
};

/// A metrics registry. Thread-safe. Watched consumers must be unwatched (or outlive it).
class Metrics {
 public:
  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  /// Exposes `consumer`'s counters and per-partition lag under label group=`group`,
  /// read from stats() at each scrape. `consumer` must stay alive until unwatch().
  void watch(const Consumer& consumer, std::string group);
  void unwatch(const Consumer& consumer);

  /// `hooks` plus an on_batch that feeds the batch-size and transaction-latency
  /// histograms (an existing on_batch still runs).
  [[nodiscard]] ConsumerHooks instrument(std::string group, ConsumerHooks hooks = {});

  /// `handler`, timed into the handler-latency histogram of (group, topic).
  template <class Event>
  [[nodiscard]] Handler<Event> timed(const std::string& group, const std::string& topic,
                                     Handler<Event> handler) {
    const DurationRecorder recorder = handler_recorder(group, topic);
    return [recorder, inner = std::move(handler)](const Event& event, const RecordInfo& record,
                                                  Transaction& tx) {
      const auto start = std::chrono::steady_clock::now();
      struct Record {  // also when the handler throws
        const DurationRecorder& r;
        std::chrono::steady_clock::time_point start;
        ~Record() { r.record(std::chrono::steady_clock::now() - start); }
      } on_exit{recorder, start};
      return inner(event, record, tx);
    };
  }
  [[nodiscard]] DurationRecorder handler_recorder(const std::string& group,
                                                  const std::string& topic);

  /// The call-latency histogram of a route's HTTP calls (from the first attempt to the
  /// final answer, retries included) under labels group=`group`, route=`route`.
  [[nodiscard]] DurationRecorder call_recorder(const std::string& group, const std::string& route);
  /// Sets the gauge saying whether `route` of `group` is paused (every call failing for a
  /// reason of the route's own, such as 401, 403 or 404). Thread-safe.
  void set_route_paused(const std::string& group, const std::string& route, bool paused);

  /// `observer` plus relay metrics: published rows and batches as they are marked,
  /// backlog, outbox lag, resends, cleanup, owned shards and the waits for the standbys
  /// (publish_after = replicated) at each progress report.
  [[nodiscard]] RelayObserver instrument(RelayObserver observer = {});

  /// One retention (TTL) run over `table` that deleted `deleted_rows` rows.
  void record_ttl_run(std::string_view table, std::uint64_t deleted_rows);

  /// Everything in the Prometheus text exposition format (version 0.0.4).
  [[nodiscard]] std::string scrape() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// One readiness condition: returns nullopt when satisfied, else why not.
struct ReadinessCheck {
  std::string name;
  std::function<std::optional<std::string>()> check;
};

/// Ready when `consumer` has partitions assigned and its loop turned within `stuck_after`.
[[nodiscard]] ReadinessCheck consumer_readiness(const Consumer& consumer,
                                                std::chrono::milliseconds stuck_after);
/// Ready when a `SELECT 1` on a connection of its own succeeds (at most one probe per
/// second; later calls reuse the result). The error shown never contains the URL.
[[nodiscard]] ReadinessCheck store_readiness(std::string store_url, StoreOptions options);

/// The admin HTTP server: GET /metrics (Prometheus text), /healthz (200 while the
/// process serves), /readyz (200 when every check passes, else 503 naming the failures).
/// cpp-httplib rather than prometheus-cpp's Exposer: the Exposer serves only
/// collectables, and /readyz must answer 503 with a reason on the same port.
class AdminServer {
 public:
  /// Binds `listen` (host:port; port 0 picks a free one) and serves on a thread of its own.
  /// `metrics` must outlive the server. \throws Error(Connection, Config) if it cannot bind.
  AdminServer(const std::string& listen, const Metrics& metrics,
              std::vector<ReadinessCheck> checks = {});
  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  /// The port it listens on.
  [[nodiscard]] int port() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// `admin.*`: the HTTP port of `idem consume` and `idem relay` serving /metrics, /healthz
/// and /readyz (AdminServer).
struct AdminSettings {
  std::string listen;  ///< host:port; empty = no admin server (port 0 picks a free port)
  /// /readyz reports "stuck" when the consumer loop has not turned for this long.
  std::chrono::milliseconds stuck_after{60'000};
  bool console = false;  ///< serve the web console on the same port (docs/console.md)
};

/// Declares the `admin.*` keys (ConfigSchema::add<AdminSettings>).
void declare_admin_keys(SectionKeys<AdminSettings>& keys);

}  // namespace idem
