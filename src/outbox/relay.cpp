#include "idem/relay.hpp"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <iterator>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "idem/outbox.hpp"
#include "idem/stores/postgres.hpp"
#include "outbox/relay_sql.hpp"
#include "outbox/shard_claimer.hpp"

namespace idem {

namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using detail::kClaimPostgres;
using detail::kClaimSqlite;
using detail::kMarkPostgres;
using detail::kMarkSqlite;

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

/// What the claim thread is asked to read.
struct ClaimRequest {
  std::int64_t cursor = 0;
  std::string owned_array;  // PostgreSQL: the shards this relay owns
};

/// One claim, read and turned into messages by the claim thread.
struct ClaimResult {
  std::exception_ptr error;  // the claim failed: rethrown on the relay thread
  std::int64_t session = 0;  // PostgreSQL: the backend pid that ran the claim
  std::vector<std::int64_t> ids;
  std::vector<ProducerMessage> messages;
};

/// A group of acknowledged batches handed to the marker.
struct MarkJob {
  std::vector<std::int64_t> ids;
  std::size_t batches = 0;
};

/// What the marker did with a job.
struct MarkResult {
  std::size_t rows = 0;
  std::size_t batches = 0;
  bool ok = true;
  std::string error;
};

}  // namespace

struct Relay::Impl {
  RelayConfig config;
  RelayObserver observer;
  // Claims, shard locks (their session), lag, cleanup; inline marks. Guarded by store_mu:
  // the claim thread and the relay thread both use it, never at once.
  std::unique_ptr<Store> store;
  std::mutex store_mu;
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

  // Claims run ahead on their own thread (claim_thread): while the relay thread produces
  // one batch and serves acknowledgements, the next batch is read and turned into
  // messages, so neither the claim's round trip nor its rows' conversion is on the relay
  // thread's path. One claim at a time: the next one starts after the last id of the
  // previous (the cursor), which only its result tells. The relay thread alone decides
  // when to claim and what the cursor is, and alone produces, so order is unchanged.
  std::thread claim_thread;
  std::mutex claim_mu;
  std::condition_variable claim_cv;       // claim thread: a request or quit
  std::condition_variable claim_done_cv;  // relay thread: the result is there
  std::optional<ClaimRequest> claim_request;  // guarded by claim_mu
  std::optional<ClaimResult> claim_result;    // guarded by claim_mu
  bool claim_quit = false;                    // guarded by claim_mu
  bool claim_outstanding = false;             // relay thread: requested, result not taken

  // Marking runs on its own threads and connections (mark_stores), so that the claim ->
  // produce -> ack pipeline keeps going while the previous acknowledged batches are
  // being marked: throughput is bounded by the slowest of claims, broker and marks, not
  // by their sum. With mark_connections > 1 several markers run at once, each taking
  // whatever is queued (by default one: on 2 cores a second cost more in contention on
  // the same heap and index pages than it gained). Only acknowledged batches at the front of the pipeline (a
  // prefix, in id order) are ever handed over, so a row is never marked before every
  // earlier row of this relay was acknowledged; in which order the markers then commit
  // does not matter (a crash before a mark only means those rows are sent again).
  // Without a second connection (sqlite://:memory:, or mark_connections = 0) marks run
  // inline on `store`.
  std::vector<std::unique_ptr<Store>> mark_stores;
  std::vector<std::thread> markers;
  std::mutex mark_mu;
  std::condition_variable mark_cv;       // markers: work or quit
  std::condition_variable mark_done_cv;  // relay thread: a job finished
  std::deque<MarkJob> mark_queue;        // guarded by mark_mu
  std::vector<MarkResult> mark_results;  // guarded by mark_mu
  std::size_t marks_running = 0;         // guarded by mark_mu
  bool mark_quit = false;                // guarded by mark_mu
  std::size_t marks_pending = 0;         // relay thread: batches handed over, not reported

  ~Impl() {
    stop_claim_thread();
    stop_markers();
  }

  void stop_claim_thread() noexcept {
    if (!claim_thread.joinable()) return;
    {
      std::lock_guard lock(claim_mu);
      claim_quit = true;
    }
    claim_cv.notify_all();
    claim_thread.join();
  }

  void claim_main() noexcept {
    std::unique_lock lock(claim_mu);
    while (true) {
      claim_cv.wait(lock, [&] { return claim_quit || claim_request.has_value(); });
      if (claim_quit) return;
      const ClaimRequest request = std::move(*claim_request);
      claim_request.reset();
      lock.unlock();
      ClaimResult result;
      try {
        read_claim(request, result);
      } catch (...) {
        result.error = std::current_exception();
      }
      lock.lock();
      claim_result = std::move(result);
      claim_done_cv.notify_all();
    }
  }

  /// Runs the claim statement and turns its rows into messages (claim thread).
  void read_claim(const ClaimRequest& request, ClaimResult& out) {
    const auto limit = static_cast<std::int64_t>(config.batch_size);
    Rows rows;
    {
      std::lock_guard lock(store_mu);
      // A read transaction: on SQLite a claim then never queues behind a marker's write.
      auto tx = store->begin_read();
      rows = postgres ? tx->execute(kClaimPostgres, request.cursor, request.owned_array, limit)
                      : tx->execute(kClaimSqlite, request.cursor, limit);
      tx->commit();
    }
    if (rows.empty()) return;
    out.session = rows[0].int64(6);
    out.ids.reserve(rows.size());
    out.messages.reserve(rows.size());
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
      out.ids.push_back(row.int64(0));
      out.messages.push_back(std::move(m));
    }
  }

  /// Asks the claim thread for the batch after `cursor` (relay thread).
  void request_claim() {
    {
      std::lock_guard lock(claim_mu);
      claim_request = ClaimRequest{cursor, owned_array};
    }
    claim_outstanding = true;
    claim_cv.notify_one();
  }

  /// Takes the outstanding claim's result; nullopt while it is not there yet.
  std::optional<ClaimResult> take_claim() {
    std::lock_guard lock(claim_mu);
    if (!claim_result) return std::nullopt;
    std::optional<ClaimResult> r = std::move(claim_result);
    claim_result.reset();
    claim_outstanding = false;
    return r;
  }

  /// Waits for the outstanding claim, if any, and drops its rows: nothing of them was
  /// sent, and they are claimed again from the oldest unpublished row.
  void discard_claim() noexcept {
    if (!claim_outstanding) return;
    std::unique_lock lock(claim_mu);
    claim_done_cv.wait(lock, [&] { return claim_result.has_value(); });
    claim_result.reset();
    claim_outstanding = false;
  }

  void stop_markers() noexcept {
    if (markers.empty()) return;
    {
      std::lock_guard lock(mark_mu);
      mark_quit = true;
    }
    mark_cv.notify_all();
    for (std::thread& t : markers) t.join();
    markers.clear();
  }

  /// Marks `ids` published on `s`, in one transaction of one mark statement per claim's
  /// worth of ids. Merged jobs are split because PostgreSQL plans `id = ANY($1)` by the
  /// array's length: a few thousand ids turn the index scan into a sequential scan of
  /// the whole outbox (published rows included), so one merged mark of 20,000 ids cost
  /// more than twenty marks of 1,000. The statements are pipelined (one round trip).
  void execute_mark(Store& s, const std::vector<std::int64_t>& ids, std::string& list) const {
    auto tx = s.begin();
    const std::size_t chunk = config.batch_size;
    for (std::size_t from = 0; from < ids.size(); from += chunk) {
      const std::size_t to = std::min(ids.size(), from + chunk);
      list.clear();
      list.reserve((to - from) * 8 + 2);
      list.push_back(postgres ? '{' : '[');
      for (std::size_t i = from; i < to; ++i) {
        if (i > from) list.push_back(',');
        fmt::format_to(std::back_inserter(list), "{}", ids[i]);
      }
      list.push_back(postgres ? '}' : ']');
      tx->execute_deferred(postgres ? kMarkPostgres : kMarkSqlite, list);
    }
    tx->commit();
  }

  void marker_main(Store& mark_store) noexcept {
    std::string list;
    std::unique_lock lock(mark_mu);
    while (true) {
      mark_cv.wait(lock, [&] { return mark_quit || !mark_queue.empty(); });
      if (mark_queue.empty()) return;  // quit, nothing left
      // Everything queued goes into one UPDATE: the longer a mark takes, the larger
      // the next one, so marking keeps up with any ack rate.
      MarkJob job = std::move(mark_queue.front());
      mark_queue.pop_front();
      while (!mark_queue.empty()) {
        job.ids.insert(job.ids.end(), mark_queue.front().ids.begin(), mark_queue.front().ids.end());
        job.batches += mark_queue.front().batches;
        mark_queue.pop_front();
      }
      ++marks_running;
      lock.unlock();
      MarkResult r;
      r.rows = job.ids.size();
      r.batches = job.batches;
      try {
        execute_mark(mark_store, job.ids, list);
      } catch (const std::exception& e) {
        r.ok = false;
        r.error = e.what();  // the mark store reconnects by itself on its next begin()
      } catch (...) {
        r.ok = false;
        r.error = "unknown error";
      }
      lock.lock();
      --marks_running;
      mark_results.push_back(std::move(r));
      mark_done_cv.notify_all();
    }
  }

  /// Hands acknowledged batches (the front of the pipeline) to the marker.
  void submit_mark(MarkJob job) {
    if (markers.empty()) {
      MarkResult r;
      r.rows = job.ids.size();
      r.batches = job.batches;
      {
        std::lock_guard lock(store_mu);
        execute_mark(*store, job.ids, scratch);  // throws: the caller's error path
      }
      marks_pending += job.batches;
      std::lock_guard lock(mark_mu);
      mark_results.push_back(std::move(r));
      return;
    }
    marks_pending += job.batches;
    {
      std::lock_guard lock(mark_mu);
      mark_queue.push_back(std::move(job));
    }
    mark_cv.notify_one();
  }

  /// Takes what the marker finished; waits until it finished everything when `all`.
  /// Returns false when a mark failed (its rows stay unpublished; the caller restarts
  /// from the oldest unpublished row).
  bool collect_marks(bool all, std::string* error = nullptr) {
    std::vector<MarkResult> results;
    {
      std::unique_lock lock(mark_mu);
      if (all) {
        mark_done_cv.wait(lock, [&] { return mark_queue.empty() && marks_running == 0; });
      }
      results.swap(mark_results);
    }
    bool ok = true;
    for (const MarkResult& r : results) {
      marks_pending -= r.batches;
      if (!r.ok) {
        if (ok && error != nullptr) *error = r.error;
        ok = false;
        continue;
      }
      prog.published += r.rows;
      prog.batches += r.batches;
      step_done(RelayStep::Marked, r.rows);
    }
    return ok;
  }

  [[nodiscard]] bool pipeline_empty() const {
    return in_flight.empty() && marks_pending == 0 && !claim_outstanding;
  }

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
    if (config.store_url.find(":memory:") == std::string::npos) {
      // SQLite has one writer at a time: a second marker would only wait for the first.
      const std::size_t connections =
          postgres ? config.mark_connections : std::min<std::size_t>(config.mark_connections, 1);
      for (std::size_t i = 0; i < connections; ++i) {
        mark_stores.push_back(open_store(config.store_url, config.store_options));
      }
      for (const auto& mark_store : mark_stores) {
        markers.emplace_back([this, &s = *mark_store] { marker_main(s); });
      }
    }
    ProducerConfig pc = config.producer;
    if (!pc.log) pc.log = observer.log;
    producer = std::make_unique<Producer>(std::move(pc));
    claim_thread = std::thread([this] { claim_main(); });
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
    discard_claim();
    producer->purge();
    for (const Batch& b : in_flight) prog.resent += b.ids.size();
    in_flight.clear();
    // Marks already handed over cover acknowledged rows only: let them finish (or fail)
    // before scanning again from the oldest unpublished row.
    try {
      std::string error;
      if (!collect_marks(true, &error)) {
        log(fmt::format("idem relay: mark failed ({}); those rows are sent again", error));
      }
    } catch (...) {
      marks_pending = 0;  // only bad_alloc: nothing is being marked any more anyway
    }
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

  [[nodiscard]] bool balanced() {
    std::lock_guard lock(store_mu);
    return claimer->balanced();
  }

  void rebalance() {
    bool changed = false;
    {
      std::lock_guard lock(store_mu);
      changed = claimer->rebalance();
    }
    if (changed) {
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

  /// Hands a claimed batch to the producer (relay thread). Returns the number of rows.
  /// Throws the claim's own error.
  std::size_t produce_claim(ClaimResult claim) {
    if (claim.error) std::rethrow_exception(claim.error);
    last_claim_empty = claim.ids.empty();
    if (claim.ids.empty()) return 0;
    if (postgres && claim.session != claimer->session()) {
      // begin() silently replaced a broken connection: our advisory locks died with the
      // old session, so these shards may have another owner now.
      log("idem relay: database session was replaced; re-acquiring shards");
      claimer->lost();
      next_rebalance = SteadyClock::now();
      return 0;
    }
    step_done(RelayStep::Claimed, claim.ids.size());
    Batch batch;
    batch.ids = std::move(claim.ids);
    for (std::size_t i = 0; i < claim.messages.size(); ++i) {
      const std::uint64_t ticket = producer->send(std::move(claim.messages[i]));
      if (i == 0) batch.first_ticket = ticket;
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

  /// Hands the fully acknowledged batches at the front to the marker and takes the
  /// marker's results. A failed delivery (a permanent error; with no message timeout
  /// there are no timeouts) or a failed mark stops the pipeline: what was not marked is
  /// sent again from the oldest unpublished row, so the key's order holds.
  void settle() {
    std::size_t ready = 0;
    while (ready < in_flight.size() && !in_flight[ready].failed &&
           in_flight[ready].acked == in_flight[ready].ids.size()) {
      ++ready;
    }
    if (ready > 0) {
      MarkJob job;
      job.batches = ready;
      if (ready == 1) {
        job.ids = std::move(in_flight.front().ids);
      } else {
        std::size_t rows = 0;
        for (std::size_t i = 0; i < ready; ++i) rows += in_flight[i].ids.size();
        job.ids.reserve(rows);
        for (std::size_t i = 0; i < ready; ++i) {
          job.ids.insert(job.ids.end(), in_flight[i].ids.begin(), in_flight[i].ids.end());
        }
      }
      in_flight.erase(in_flight.begin(), in_flight.begin() + static_cast<std::ptrdiff_t>(ready));
      step_done(RelayStep::Acked, job.ids.size());
      submit_mark(std::move(job));
    }
    std::string error;
    if (!collect_marks(false, &error)) {
      log(fmt::format("idem relay: mark failed ({}); resending from the oldest unpublished row",
                      error));
      reset_pipeline();
      wait_for_stop(config.error_backoff);
      return;
    }
    if (!in_flight.empty() && in_flight.front().failed) {
      log(fmt::format("idem relay: delivery failed ({}); resending from the oldest "
                      "unpublished row",
                      in_flight.front().error));
      reset_pipeline();
      wait_for_stop(config.error_backoff);
      return;
    }
    if (pipeline_empty()) cursor = 0;
  }

  void report_progress() {
    next_progress = SteadyClock::now() + config.progress_interval;
    Rows r;
    {
      std::lock_guard lock(store_mu);
      auto tx = store->begin_read();
      r = tx->execute(postgres ? kLagPostgres : kLagSqlite);
      tx->commit();
    }
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
    // One transaction per batch keeps each DELETE's locks and WAL small.
    std::int64_t deleted = 0;
    int batches = 0;
    while (batches < 100 && !stop.load(std::memory_order_relaxed)) {
      Rows r;
      {
        std::lock_guard lock(store_mu);
        auto tx = store->begin();
        r = tx->execute(postgres ? kCleanupPostgres : kCleanupSqlite,
                        static_cast<std::int64_t>(config.retention.count()), batch);
        tx->commit();
      }
      ++batches;
      deleted += r.affected();
      prog.cleaned += static_cast<std::uint64_t>(r.affected());
      if (r.affected() < batch) break;
    }
    if (deleted > 0) {
      log(fmt::format("idem relay: cleanup deleted {} published rows older than {} ms in {} "
                      "batch(es) of at most {}",
                      deleted, config.retention.count(), batches, batch));
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
    bool due = now >= next_rebalance;
    if (due && pipeline_empty()) {
      rebalance();
    } else if (due && balanced()) {
      // Ownership would not change: no need to drain the pipeline for it (a drain every
      // rebalance_interval is a bubble in the throughput). Only a change waits for an
      // empty pipeline.
      next_rebalance = now + config.rebalance_interval;
      due = false;
    }
    // A finished claim first: its rows go to the producer at once.
    bool claimed = false;
    bool came_back_empty = false;  // then this turn claims no more (idle until woken)
    if (claim_outstanding) {
      if (auto claim = take_claim()) {
        claimed = produce_claim(std::move(*claim)) > 0;
        came_back_empty = last_claim_empty;
      }
    }
    // After an empty claim nothing lies beyond the cursor: claiming again before the
    // pipeline empties would repeat that empty round trip every few milliseconds while
    // the last batches wait for acks and marks (and rows that commit meanwhile are found
    // once it is empty, when the cursor returns to the oldest unpublished row).
    const bool caught_up = last_claim_empty && !pipeline_empty();
    if (!claim_outstanding && !came_back_empty && !draining && !due && !caught_up &&
        !claimer->owned().empty() && in_flight.size() < config.max_batches_in_flight) {
      request_claim();  // read while this turn serves the producer
    }
    if (!pipeline_empty()) {
      if (!in_flight.empty()) {
        // Serve acknowledgements: without waiting right after a produce; otherwise wait
        // for them, briefly (1 ms) while a claim is out, so its rows are taken soon.
        const milliseconds wait = claimed ? milliseconds(0)
                                  : claim_outstanding ? milliseconds(1)
                                                      : milliseconds(5);
        producer->poll(wait, deliveries);
        apply_deliveries();
      } else if (claim_outstanding) {
        // Nothing at the broker: wait for the claim (the next turn takes it).
        std::unique_lock lock(claim_mu);
        claim_done_cv.wait_for(lock, milliseconds(5), [&] { return claim_result.has_value(); });
      } else {
        // Nothing left at the broker: wait for the markers.
        std::unique_lock lock(mark_mu);
        mark_done_cv.wait_for(lock, milliseconds(5), [&] { return !mark_results.empty(); });
      }
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
      // Progress is a deadline only when enabled: a disabled one (interval 0) stays in
      // the past and would turn the idle wait into a 1 ms busy poll.
      const auto housekeeping = config.progress_interval.count() > 0
                                    ? std::min(next_rebalance, next_progress)
                                    : next_rebalance;
      const auto until_housekeeping = housekeeping - SteadyClock::now();
      wait_for_work(std::clamp(std::chrono::duration_cast<milliseconds>(until_housekeeping),
                               milliseconds(1), config.poll_interval));
    }
    return false;
  }

  /// On stop: wait (bounded) for what is in flight, mark what was acknowledged.
  void shutdown() {
    discard_claim();
    const auto deadline = SteadyClock::now() + config.shutdown_timeout;
    try {
      while (!pipeline_empty() && SteadyClock::now() < deadline) {
        producer->poll(milliseconds(in_flight.empty() ? 1 : 20), deliveries);
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
