#pragma once
/// \file
/// idem::Consumer: a Kafka consumer that gives each valid event exactly one effect
/// (IDEM-3, IDEM-X1, IDEM-X2, CONS-X1, EVT-4, DUP-SOURCES).
///
/// Per batch: poll; validate every record at the boundary (an invalid one goes to the
/// DLQ topic and is never retried); in ONE database transaction mark the batch's
/// event ids with one statement, run the handler of each new event in partition order
/// inside its own savepoint, commit; and only then commit the Kafka offsets of exactly
/// what was processed. Duplicates skip the handler. Transient failures pause only the
/// affected partitions and retry them with capped exponential backoff.
///
/// This header does not include librdkafka (pimpl); librdkafka is linked privately.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/clock.hpp"
#include "idem/dedup_horizon.hpp"
#include "idem/events/event_codec.hpp"
#include "idem/events/validation.hpp"
#include "idem/handler.hpp"
#include "idem/retry.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"

namespace idem {

/// Non-blocking retries (off by default). When `delays` is non-empty, an event whose
/// handler returns Outcome::Retry (or throws a transient non-database idem::Error) is not
/// retried in place: its effect and mark are undone, the record (same key, payload and
/// headers) goes to the retry topic of its attempt, and its partition moves on. Retry
/// topic n (1-based) of topic T is `T.retry.<group_id>.<n>`; it holds records that failed
/// n times, each with `idem.attempts` = n and `idem.retry.not_before` (ms since the epoch)
/// = failure time + delays[n-1]. The consumer subscribes to its retry topics and processes
/// a record there no earlier than its not_before (the retry partition pauses; the poll loop
/// never sleeps). After max_attempts() failed attempts the record goes to the DLQ of T
/// with `idem.attempts` = max_attempts().
///
/// Trade-off: a retried event can be overtaken by later events of its key. Keep this off
/// (blocking retry) for topics whose per-key order matters. Database errors (the store
/// unavailable) stay blocking even when this is on: every event would fail alike.
struct RetryTopics {
  std::vector<std::chrono::milliseconds> delays;  ///< one per retry topic; empty = off

  [[nodiscard]] bool enabled() const noexcept { return !delays.empty(); }
  /// Handler attempts in all: the first one plus one per retry topic.
  [[nodiscard]] std::uint32_t max_attempts() const noexcept {
    return static_cast<std::uint32_t>(delays.size()) + 1;
  }
};

/// What the consumer does with an event born past the dedup horizon (its dedup row may
/// already be deleted by retention, so a redelivery could run its effect twice).
enum class StaleEventPolicy {
  Quarantine,  ///< send it to the DLQ with reason `stale`; never execute it (default)
  Process,     ///< execute it like any other event (counted in ConsumerStats::stale)
  Skip,        ///< neither execute nor dead-letter it; its offset advances
};

/// How to run a Consumer. Plain data; validated by the Consumer constructor.
struct ConsumerConfig {
  std::string bootstrap_servers;    ///< librdkafka `bootstrap.servers`; required
  std::string group_id;             ///< consumer group, also the dedup rows' group; required
  std::vector<std::string> topics;  ///< subscription; at least one
  std::size_t batch_size = 500;     ///< records per transaction, at most; 1 = per message
  /// After the first record of a batch arrives, wait at most this long for more.
  std::chrono::milliseconds batch_window{50};
  /// 1: a batch is polled, processed, committed and its offsets committed before the
  /// next. 2: while a batch's COMMIT waits for the database's flush, the next batch is
  /// polled and prepared (validated, marked, handlers run) on a second store connection
  /// (Store::connect_again); it commits only after the first committed, and offsets stay
  /// in order (docs/consumer.md, "Commit overlap"). Handlers then run while the batch
  /// before is not yet committed: a handler that reads rows an earlier event wrote must
  /// lock them (SELECT ... FOR UPDATE) or update them in place, as with concurrent
  /// consumers. Needs a store a second connection can reach (not sqlite://:memory:).
  /// Batches of effect handlers (Consumer::on_effect) commit as with 1.
  std::size_t pipeline_depth = 1;
  /// Keep each partition's next offset in the store (table idem_consumer_offsets), written
  /// in the transaction of the marks and effects it covers, with the letters acknowledged
  /// above it (docs/consumer-offsets.md). On assignment the consumer starts from the stored
  /// offsets (the store wins over Kafka's committed offsets, which are still committed;
  /// a disagreement is logged and counted), falling back to Kafka's, then to
  /// auto.offset.reset; after the store connection is replaced (a failover) it reads them
  /// again and goes back to them. Off: Kafka's committed offsets are the only position,
  /// and a failover to an asynchronous standby loses the effects it takes back; a restart
  /// after a crash sends the letters acknowledged above the committed offsets again.
  bool offsets_in_store = true;
  /// With offsets kept in the store: a consumer that polled no record for this long
  /// looks at its store connections (as a transaction's start does: a broken one is
  /// replaced; PostgreSQL sends nothing for the look), and again at this interval while it
  /// stays idle. A connection replaced since the stored offsets were read sends it back to
  /// them, so what a failover took back is applied again without waiting for a new record
  /// (docs/consumer-offsets.md). 0: off (the next transaction notices).
  std::chrono::milliseconds idle_store_check{2000};
  std::string dlq_suffix = ".dlq";  ///< dead letters of topic T go to T + dlq_suffix
  RetryPolicy retry;
  RetryTopics retry_topics;  ///< non-blocking retries; off by default (see RetryTopics)
  ParseLimits limits;
  /// librdkafka properties passed through unchanged (TLS, SASL, auto.offset.reset,
  /// session.timeout.ms, ...), applied after idem's defaults. `enable.auto.commit` and
  /// `enable.auto.offset.store` belong to idem (always false): setting them is an error.
  /// The DLQ producer gets the same properties minus consumer-only ones.
  std::vector<std::pair<std::string, std::string>> kafka;
  /// How long to wait for the broker to acknowledge the DLQ records of one batch
  /// before treating the DLQ as unavailable (the partition then retries).
  std::chrono::milliseconds dlq_ack_timeout{30000};
  /// The dedup retention of the store (see RetentionPolicy::dedup) and the horizon derived
  /// from it: events born before now - (retention - safety_margin) are stale.
  DedupHorizon dedup_horizon;
  StaleEventPolicy stale_events = StaleEventPolicy::Quarantine;
  /// At start, read each topic's retention.ms from the broker (where it answers) and log a
  /// warning when the topic keeps records longer than the dedup rows are kept.
  bool check_topic_retention = true;
  /// How long that check waits for the broker's answer (DescribeConfigs) before it logs that
  /// it could not read the retention; a broker that does not implement DescribeConfigs
  /// (the dev broker) never answers. The check runs beside consuming, which never waits for
  /// it. At least 1 ms.
  std::chrono::milliseconds topic_retention_timeout{5000};
  /// The clock of the horizon guard; must outlive the Consumer.
  const Clock* clock = &SystemClock::instance();
  /// Effect handlers (Consumer::on_effect): events whose call phase may be running at once,
  /// across all ordering keys (one call per key at a time). A call that returned no longer
  /// counts while its result waits for the apply transaction. At least 1.
  std::size_t max_in_flight = 256;
  /// Effect handlers: records of one partition held in memory at most (received, not yet
  /// finished); the partition pauses when it is full and resumes at half. At least 1.
  std::size_t max_buffered_per_partition = 4096;
  /// Effect handlers: on stop(), how long run() waits for calls in flight (results applied
  /// and committed) before it leaves anyway; at most half of stop_timeout, the rest is kept.
  std::chrono::milliseconds call_drain_timeout{30000};
  /// From stop() to run() returning, at most this long (the drain of effect calls
  /// included): the final offset commit and leaving the group give up at this deadline
  /// instead of waiting for a broker that is gone. Work of the last batch that is
  /// processed but not committed in time is redelivered and deduplicated.
  std::chrono::milliseconds stop_timeout{30000};
  /// librdkafka `group.instance.id` (static membership); empty: dynamic membership. A
  /// restarted process with the same id gets its partitions back without a rebalance,
  /// while one that does not come back keeps them unassigned for session.timeout.ms.
  /// Each live process of the group needs its own id.
  std::string instance_id;
};

/// Where the fault-injection hook is called. In processing order.
enum class HookPoint {
  BatchPolled,        ///< a non-empty batch was collected, nothing done with it yet
  AfterHandler,       ///< after each handler call, inside the open transaction (mid-batch)
  BeforeDbCommit,     ///< every handler ran; the transaction is about to commit
  AfterDbCommit,      ///< the transaction committed; offsets not yet committed
  AfterOffsetCommit,  ///< the batch's offset commit was handed to librdkafka (async)
};

[[nodiscard]] std::string_view to_string(HookPoint point) noexcept;

/// What one processed batch looked like; for metrics (ConsumerHooks::on_batch).
struct BatchReport {
  std::size_t records = 0;  ///< records delivered in the batch
  bool committed = false;   ///< its database transaction committed
  /// From the start of processing (validation) to the database commit returning:
  /// the transaction's latency as the consumer sees it.
  std::chrono::nanoseconds duration{0};
};

/// Injected behaviour. Everything is optional.
struct ConsumerHooks {
  /// Called on the run() thread at each HookPoint. Tests use it to kill the process
  /// at an exact point (real process death). If it throws, run() stops as if the
  /// process had died there: the open transaction rolls back, the offsets of batches
  /// committed earlier are committed, the consumer leaves the group and run()
  /// rethrows the exception.
  std::function<void(HookPoint)> at;
  /// One line per error or rare lifecycle event (never per record). Also receives
  /// librdkafka's own log lines, from librdkafka's threads: must be thread-safe.
  /// Default (empty): write to stderr.
  std::function<void(std::string_view)> log;
  /// Called on the run() thread after each batch (after its offsets were handed to
  /// librdkafka), and after each apply transaction of effect handlers (whose offsets
  /// follow in the same turn). Must be cheap: it runs once per batch on the hot path.
  std::function<void(const BatchReport&)> on_batch;
};

/// Consumer lag of one assigned partition.
struct PartitionLag {
  std::string topic;
  std::int32_t partition = 0;
  /// High watermark minus the next offset to process; 0 when caught up; -1 while
  /// unknown (no fetch response or position yet). The high watermark is librdkafka's
  /// cached value from the last fetch response; the position is the next offset to
  /// process, or, before anything of the partition was processed, the offset after the
  /// last record handed to the consumer.
  std::int64_t lag = -1;
};

/// Counters of the records filed under one route (RecordInfo::count_as).
struct RouteStats {
  std::uint64_t applied = 0;        ///< effects committed (Outcome::Done)
  std::uint64_t duplicates = 0;     ///< records skipped because their event was already marked
  std::uint64_t dead_lettered = 0;  ///< records the broker acknowledged on a DLQ topic
  std::map<std::string, std::uint64_t, std::less<>> dead_lettered_by_reason;  ///< error class

  /// Adds `delta`'s counts to these.
  void add(const RouteStats& delta);
};

/// Counters since construction. A snapshot; consistent per batch.
struct ConsumerStats {
  std::uint64_t delivered = 0;      ///< records received from Kafka (redeliveries included)
  std::uint64_t processed = 0;      ///< handler effects committed (Outcome::Done)
  std::uint64_t duplicates = 0;     ///< records skipped because their event was already marked
  std::uint64_t dead_lettered = 0;  ///< records the broker acknowledged on a DLQ topic
  std::map<std::string, std::uint64_t, std::less<>> dead_lettered_by_reason;  ///< error class
  std::uint64_t retries = 0;  ///< partition pauses for a retry (per partition and attempt)
  std::uint64_t retry_topic_sends = 0;  ///< records the broker acknowledged on a retry topic
  /// Dead letters refused for good (DLQ topic unknown or not authorized, ...): their
  /// record is never lost, its partition retries it after a backoff, so this keeps
  /// growing until the DLQ topic is fixed.
  std::uint64_t dead_letters_refused = 0;
  std::uint64_t transactions = 0;  ///< database transactions committed
  std::uint64_t offset_commits =
      0;                    ///< offset commits issued (async per batch, sync on revoke/close)
  std::uint64_t stale = 0;  ///< events seen past the dedup horizon (handled per StaleEventPolicy)
  std::uint64_t calls = 0;  ///< effect call phases started (Consumer::on_effect)
  std::uint64_t call_retries = 0;  ///< call phases that completed with Outcome::Retry
  /// Offsets in the store (ConsumerConfig::offsets_in_store): partitions whose stored
  /// offset disagreed with Kafka's committed offset at assignment, or with the consumer's
  /// position after the store connection was replaced; the consumer went by the store.
  std::uint64_t offset_disagreements = 0;
  /// Records those disagreements read again: the store was behind (a failover took
  /// transactions back, or Kafka's offsets were moved forward by its own tools).
  std::uint64_t offset_records_read_again = 0;
  /// Records those disagreements did not read again: the store was ahead of Kafka's
  /// committed offset (an offset commit lost in a crash, or Kafka's offsets moved back).
  std::uint64_t offset_records_not_read_again = 0;
  /// The oldest event seen (age from its UUIDv7 at the time it was seen), to compare with
  /// dedup_horizon: when it comes close, consumers are reading events whose dedup rows expire.
  std::chrono::milliseconds oldest_event_age{0};
  std::chrono::milliseconds dedup_horizon{0};  ///< the stale age: retention - safety margin
  /// When the poll loop last turned (steady clock); readiness uses it to detect a
  /// consumer stuck in a handler or a database call. Epoch until run() starts.
  std::chrono::steady_clock::time_point last_loop{};
  /// The same counts per route, for the records a parser filed (RecordInfo::count_as);
  /// empty when no parser files any.
  std::map<std::string, RouteStats, std::less<>> routes;

  /// The counts of route `name`, zero when it has none yet.
  RouteStats& route(std::string_view name);
  /// Adds `delta`'s counters (those of one batch) to these, per route too. `stale` and the
  /// gauges (oldest_event_age, dedup_horizon, last_loop) are left as they are: their
  /// owners fill them in when a snapshot is taken.
  void add(const ConsumerStats& delta);
};

// --- Effects with external I/O (IDEM-4): a call phase outside any transaction, run
// concurrently across ordering keys, and an apply phase inside the batch transaction. ---

namespace detail {

/// Where a call phase's completion goes (implemented by the consumer). Thread-safe.
class CompletionPort {
 public:
  virtual ~CompletionPort() = default;
  /// Hands the completion of call `ticket` to the consumer; the first one per ticket wins.
  virtual void complete(std::uint64_t ticket, Outcome outcome, std::shared_ptr<void> result,
                        std::string reason) noexcept = 0;
};

/// The shared state of one started call: every copy of its CallCompletion points here.
/// `keep_alive` holds the consumer's copy of the record and the parsed event, so the
/// views the call phase got stay valid for as long as it can still complete.
struct CallTicket {
  CallTicket(std::shared_ptr<CompletionPort> p, std::uint64_t t, std::shared_ptr<const void> k)
      : port(std::move(p)), ticket(t), keep_alive(std::move(k)) {}
  CallTicket(const CallTicket&) = delete;
  CallTicket& operator=(const CallTicket&) = delete;
  /// A call phase that dropped every copy of its completion without calling it would
  /// hold its key forever: that counts as a transient failure (the call is retried).
  ~CallTicket() {
    if (!completed.exchange(true))
      port->complete(ticket, Outcome::Retry, nullptr, "the call phase dropped its completion");
  }
  void complete(Outcome outcome, std::shared_ptr<void> result, std::string reason) noexcept {
    if (!completed.exchange(true))
      port->complete(ticket, outcome, std::move(result), std::move(reason));
  }

  std::shared_ptr<CompletionPort> port;
  std::uint64_t ticket;
  std::shared_ptr<const void> keep_alive;
  std::atomic<bool> completed{false};
};

}  // namespace detail

/// How a call phase reports its end. Copyable; may be called from any thread (an HTTP
/// client's event loop, a thread pool); only the first call of done/retry/dead_letter
/// counts. Never blocks. If every copy is destroyed uncalled, the call counts as retry().
template <class Result>
class CallCompletion {
 public:
  explicit CallCompletion(std::shared_ptr<detail::CallTicket> ticket)
      : ticket_(std::move(ticket)) {}

  /// The call succeeded: `result` goes to the apply phase, in the batch transaction.
  void done(Result result) const {
    ticket_->complete(Outcome::Done, std::make_shared<Result>(std::move(result)), {});
  }
  /// Transient failure: this event's key waits (capped exponential backoff, RetryPolicy)
  /// and the call runs again with the same event (so the same idempotency key). Later
  /// events of the key wait; other keys go on. With retry topics on, the record goes to
  /// the next retry topic instead (`why` as its idem.error.message) and the key goes on.
  void retry(std::string why = {}) const {
    ticket_->complete(Outcome::Retry, nullptr, std::move(why));
  }
  /// The event can never succeed: it goes to the DLQ with `reason`; no apply phase runs.
  void dead_letter(std::string reason) const {
    ticket_->complete(Outcome::DeadLetter, nullptr, std::move(reason));
  }

 private:
  std::shared_ptr<detail::CallTicket> ticket_;
};

/// A handler for an effect with external I/O (an HTTP charge): the call phase runs
/// outside any database transaction and concurrently with other keys' calls; it must be
/// repeatable (carry the event id as the idempotency key, IDEM-4), since a crash, a
/// rebalance or a failed transaction repeats it. The apply phase writes the event's rows
/// through `tx`, in the batch transaction that also marks the event (IDEM-3); it runs only
/// after the call completed with done(), and may run more than once (see Handler).
///
/// Order: events with the same ordering key run strictly one after another in offset
/// order, call and apply (the next event's call starts after the previous event was
/// committed, dead-lettered or found a duplicate). A duplicate (already marked for the
/// group) never makes a call. The Event and RecordInfo the call phase gets stay valid until
/// it completes (the consumer owns copies); the RecordInfo of the apply phase is valid
/// during the apply call only.
template <class Event, class Result>
struct EffectHandler {
  /// Starts the call; must not block for long (hand the work to an asynchronous client)
  /// and must complete `done` exactly once. Runs on the run() thread. If it throws, the
  /// event is retried (a transient idem::Error) or dead-lettered (anything else).
  std::function<void(const Event&, const RecordInfo&, CallCompletion<Result>)> call;
  /// Writes the effect of a successful call; returns what Handler returns.
  std::function<Outcome(const Event&, const RecordInfo&, const Result&, Transaction&)> apply;
  /// The ordering key; empty function: the Kafka message key (per topic; records without
  /// a key are ordered per partition). Called on the run() thread.
  std::function<std::string(const Event&, const RecordInfo&)> ordering_key;
};

namespace detail {

/// A topic's effect handler, type-erased. The consumer parses each record once, when it
/// is polled (parse_owned: the event lives as long as its call), orders and starts its
/// call, and once the call completed with done() applies it in the batch transaction that
/// marks the event (apply). Not a TopicHandler: its records never take the handlers' batch path.
class EffectTopicHandler {
 public:
  EffectTopicHandler() = default;
  EffectTopicHandler(const EffectTopicHandler&) = delete;
  EffectTopicHandler& operator=(const EffectTopicHandler&) = delete;
  virtual ~EffectTopicHandler() = default;

  struct Owned {
    Validated<Uuid> event_id;
    std::shared_ptr<void> event;  ///< set when valid
  };
  /// Parses the record into an event the consumer keeps for the call's whole life.
  [[nodiscard]] virtual Owned parse_owned(const RecordInfo& record, const ParseLimits& limits) = 0;
  /// The handler's own ordering key, or nullopt to use the Kafka key.
  [[nodiscard]] virtual std::optional<std::string> ordering_key(const void* event,
                                                                const RecordInfo& record) = 0;
  virtual void start_call(const void* event, const RecordInfo& record,
                          std::shared_ptr<CallTicket> ticket) = 0;
  /// The apply phase: `event` as parse_owned() made it, `result` as done() gave it.
  virtual Outcome apply(const void* event, const void* result, const RecordInfo& record,
                        Transaction& tx) = 0;
  /// What brackets the apply phases of one pass, or null.
  [[nodiscard]] virtual const HandlerScope* scope() const noexcept { return nullptr; }
};

template <class Event, class Result>
class TypedEffectTopicHandler final : public EffectTopicHandler {
 public:
  explicit TypedEffectTopicHandler(EffectHandler<Event, Result> handler,
                                   RecordParser<Event> parser = {}, HandlerScope scope = {})
      : handler_(std::move(handler)), parser_(std::move(parser)), scope_(std::move(scope)) {}

  Owned parse_owned(const RecordInfo& record, const ParseLimits& limits) override {
    Validated<Event> parsed = parse_record(parser_, record, limits);
    if (!parsed.ok()) return {parsed.error(), nullptr};
    auto event = std::make_shared<Event>(std::move(parsed).value());
    const Uuid id = EventCodec<Event>::event_id(*event);
    return {id, std::move(event)};
  }
  std::optional<std::string> ordering_key(const void* event, const RecordInfo& record) override {
    if (!handler_.ordering_key) return std::nullopt;
    return handler_.ordering_key(*static_cast<const Event*>(event), record);
  }
  void start_call(const void* event, const RecordInfo& record,
                  std::shared_ptr<CallTicket> ticket) override {
    handler_.call(*static_cast<const Event*>(event), record,
                  CallCompletion<Result>(std::move(ticket)));
  }
  Outcome apply(const void* event, const void* result, const RecordInfo& record,
                Transaction& tx) override {
    return handler_.apply(*static_cast<const Event*>(event), record,
                          *static_cast<const Result*>(result), tx);
  }
  [[nodiscard]] const HandlerScope* scope() const noexcept override {
    return scope_.enter || scope_.leave ? &scope_ : nullptr;
  }

 private:
  EffectHandler<Event, Result> handler_;
  RecordParser<Event> parser_;
  HandlerScope scope_;
};

}  // namespace detail

/// The idempotent consumer. Construct, register handlers with on(), then run().
///
/// Thread-safety: on() and run() belong to one thread; stop() and stats() may be
/// called from any thread at any time.
class Consumer {
 public:
  /// Validates the configuration and creates the librdkafka handles (no network I/O yet).
  /// `store` must be migrated (see Store::migrate; run() checks the version); the
  /// consumer owns it and uses it only from the run() thread.
  /// \throws Error(InvalidArgument, Config) for a bad configuration: empty
  ///   bootstrap_servers/group_id/topics, batch_size 0, a negative duration, a
  ///   bad RetryPolicy, an override of enable.auto.commit or enable.auto.offset.store,
  ///   or a property librdkafka rejects. Error(Internal, Kafka) if librdkafka cannot
  ///   create a handle.
  Consumer(ConsumerConfig config, std::unique_ptr<Store> store, ConsumerHooks hooks = {});
  ~Consumer();
  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;
  Consumer(Consumer&&) = delete;
  Consumer& operator=(Consumer&&) = delete;

  /// Registers the handler for the events on `topic`, parsed with EventCodec<Event>.
  /// Records on a subscribed topic without a handler go to the DLQ (error class
  /// `route.no_route`, kept for the consumers of dead letters that filter on it).
  /// \throws Error(InvalidArgument, Config) when `topic` is not in config.topics, has a
  ///   handler already, `handler` is empty, or run() has started.
  template <class Event>
  void on(std::string topic, Handler<Event> handler) {
    const bool has_handler = static_cast<bool>(handler);
    add_topic_handler(std::move(topic),
                      std::make_unique<detail::TypedTopicHandler<Event>>(std::move(handler)),
                      has_handler);
  }

  /// The same with a parser of its own instead of EventCodec<Event>::parse (RecordParser):
  /// for events whose format is configured at run time; `scope` brackets the handler's
  /// calls of each batch (HandlerScope).
  /// \throws Error(InvalidArgument, Config) as on(), or when `parser` is empty.
  template <class Event>
  void on(std::string topic, RecordParser<Event> parser, Handler<Event> handler,
          HandlerScope scope = {}) {
    const bool complete = static_cast<bool>(handler) && static_cast<bool>(parser);
    add_topic_handler(std::move(topic),
                      std::make_unique<detail::TypedTopicHandler<Event>>(
                          std::move(handler), std::move(parser), std::move(scope)),
                      complete);
  }

  /// Registers an effect handler for the events on `topic` (see EffectHandler): call
  /// phases run concurrently across ordering keys (ConsumerConfig::max_in_flight), each
  /// key's events one after another in offset order; offsets commit up to the first
  /// unfinished record of each partition. A call that asks for a retry holds back its key
  /// (blocking, with backoff), or, with retry topics on, goes to the next retry topic.
  /// \throws Error(InvalidArgument, Config) as on(), or when `handler.call` or
  ///   `handler.apply` is empty.
  template <class Event, class Result>
  void on_effect(std::string topic, EffectHandler<Event, Result> handler) {
    const bool complete = static_cast<bool>(handler.call) && static_cast<bool>(handler.apply);
    add_effect_topic_handler(
        std::move(topic),
        std::make_unique<detail::TypedEffectTopicHandler<Event, Result>>(std::move(handler)),
        complete);
  }

  /// The same with a parser of its own (RecordParser), as the second on(); `scope`
  /// brackets the apply phases of each batch (HandlerScope).
  /// \throws Error(InvalidArgument, Config) as on_effect(), or when `parser` is empty.
  template <class Event, class Result>
  void on_effect(std::string topic, RecordParser<Event> parser,
                 EffectHandler<Event, Result> handler, HandlerScope scope = {}) {
    const bool complete = static_cast<bool>(handler.call) && static_cast<bool>(handler.apply) &&
                          static_cast<bool>(parser);
    add_effect_topic_handler(std::move(topic),
                             std::make_unique<detail::TypedEffectTopicHandler<Event, Result>>(
                                 std::move(handler), std::move(parser), std::move(scope)),
                             complete);
  }

  /// Subscribes and processes batches until stop(); then finishes the current batch,
  /// commits its offsets, leaves the group and returns, within config.stop_timeout of
  /// stop(). Blocks. Call at most once.
  /// \throws Error for a fatal Kafka error or a second call; Error(Timeout, Kafka) after
  ///   the stop when the final offset commit or leaving the group
  ///   could not be done in time (the message says which; the uncommitted events are
  ///   redelivered and deduplicated); rethrows what a hook throws (after the orderly
  ///   close described at ConsumerHooks::at), and a handler's StopConsumer the same way.
  ///   Other handler exceptions and transient database errors never escape: they become retries or
  ///   dead letters. Error(Schema) before the first poll when the store's idem schema is missing,
  ///   older than this idem needs or newer than it knows. A store error that redoing cannot fix on
  ///   idem's own statements (dedup marks, retention declarations: a dropped table, a revoked
  ///   privilege) stops run() the same orderly way (only offsets of what the database
  ///   committed are committed) and is thrown as an Error whose message says
  ///   "stopping: the store refused a statement for good" and what to do
  ///   (docs/consumer.md, "Database errors").
  void run();

  /// Asks run() to return after the current batch. Only sets an atomic flag and wakes
  /// the poll: safe from any thread (including a signal-waiting thread). Never blocks.
  void stop() noexcept;

  /// A snapshot of the counters. Thread-safe.
  [[nodiscard]] ConsumerStats stats() const;

  /// The current assignment with each partition's lag, computed now from librdkafka's
  /// cached watermarks (no broker round trip). Thread-safe; for metrics and readiness.
  [[nodiscard]] std::vector<PartitionLag> lag() const;

 private:
  /// \throws Error(InvalidArgument, Config) when `topic` cannot take a handler now.
  void check_topic_handler(const std::string& topic, bool has_handler) const;
  void add_topic_handler(std::string topic, std::unique_ptr<detail::TopicHandler> handler,
                         bool has_handler);
  void add_effect_topic_handler(std::string topic,
                                std::unique_ptr<detail::EffectTopicHandler> handler, bool complete);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idem
