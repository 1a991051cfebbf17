// The relay loop: claims (ClaimReader, ahead on its own thread) go to the producer in
// id order; fully acknowledged batches at the front of the pipeline go to the markers
// (Markers); shard ownership (ShardOwnership) changes only with nothing in flight; the
// lag and cleanup (Housekeeping) run whenever due. Every statement is the backend's
// (OutboxQueries, src/stores/<backend>/).
#include "idem/relay.hpp"

#include <algorithm>
#include <exception>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "idem/config.hpp"
#include "idem/error.hpp"
#include "idem/outbox.hpp"
#include "outbox/claim_reader.hpp"
#include "outbox/housekeeping.hpp"
#include "outbox/idle_wait.hpp"
#include "outbox/in_flight_batches.hpp"
#include "outbox/markers.hpp"
#include "outbox/replication_gate.hpp"
#include "outbox/shard_ownership.hpp"
#include "outbox/shared_connection.hpp"
#include "stores/outbox_queries.hpp"
#include "stores/replication.hpp"
#include "stores/store_errors.hpp"

namespace idem {

namespace {

using SteadyClock = std::chrono::steady_clock;
using detail::ClaimedBatch;
using detail::MarkJob;
using detail::MarkResult;
using std::chrono::milliseconds;

constexpr std::string_view kNotMarkedResent =
    "Rows produced but not marked published are sent again by the next relay, with the same "
    "event_id: at-least-once publication, which consumers deduplicate";

RelayConfig validated(RelayConfig config) {
  if (config.batch_size == 0 || config.max_batches_in_flight == 0) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "relay: batch_size and max_batches_in_flight must be positive");
  }
  return config;
}

// The relay's main connection, refused when the store's idem schema is not the one this
// idem was built for: on an unmigrated store every claim would fail, forever.
std::unique_ptr<Store> open_migrated_store(const RelayConfig& config) {
  std::unique_ptr<Store> store = open_store(config.store_url, config.store_options);
  detail::require_idem_schema(*store, "idem relay");
  return store;
}

std::string describe(const std::exception_ptr& error) {
  try {
    if (error) std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
  }
  return "unknown error";
}

}  // namespace

struct Relay::Impl {
  // Declaration order is construction order: the parts need the connection (and the
  // config) and are destroyed, their threads joined, before it.
  const RelayConfig config;
  const RelayObserver observer;
  detail::SharedConnection connection;
  const detail::OutboxQueries& queries;
  detail::ShardOwnership ownership;
  detail::Housekeeping housekeeping;
  detail::IdleWait idle_wait;
  std::unique_ptr<Producer> producer;
  std::unique_ptr<detail::Markers> markers;
  // publish_after = replicated: claimed batches wait here for the standbys; else null.
  std::unique_ptr<detail::ReplicationGate> gate;
  std::unique_ptr<detail::ClaimReader> claims;

  detail::InFlightBatches in_flight;
  std::int64_t cursor = 0;
  std::vector<Delivery> deliveries;
  std::atomic<bool> stop{false};
  // When request_stop() was first called (steady clock ticks; 0: not yet): the stop
  // timeout counts from there.
  std::atomic<SteadyClock::rep> stop_requested_at{0};
  // Waits for the claim and mark threads give up here (a stop's deadline; until then
  // they wait for the database as long as it takes).
  SteadyClock::time_point give_up_at = SteadyClock::time_point::max();
  // The last failure, until a claim succeeds again: a stop meanwhile says so.
  std::string failing;
  // A stop gave up on a thread blocked in the database: ~Relay must not join it.
  bool abandoned = false;
  RelayProgress prog;
  bool last_claim_empty = false;
  // The session holding the shard locks was lost: LISTEN again, on the new session's
  // server, when the shards are taken again (before anything is claimed).
  bool listen_again = false;

  Impl(RelayConfig config_in, RelayObserver observer_in)
      : config(validated(std::move(config_in))),
        observer(std::move(observer_in)),
        connection(open_migrated_store(config)),
        queries(detail::outbox_queries(connection.store())),
        ownership(connection, queries, config.store_url, config.rebalance_interval),
        housekeeping(connection, queries, config, observer.log),
        idle_wait(queries, config.store_url, config.store_options, config.listen, observer.log) {
    std::vector<std::unique_ptr<Store>> mark_stores;
    if (config.store_url.find(":memory:") == std::string::npos) {
      const std::size_t n = std::min(config.mark_connections, queries.concurrent_writers());
      for (std::size_t i = 0; i < n; ++i) {
        mark_stores.push_back(open_store(config.store_url, config.store_options));
      }
    }
    markers = std::make_unique<detail::Markers>(std::move(mark_stores), connection, queries,
                                                config.batch_size);
    ProducerConfig pc = config.producer;
    if (!pc.log) pc.log = observer.log;
    producer = std::make_unique<Producer>(std::move(pc));
    const bool replicated = config.publish_after == PublishAfter::Replicated;
    if (replicated) {
      gate = std::make_unique<detail::ReplicationGate>(
          config.store_url, config.store_options,
          detail::StandbyQuorum{config.standbys, config.standby_quorum});
      log(gate->counting());
    }
    warn_if_failover_unsafe();
    claims =
        std::make_unique<detail::ClaimReader>(connection, queries, config.batch_size, replicated);
  }

  /// At start: says what a failover could take back after its events were published,
  /// when the store has standbys these settings do not cover.
  void warn_if_failover_unsafe() {
    if (connection.store().backend() != Backend::Postgres) return;
    try {
      const detail::ReplicationView view =
          connection.with([](Store& store) { return detail::read_replication(store); });
      if (const auto warning = detail::failover_warning(
              view, config.publish_after,
              detail::StandbyQuorum{config.standbys, config.standby_quorum})) {
        log("idem relay: warning: " + *warning);
      }
    } catch (const std::exception& e) {
      log(fmt::format("idem relay: could not read the store's standbys: {}", e.what()));
    }
  }

  void log(std::string_view line) const {
    if (observer.log) observer.log(line);
  }
  void step_done(RelayStep step, std::size_t rows) const {
    if (observer.on_step) observer.on_step(step, rows);
  }

  [[nodiscard]] bool pipeline_empty() const {
    return in_flight.empty() && markers->pending() == 0 && !claims->outstanding() &&
           held_for_standbys() == 0;
  }
  [[nodiscard]] std::size_t held_for_standbys() const { return gate ? gate->held() : 0; }

  /// Takes what the markers finished; waits until they finished everything when `all`.
  /// Returns false when a mark failed (its rows stay unpublished; the caller restarts
  /// from the oldest unpublished row).
  bool collect_marks(bool all, std::exception_ptr* error = nullptr) {
    bool ok = true;
    for (const MarkResult& r : markers->collect(all, give_up_at)) {
      if (!r.ok) {
        if (ok && error != nullptr) *error = r.error;
        ok = false;
        continue;
      }
      for (const detail::RejectedRow& row : r.rejected) {
        log(fmt::format(
            "idem relay: outbox row {} rejected, set aside and never sent again until requeued "
            "(`idem outbox rejected` lists it, `idem outbox requeue {}` puts it back): {}",
            row.id, row.id, row.reason));
      }
      if (!r.rejected.empty()) {
        prog.rejected += r.rejected.size();
        step_done(RelayStep::Rejected, r.rejected.size());
      }
      prog.published += r.rows;
      prog.batches += r.batches;
      step_done(RelayStep::Marked, r.rows);
    }
    return ok;
  }

  /// Drops everything in flight (it will be claimed and sent again, same event_ids).
  void reset_pipeline() noexcept {
    static_cast<void>(claims->discard(give_up_at));  // still outstanding: a stop reports it
    if (gate) gate->drop();                          // never produced: claimed again
    producer->purge();
    prog.resent += in_flight.clear();
    // Marks already handed over cover acknowledged rows only: let them finish (or fail)
    // before scanning again from the oldest unpublished row.
    try {
      std::exception_ptr error;
      if (!collect_marks(true, &error)) {
        log(fmt::format("idem relay: mark failed ({}); those rows are sent again",
                        describe(error)));
      }
    } catch (...) {
      markers->forget_pending();  // only bad_alloc: nothing is being marked any more anyway
    }
    cursor = 0;
  }

  void after_error(std::string_view what, const std::exception& e) {
    // Refused for good (a dropped table), it fails alike forever: stop, drop what is in flight.
    const Error* refused = detail::refused_for_good(e);
    if (refused == nullptr)
      log(fmt::format("idem relay: {}: {}; retrying in {} ms", what, e.what(),
                      config.error_backoff.count()));
    failing = fmt::format("{}: {}", what, e.what());
    reset_pipeline();
    if (refused != nullptr) throw detail::stopping_error("idem relay", *refused);
    if (const auto* err = dynamic_cast<const Error*>(&e);
        err != nullptr && err->code() == ErrorCode::Connection) {
      ownership.lost();  // the server dropped our session's advisory locks
      listen_again = true;
    }
    ownership.recheck();  // re-check ownership before claiming again
    wait_for_stop(config.error_backoff);
  }

  void wait_for_stop(milliseconds d) {
    const auto deadline = SteadyClock::now() + d;
    while (!stop.load(std::memory_order_relaxed) && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(std::min(d, milliseconds(50)));
    }
  }

  void rebalance() {
    if (ownership.rebalance()) {
      log(fmt::format("idem relay: owns {} of {} shards", ownership.owned().size(), kOutboxShards));
    }
    prog.owned_shards = static_cast<int>(ownership.owned().size());
    if (listen_again) {
      // A new session, maybe on another server (a failover): the old listener's is gone
      // or listens to a server that no longer takes the inserts.
      idle_wait.reopen();
      listen_again = false;
    } else {
      idle_wait.reopen_if_lost();
    }
  }

  /// The session that claimed, and held the shard locks, is gone (a lost connection, a
  /// failover): the shards and LISTEN are taken again before anything is claimed.
  /// Batches waiting for the standbys were claimed on a server this relay may no longer
  /// talk to, and the cursor is past them: they are dropped and what is in flight is
  /// sent again from the oldest unpublished row (same event ids), so each key's order
  /// holds.
  void start_over_on_new_session(std::string_view why) {
    log(fmt::format("idem relay: {}; re-acquiring shards", why));
    if (held_for_standbys() > 0) reset_pipeline();
    ownership.lost();
    ownership.recheck();
    listen_again = true;
  }

  /// Takes a claimed batch (relay thread): hands it to the producer, or to the gate to
  /// wait for the standbys first. Returns the number of rows. Throws the claim's own error.
  std::size_t take_claim(ClaimedBatch claim);

  /// Produces the held batches whose commits the standbys hold now. Returns the rows.
  std::size_t produce_replicated() {
    std::size_t n = 0;
    if (!gate) return n;
    while (auto batch = gate->release()) {
      n += batch->ids.size();
      produce(std::move(*batch));
    }
    return n;
  }

  /// Hands a batch to the producer (relay thread).
  void produce(ClaimedBatch claim) {
    std::uint64_t first_ticket = 0;
    for (std::size_t i = 0; i < claim.messages.size(); ++i) {
      const std::uint64_t ticket = producer->send(std::move(claim.messages[i]));
      if (i == 0) first_ticket = ticket;
    }
    const std::size_t n = claim.ids.size();
    in_flight.push(std::move(claim.ids), first_ticket);
    step_done(RelayStep::Produced, n);
  }

  void apply_deliveries() {
    in_flight.apply(deliveries);
    deliveries.clear();
  }

  /// Hands the settled batches at the front to the markers (acknowledged rows are marked
  /// published, rows refused for good rejected) and takes the markers' results. A
  /// transiently failed delivery (with no message timeout there are no timeouts) or a
  /// failed mark stops the pipeline: what was not marked is sent again from the oldest
  /// unpublished row, so the key's order holds.
  void settle() {
    if (MarkJob job = in_flight.take_settled(); job.batches > 0) {
      step_done(RelayStep::Acked, job.ids.size());
      markers->submit(std::move(job));
    }
    std::exception_ptr error;
    if (!collect_marks(false, &error)) {
      detail::rethrow_if_refused_for_good(error);  // resent, it would fail its mark again
      log(fmt::format("idem relay: mark failed ({}); resending from the oldest unpublished row",
                      describe(error)));
      failing = "mark failed: " + describe(error);
      reset_pipeline();
      wait_for_stop(config.error_backoff);
      return;
    }
    if (const std::string* failure = in_flight.front_failure()) {
      log(
          fmt::format("idem relay: delivery failed, transient ({}); resending from the oldest "
                      "unpublished row",
                      *failure));
      failing = "delivery failed: " + *failure;
      reset_pipeline();
      wait_for_stop(config.error_backoff);
      return;
    }
    if (pipeline_empty()) cursor = 0;
  }

  void report_progress() {
    housekeeping.measure_lag(prog);
    prog.producer_rebuilds = producer->rebuilds();
    prog.in_flight = in_flight.rows();
    if (gate) gate->report(prog, SteadyClock::now());
    if (observer.on_progress) observer.on_progress(prog);
  }

  /// One turn of the loop. `draining`: claim nothing new. Returns true when it found
  /// nothing to do (idle: nothing claimed, nothing in flight).
  bool turn(bool draining);

  /// Runs turns; on idle waits for a notification or the poll interval (unless
  /// `until_empty`, which returns then). Returns true when it stopped because idle.
  bool loop(bool until_empty, SteadyClock::time_point deadline);
  [[nodiscard]] SteadyClock::time_point stop_deadline() const noexcept;
  /// On stop: waits (until the stop deadline) for what is in flight and marks what was
  /// acknowledged. Returns what it could not do, for the caller to report.
  std::vector<std::string> shutdown();
};

std::size_t Relay::Impl::take_claim(ClaimedBatch claim) {
  if (claim.error) std::rethrow_exception(claim.error);
  failing.clear();  // the database answers again
  last_claim_empty = claim.ids.empty();
  if (claim.ids.empty()) return 0;
  if (claim.session != ownership.session()) {
    // begin() silently replaced a broken connection: our advisory locks died with the
    // old session, so these shards may have another owner now.
    start_over_on_new_session("database session was replaced");
    return 0;
  }
  step_done(RelayStep::Claimed, claim.ids.size());
  cursor = claim.ids.back();
  const std::size_t n = claim.ids.size();
  if (gate) {
    gate->hold(std::move(claim));
    return n;
  }
  produce(std::move(claim));
  return n;
}

bool Relay::Impl::turn(bool draining) {
  const auto now = SteadyClock::now();
  // Progress (with the lag) and cleanup run whenever due, also while a stalled broker
  // keeps batches in flight. Rebalancing runs only with nothing in flight (ownership
  // must not change under a batch); until then nothing new is claimed.
  if (housekeeping.progress_due(now)) report_progress();
  if (housekeeping.cleanup_due(now)) housekeeping.clean(prog, stop);
  bool due = ownership.due(now);
  if (due && pipeline_empty()) {
    rebalance();
  } else if (due && ownership.balanced()) {
    // Ownership would not change: no need to drain the pipeline for it (a drain every
    // rebalance_interval is a bubble in the throughput). Only a change waits for an
    // empty pipeline.
    ownership.postpone(now);
    due = false;
  }
  // A promotion since the held batches were claimed: the standbys will never report
  // their positions (another timeline), and the relay may not learn it from its own
  // connection while it waits for them instead of claiming.
  if (gate && gate->outdated()) {
    start_over_on_new_session(
        "the primary is on a newer timeline than the batches waiting "
        "for the standbys (a failover)");
  }
  // Batches the standbys now hold first, then a finished claim: its rows go to the
  // producer at once (or wait for the standbys behind the held ones).
  bool claimed = produce_replicated() > 0;
  bool came_back_empty = false;  // then this turn claims no more (idle until woken)
  if (claims->outstanding()) {
    if (auto claim = claims->take()) {
      claimed = take_claim(std::move(*claim)) > 0 || claimed;
      came_back_empty = last_claim_empty;
    }
  }
  if (gate) {
    if (const auto line = gate->stalled(now)) log(*line);
  }
  // After an empty claim nothing lies beyond the cursor: claiming again before the
  // pipeline empties would repeat that empty round trip every few milliseconds while
  // the last batches wait for acks and marks (and rows that commit meanwhile are found
  // once it is empty, when the cursor returns to the oldest unpublished row).
  const bool caught_up = last_claim_empty && !pipeline_empty();
  if (!claims->outstanding() && !came_back_empty && !draining && !due && !caught_up &&
      !ownership.owned().empty() && in_flight.size() < config.max_batches_in_flight &&
      held_for_standbys() < config.max_batches_in_flight) {
    claims->request(cursor, ownership.filter());  // read while this turn serves the producer
  }
  if (!pipeline_empty()) {
    if (!in_flight.empty()) {
      // Serve acknowledgements: without waiting right after a produce; otherwise wait
      // for them, briefly (1 ms) while a claim is out, so its rows are taken soon.
      // Briefly too while batches wait for the standbys, so they go out soon.
      const milliseconds wait = claimed ? milliseconds(0)
                                : claims->outstanding() || held_for_standbys() > 0
                                    ? milliseconds(1)
                                    : milliseconds(5);
      producer->poll(wait, deliveries);
      apply_deliveries();
    } else if (claims->outstanding()) {
      claims->wait(milliseconds(5));  // nothing at the broker: the next turn takes it
    } else if (held_for_standbys() > 0) {
      gate->wait(milliseconds(5));  // the next turn produces what the standbys hold
    } else {
      markers->wait(milliseconds(5));  // nothing left at the broker
    }
    settle();
    return false;
  }
  if (claimed || due) return false;
  return true;
}

bool Relay::Impl::loop(bool until_empty, SteadyClock::time_point deadline) {
  while (!stop.load(std::memory_order_relaxed)) {
    if (SteadyClock::now() >= deadline) return false;
    bool idle = false;
    try {
      idle = turn(false);
    } catch (const std::exception& e) {
      after_error("database or producer error", e);
      continue;
    }
    if (!idle) continue;
    if (until_empty && !ownership.owned().empty() && last_claim_empty) return true;
    const auto progress = housekeeping.next_progress();
    const auto housekeeping_due =
        progress ? std::min(ownership.next(), *progress) : ownership.next();
    const auto until_housekeeping = housekeeping_due - SteadyClock::now();
    idle_wait.wait(std::clamp(std::chrono::duration_cast<milliseconds>(until_housekeeping),
                              milliseconds(1), config.poll_interval),
                   stop);
  }
  return false;
}

SteadyClock::time_point Relay::Impl::stop_deadline() const noexcept {
  const SteadyClock::rep requested = stop_requested_at.load();
  const SteadyClock::time_point from =
      requested != 0 ? SteadyClock::time_point(SteadyClock::duration(requested))
                     : SteadyClock::now();
  return from + config.stop_timeout;
}

std::vector<std::string> Relay::Impl::shutdown() {
  // From here every wait ends at the stop deadline: a broker that is gone never
  // acknowledges (there is no message timeout) and a database that is gone may never
  // answer a claim or a mark.
  give_up_at = stop_deadline();
  std::vector<std::string> undone;
  const std::string within = format_duration(config.stop_timeout);
  static_cast<void>(claims->discard(give_up_at));
  try {
    while ((!in_flight.empty() || markers->pending() > 0) && SteadyClock::now() < give_up_at) {
      producer->poll(milliseconds(in_flight.empty() ? 1 : 20), deliveries);
      apply_deliveries();
      settle();
    }
  } catch (const std::exception& e) {
    log(fmt::format("idem relay: during shutdown: {}", e.what()));
    failing = e.what();
  }
  if (const std::size_t rows = in_flight.rows(); rows > 0) {
    undone.push_back(
        fmt::format("{} rows produced but not acknowledged by the broker within {}", rows, within));
  }
  reset_pipeline();  // purges the producer: its destructor has nothing left to flush
  if (markers->pending() > 0) {
    undone.push_back(fmt::format(
        "marking acknowledged rows published did not finish within {}: the database does not "
        "answer",
        within));
    abandoned = true;
  }
  if (claims->outstanding()) {
    undone.push_back(
        fmt::format("a claim did not finish within {}: the database does not answer", within));
    abandoned = true;
  }
  if (!failing.empty()) undone.push_back("stopped while failing (" + failing + ")");
  return undone;
}

Relay::Relay(RelayConfig config, RelayObserver observer)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(observer))) {}

Relay::~Relay() {
  if (impl_ && impl_->abandoned) {
    // A claim or mark thread is blocked in a call to a database that stopped answering:
    // joining it would wait without bound. The relay's memory (its producer's handle
    // with it) is left to the process's exit instead, as the consumer leaves its handle
    // after a close that timed out.
    static_cast<void>(impl_.release());
  }
}

void Relay::run() {
  impl_->loop(false, SteadyClock::time_point::max());
  const std::vector<std::string> undone = impl_->shutdown();
  if (!undone.empty()) {
    throw Error(ErrorCode::Timeout, ErrorSource::Internal,
                fmt::format("relay stop: {}. {}", fmt::join(undone, "; "), kNotMarkedResent));
  }
}

bool Relay::run_until_empty(std::chrono::milliseconds timeout) {
  // Ownership first, so "empty" means "empty in the shards this relay owns".
  const bool drained = impl_->loop(true, SteadyClock::now() + timeout);
  if (!drained) {
    for (const std::string& problem : impl_->shutdown()) impl_->log("idem relay: stop: " + problem);
  }
  return drained;
}

void Relay::request_stop() noexcept {
  SteadyClock::rep unset = 0;
  impl_->stop_requested_at.compare_exchange_strong(unset,
                                                   SteadyClock::now().time_since_epoch().count());
  impl_->stop.store(true, std::memory_order_relaxed);
}

RelayProgress Relay::progress() const {
  RelayProgress p = impl_->prog;
  p.producer_rebuilds = impl_->producer->rebuilds();
  // The gate's figures as they are now, not as of the last periodic report.
  if (impl_->gate) impl_->gate->report(p, SteadyClock::now());
  return p;
}

}  // namespace idem
