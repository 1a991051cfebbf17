#include "idem/relay.hpp"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <deque>
#include <iterator>
#include <thread>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "idem/outbox.hpp"
#include "idem/stores/postgres.hpp"
#include "outbox/shard_claimer.hpp"

namespace idem {

namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Claims read past `cursor` (the last id already in flight) so that the next batch can
// be claimed while earlier ones wait for acks. The partial index holds only unpublished
// rows, so a scan from id 0 costs the same; the cursor only skips what is in flight, and
// it goes back to 0 whenever nothing is in flight (rows that committed late with a lower
// id are then found).
constexpr std::string_view kClaimPostgres =
    "SELECT id, event_id, topic, message_key, payload, headers::text, pg_backend_pid() "
    "FROM outbox WHERE published_at IS NULL AND id > $1 AND shard = ANY($2::int[]) "
    "ORDER BY id LIMIT $3";
constexpr std::string_view kClaimSqlite =
    "SELECT id, event_id, topic, message_key, payload, headers, 0 "
    "FROM outbox WHERE published_at IS NULL AND id > $1 ORDER BY id LIMIT $2";
constexpr std::string_view kMarkPostgres =
    "UPDATE outbox SET published_at = now() WHERE id = ANY($1::bigint[]) AND published_at IS NULL";
constexpr std::string_view kMarkSqlite =
    "UPDATE outbox SET published_at = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) "
    "WHERE id IN (SELECT value FROM json_each($1)) AND published_at IS NULL";
constexpr std::string_view kLagPostgres =
    "SELECT count(*), coalesce((extract(epoch FROM now() - min(created_at)) * 1000)::bigint, -1) "
    "FROM outbox WHERE published_at IS NULL";
constexpr std::string_view kLagSqlite =
    "SELECT count(*), coalesce(CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) - "
    "min(created_at), -1) FROM outbox WHERE published_at IS NULL";
constexpr std::string_view kCleanupPostgres =
    "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE published_at < now() - "
    "$1::bigint * interval '1 millisecond' LIMIT $2::bigint)";
constexpr std::string_view kCleanupSqlite =
    "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE published_at < "
    "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) - $1 LIMIT $2)";

/// One claimed batch: produced, waiting for acks, then marked.
struct Batch {
  std::vector<std::int64_t> ids;  // in id order
  std::uint64_t first_ticket = 0;  // tickets are consecutive within a batch
  std::size_t acked = 0;
  bool failed = false;
  std::string error;
};

}  // namespace

struct Relay::Impl {
  RelayConfig config;
  RelayObserver observer;
  std::unique_ptr<Store> store;         // claims, marks, locks (their session), lag, cleanup
  std::unique_ptr<Store> listen_store;  // PostgreSQL: LISTEN idem_outbox
  std::unique_ptr<detail::ShardClaimer> claimer;
  std::unique_ptr<Producer> producer;
  bool postgres = false;
  std::deque<Batch> in_flight;
  std::int64_t cursor = 0;
  std::string owned_array = "{}";
  std::vector<Delivery> deliveries;
  std::atomic<bool> stop{false};
  RelayProgress prog;
  SteadyClock::time_point next_rebalance{};
  SteadyClock::time_point next_cleanup{};
  SteadyClock::time_point next_progress{};
  bool last_claim_empty = false;
  std::string scratch;  // reused for the id list of a mark

  void log(std::string_view line) const {
    if (observer.log) observer.log(line);
  }
  void step_done(RelayStep step, std::size_t rows) const {
    if (observer.on_step) observer.on_step(step, rows);
  }

  void open() {
    store = open_store(config.store_url, config.store_options);
    postgres = store->backend() == Backend::Postgres;
    claimer = detail::make_shard_claimer(*store, config.store_url);
    ProducerConfig pc = config.producer;
    if (!pc.log) pc.log = observer.log;
    producer = std::make_unique<Producer>(std::move(pc));
    if (postgres && config.listen) open_listener();
    const auto now = SteadyClock::now();
    next_rebalance = now;
    next_cleanup = now;
    next_progress = now + config.progress_interval;
  }

  void open_listener() noexcept {
    try {
      listen_store = open_store(config.store_url, config.store_options);
      PGconn* conn = postgres_native_handle(*listen_store);
      PGresult* r = PQexec(conn, "LISTEN idem_outbox");
      const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
      PQclear(r);
      if (!ok) listen_store.reset();
    } catch (const std::exception& e) {
      log(fmt::format("idem relay: LISTEN unavailable, polling only: {}", e.what()));
      listen_store.reset();
    }
  }

  /// Waits up to `timeout` for a NOTIFY (PostgreSQL) or just for the timeout, in slices
  /// short enough to notice request_stop().
  void wait_for_work(milliseconds timeout) {
    const auto deadline = SteadyClock::now() + timeout;
    while (!stop.load(std::memory_order_relaxed)) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - SteadyClock::now());
      if (left.count() <= 0) return;
      const auto slice = std::min(left, milliseconds(100));
      if (!listen_store) {
        std::this_thread::sleep_for(slice);  // polling interval, not synchronisation
        continue;
      }
      PGconn* conn = postgres_native_handle(*listen_store);
      pollfd pfd{PQsocket(conn), POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(slice.count())) > 0) {
        if (PQconsumeInput(conn) == 0) {
          log("idem relay: LISTEN connection lost; polling until it is reopened");
          listen_store.reset();
          return;
        }
        bool notified = false;
        while (PGnotify* n = PQnotifies(conn)) {
          PQfreemem(n);
          notified = true;
        }
        if (notified) return;
      }
    }
  }

  /// Drops everything in flight (it will be claimed and sent again, same event_ids).
  void reset_pipeline() noexcept {
    producer->purge();
    for (const Batch& b : in_flight) prog.resent += b.ids.size();
    in_flight.clear();
    cursor = 0;
  }

  void after_error(std::string_view what, const std::exception& e) {
    log(fmt::format("idem relay: {}: {}; retrying in {} ms", what, e.what(),
                    config.error_backoff.count()));
    reset_pipeline();
    if (const auto* err = dynamic_cast<const Error*>(&e);
        err != nullptr && err->code() == ErrorCode::Connection) {
      claimer->lost();  // the server dropped our session's advisory locks
    }
    next_rebalance = SteadyClock::now();  // re-check ownership before claiming again
    wait_for_stop(config.error_backoff);
  }

  void wait_for_stop(milliseconds d) {
    const auto deadline = SteadyClock::now() + d;
    while (!stop.load(std::memory_order_relaxed) && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(std::min(d, milliseconds(50)));
    }
  }

  void rebalance() {
    if (claimer->rebalance()) {
      std::string a = "{";
      for (std::size_t i = 0; i < claimer->owned().size(); ++i) {
        if (i > 0) a.push_back(',');
        a += std::to_string(claimer->owned()[i]);
      }
      a.push_back('}');
      owned_array = std::move(a);
      log(fmt::format("idem relay: owns {} of {} shards", claimer->owned().size(), kOutboxShards));
    }
    prog.owned_shards = static_cast<int>(claimer->owned().size());
    if (postgres && config.listen && !listen_store) open_listener();
    next_rebalance = SteadyClock::now() + config.rebalance_interval;
  }

  /// Claims one batch and hands it to the producer. Returns the number of rows.
  std::size_t claim_and_produce() {
    const auto limit = static_cast<std::int64_t>(config.batch_size);
    Rows rows;
    {
      auto tx = store->begin();
      rows = postgres ? tx->execute(kClaimPostgres, cursor, owned_array, limit)
                      : tx->execute(kClaimSqlite, cursor, limit);
      tx->commit();
    }
    last_claim_empty = rows.empty();
    if (rows.empty()) return 0;
    if (postgres && rows[0].int64(6) != claimer->session()) {
      // begin() silently replaced a broken connection: our advisory locks died with the
      // old session, so these shards may have another owner now.
      log("idem relay: database session was replaced; re-acquiring shards");
      claimer->lost();
      next_rebalance = SteadyClock::now();
      return 0;
    }
    step_done(RelayStep::Claimed, rows.size());
    Batch batch;
    batch.ids.reserve(rows.size());
    for (const auto row : rows) {
      ProducerMessage m;
      m.topic = std::string(row.text(2));
      m.key = std::string(row.text(3));
      m.payload = std::string(row.text(4));
      m.event_id = row.uuid(1);  // the row's id, born with the event: never a new one
      for (auto& [name, value] : outbox_headers_from_json(row.text(5))) {
        if (name == "traceparent") {
          m.traceparent = std::move(value);
        } else {
          m.headers.emplace_back(std::move(name), std::move(value));
        }
      }
      const std::uint64_t ticket = producer->send(std::move(m));
      if (batch.ids.empty()) batch.first_ticket = ticket;
      batch.ids.push_back(row.int64(0));
    }
    cursor = batch.ids.back();
    const std::size_t n = batch.ids.size();
    in_flight.push_back(std::move(batch));
    step_done(RelayStep::Produced, n);
    return n;
  }

  void apply_deliveries() {
    for (const Delivery& d : deliveries) {
      for (Batch& b : in_flight) {
        if (d.ticket < b.first_ticket || d.ticket >= b.first_ticket + b.ids.size()) continue;
        if (d.ok) {
          ++b.acked;
        } else if (!b.failed) {
          b.failed = true;
          b.error = d.error;
        }
        break;
      }
    }
    deliveries.clear();
  }

  /// Marks the first `count` batches in flight published, in one statement.
  void mark(std::size_t count) {
    std::string& list = scratch;
    list.clear();
    list.push_back(postgres ? '{' : '[');
    bool first = true;
    for (std::size_t b = 0; b < count; ++b) {
      for (const std::int64_t id : in_flight[b].ids) {
        if (!first) list.push_back(',');
        first = false;
        fmt::format_to(std::back_inserter(list), "{}", id);
      }
    }
    list.push_back(postgres ? '}' : ']');
    auto tx = store->begin();
    tx->execute(postgres ? kMarkPostgres : kMarkSqlite, list);
    tx->commit();
  }

  /// Marks the fully acknowledged batches at the front. A failed delivery (a permanent
  /// error; with no message timeout there are no timeouts) stops the pipeline: what was
  /// not marked is sent again from the oldest unpublished row, so the key's order holds.
  void settle() {
    // Every fully acknowledged batch at the front is marked with one UPDATE.
    std::size_t ready = 0;
    while (ready < in_flight.size() && !in_flight[ready].failed &&
           in_flight[ready].acked == in_flight[ready].ids.size()) {
      ++ready;
    }
    if (ready > 0) {
      std::size_t rows = 0;
      for (std::size_t i = 0; i < ready; ++i) rows += in_flight[i].ids.size();
      step_done(RelayStep::Acked, rows);
      mark(ready);
      prog.published += rows;
      prog.batches += ready;
      in_flight.erase(in_flight.begin(), in_flight.begin() + static_cast<std::ptrdiff_t>(ready));
      step_done(RelayStep::Marked, rows);
    }
    if (!in_flight.empty() && in_flight.front().failed) {
      log(fmt::format("idem relay: delivery failed ({}); resending from the oldest "
                      "unpublished row",
                      in_flight.front().error));
      reset_pipeline();
      wait_for_stop(config.error_backoff);
      return;
    }
    if (in_flight.empty()) cursor = 0;
  }

  void report_progress() {
    next_progress = SteadyClock::now() + config.progress_interval;
    auto tx = store->begin();
    const Rows r = tx->execute(postgres ? kLagPostgres : kLagSqlite);
    tx->commit();
    prog.backlog = r[0].int64(0);
    const std::int64_t age = r[0].int64(1);
    prog.oldest_unpublished_age =
        age < 0 ? std::nullopt : std::optional<milliseconds>(milliseconds(std::max<std::int64_t>(age, 0)));
    prog.producer_rebuilds = producer->rebuilds();
    if (observer.on_progress) observer.on_progress(prog);
  }

  void cleanup() {
    next_cleanup = SteadyClock::now() + config.cleanup_interval;
    const auto batch = static_cast<std::int64_t>(config.cleanup_batch);
    // Bounded: at most 100 batches per round, so cleanup never starves publishing.
    for (int i = 0; i < 100 && !stop.load(std::memory_order_relaxed); ++i) {
      auto tx = store->begin();
      const Rows r = tx->execute(postgres ? kCleanupPostgres : kCleanupSqlite,
                                 static_cast<std::int64_t>(config.retention.count()), batch);
      tx->commit();
      prog.cleaned += static_cast<std::uint64_t>(r.affected());
      if (r.affected() < batch) break;
    }
  }

  /// One turn of the loop. `draining`: claim nothing new. Returns true when it found
  /// nothing to do (idle: nothing claimed, nothing in flight).
  bool turn(bool draining) {
    const auto now = SteadyClock::now();
    // Progress (with the lag) and cleanup only read or delete published rows: they run
    // whenever due, also while a stalled broker keeps batches in flight. Rebalancing
    // runs only with nothing in flight (ownership must not change under a batch); until
    // then nothing new is claimed.
    if (config.progress_interval.count() > 0 && now >= next_progress) report_progress();
    if (config.cleanup_interval.count() > 0 && now >= next_cleanup) cleanup();
    const bool due = now >= next_rebalance;
    if (due && in_flight.empty()) rebalance();
    bool claimed = false;
    if (!draining && !due && !claimer->owned().empty() &&
        in_flight.size() < config.max_batches_in_flight) {
      claimed = claim_and_produce() > 0;
    }
    if (!in_flight.empty()) {
      // More to claim: only serve what is ready. Otherwise wait briefly for acks.
      const bool can_claim_more = claimed && in_flight.size() < config.max_batches_in_flight;
      producer->poll(can_claim_more ? milliseconds(0) : milliseconds(5), deliveries);
      apply_deliveries();
      settle();
      return false;
    }
    if (claimed || due) return false;
    return true;
  }

  /// Runs turns; on idle waits for a notification or the poll interval (unless
  /// `until_empty`, which returns then). Returns true when it stopped because idle.
  bool loop(bool until_empty, SteadyClock::time_point deadline) {
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
      if (until_empty && !claimer->owned().empty() && last_claim_empty) return true;
      const auto until_housekeeping = std::min(next_rebalance, next_progress) - SteadyClock::now();
      wait_for_work(std::clamp(std::chrono::duration_cast<milliseconds>(until_housekeeping),
                               milliseconds(1), config.poll_interval));
    }
    return false;
  }

  /// On stop: wait (bounded) for what is in flight, mark what was acknowledged.
  void shutdown() {
    const auto deadline = SteadyClock::now() + config.shutdown_timeout;
    try {
      while (!in_flight.empty() && SteadyClock::now() < deadline) {
        producer->poll(milliseconds(20), deliveries);
        apply_deliveries();
        settle();
      }
    } catch (const std::exception& e) {
      log(fmt::format("idem relay: during shutdown: {}", e.what()));
    }
    reset_pipeline();
  }
};

Relay::Relay(RelayConfig config, RelayObserver observer) : impl_(std::make_unique<Impl>()) {
  if (config.batch_size == 0 || config.max_batches_in_flight == 0) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "relay: batch_size and max_batches_in_flight must be positive");
  }
  impl_->config = std::move(config);
  impl_->observer = std::move(observer);
  impl_->open();
}

Relay::~Relay() = default;

void Relay::run() {
  impl_->loop(false, SteadyClock::time_point::max());
  impl_->shutdown();
}

bool Relay::run_until_empty(std::chrono::milliseconds timeout) {
  // Ownership first, so "empty" means "empty in the shards this relay owns".
  const bool drained = impl_->loop(true, SteadyClock::now() + timeout);
  if (!drained) impl_->shutdown();
  return drained;
}

void Relay::request_stop() noexcept { impl_->stop.store(true, std::memory_order_relaxed); }

RelayProgress Relay::progress() const {
  RelayProgress p = impl_->prog;
  p.producer_rebuilds = impl_->producer->rebuilds();
  return p;
}

}  // namespace idem
