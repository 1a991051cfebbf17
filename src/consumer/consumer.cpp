// idem::Consumer: sequences the poll loop, the batch pipeline, the effect pipeline, the
// dead-letter producer, the partitions' positions (PartitionPositions, which decides where
// each partition stands) and the fetch gate (pauses, resumes, seeks, the retry schedule). The order
// of one batch is the whole protocol: poll -> validate -> transaction (mark, handlers, stored
// offsets, commit) -> DLQ acks -> offset commit; a partition that failed pauses and retries after a
// backoff. With pipeline_depth 2 the next batch is polled and prepared while one commits
// (BatchPipeline); each batch keeps this order.
#include "idem/consumer.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "consumer/batch/batch_pipeline.hpp"
#include "consumer/consumer_config_check.hpp"
#include "consumer/effects/effect_pipeline.hpp"
#include "consumer/horizon/dedup_retention_declarer.hpp"
#include "consumer/horizon/topic_retention_check.hpp"
#include "consumer/intake/fetch_gate.hpp"
#include "consumer/intake/poll_loop.hpp"
#include "consumer/letters/dead_letter_producer.hpp"
#include "consumer/letters/dead_letter_sender.hpp"
#include "consumer/letters/retry_topics.hpp"
#include "consumer/positions/partition_positions.hpp"
#include "idem/config.hpp"
#include "idem/error.hpp"
#include "kafka/consumer_queries.hpp"

namespace idem {

using detail::PartitionOffset;
using detail::record_location;
using detail::TopicPartition;

namespace {

using detail::bad_config;
using SteadyClock = std::chrono::steady_clock;

// How long one idle poll waits for a first record. stop() wakes it early; a paused
// partition that becomes due shortens it.
constexpr std::chrono::milliseconds kIdleWait{500};

// Attempts at reading the stored offsets at an assignment before the consumer stops.
constexpr std::uint32_t kStoredOffsetReads = 8;

void log_to_stderr(std::string_view line) {
  std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
}

/// Where the consumer is in its life: started, asked to stop (from any thread), finishing.
struct Lifecycle {
  std::atomic<bool> started{false};
  std::atomic<bool> stop_requested{false};
  /// When stop() was first called (steady clock), or 0: the start of the stop timeout.
  std::atomic<SteadyClock::rep> stop_requested_at{0};
  /// Set once finish() began (run() thread): the revoke of the close must not commit again.
  bool finishing = false;

  void request_stop() noexcept {
    SteadyClock::rep unset = 0;
    stop_requested_at.compare_exchange_strong(unset, SteadyClock::now().time_since_epoch().count());
    stop_requested.store(true);
  }
  /// The stop timeout counted from the first stop(), or from now without one.
  [[nodiscard]] SteadyClock::time_point stop_deadline(
      std::chrono::milliseconds timeout) const noexcept {
    const SteadyClock::rep requested = stop_requested_at.load();
    const SteadyClock::time_point from =
        requested != 0 ? SteadyClock::time_point(SteadyClock::duration(requested))
                       : SteadyClock::now();
    return from + timeout;
  }
};

/// The counters other threads read (Consumer::stats), and when the loop last turned.
struct SharedStats {
  mutable std::mutex mutex;
  ConsumerStats totals;
  std::atomic<SteadyClock::rep> last_loop{0};

  void add(const ConsumerStats& delta) {
    std::lock_guard lock(mutex);
    totals.add(delta);
  }
};

}  // namespace

struct Consumer::Impl {
  Impl(ConsumerConfig cfg, std::unique_ptr<Store> s, ConsumerHooks h, bool forward_kafka_logs)
      : config(std::move(cfg)),
        store(std::move(s)),
        hooks(std::move(h)),
        retry_topics(config),
        declarer(config, *store, hooks.log),
        positions(config, *store, hooks.log) {
    poll = std::make_unique<detail::PollLoop>(
        config, &hooks.log, forward_kafka_logs,
        detail::PollLoop::Listener{
            [this](std::span<const TopicPartition> tps, bool lost) { on_revoked(tps, lost); },
            // Kafka's committed offsets follow the stored ones the partitions started from
            // where the two disagreed (lag tools read Kafka's).
            [this](std::span<const TopicPartition>) {
              std::vector<PartitionOffset> starts = positions.take_start_commits();
              if (!starts.empty()) static_cast<void>(poll->commit(starts, true));
            },
            [this](std::span<const TopicPartition> tps) { return start_offsets(tps); },
            [this](const TopicPartition& tp) { return positions.commit_metadata(tp); }});
    gate = std::make_unique<detail::FetchGate>(*poll, positions.progress(), config.retry);
    dlq = std::make_unique<detail::DeadLetterProducer>(config, retry_topics, &hooks.log,
                                                       forward_kafka_logs);
    batches = std::make_unique<detail::BatchPipeline>(
        context, *store, [this](detail::BatchPipeline::Lane& lane) { finish_batch(lane); },
        [this] { poll->wake(); });
  }

  void run();
  void loop();
  void process_batch(std::vector<detail::KafkaMessage>& batch);
  void finish_batch(detail::BatchPipeline::Lane& lane);
  void run_effects(ConsumerStats& delta, bool start_calls);
  /// Commits the positions that moved (asynchronously). Returns whether there were any.
  bool commit_moved(ConsumerStats& delta);
  /// Sends `r`'s dead letters; returns those the broker did not acknowledge.
  std::vector<PartitionOffset> send_dead_letters(const detail::BatchResult& r,
                                                 ConsumerStats& delta);
  void resume_due();
  void on_revoked(std::span<const TopicPartition> tps, bool lost);
  /// Finishes the batch and the apply whose commits are in flight.
  void settle_all();
  /// Whether a transaction is between its prepare and its settling.
  [[nodiscard]] bool in_flight() const noexcept {
    return batches->in_flight() || (effects && effects->applying());
  }
  /// Where assigned partitions start (PartitionPositions::starts).
  std::vector<std::optional<std::int64_t>> start_offsets(std::span<const TopicPartition> tps);
  /// A store connection was replaced: reads the stored offsets again and goes back to
  /// them, dropping what was held of those partitions (a failover may have taken back
  /// transactions this consumer counts as done).
  void go_back_to_the_store();
  /// With nothing in flight: writes positions moved by acknowledgements alone.
  void write_moved_positions();
  [[nodiscard]] std::vector<std::string> finish(SteadyClock::time_point deadline);
  void finish_quietly() noexcept;
  std::vector<PartitionLag> lag() const;

  ConsumerConfig config;
  std::unique_ptr<Store> store;
  ConsumerHooks hooks;  // hooks.log is set (stderr unless the caller's)
  detail::TopicHandlers handlers;
  detail::RetryTopicMap retry_topics;
  detail::DedupRetentionDeclarer declarer;  // owns the dedup horizon guard
  detail::PartitionPositions positions;
  const detail::ConsumerContext context{config,
                                        hooks,
                                        hooks.log,
                                        handlers,
                                        retry_topics,
                                        declarer.guard(),
                                        detail::SteadyClock::real(),
                                        &positions};
  std::unique_ptr<detail::DeadLetterProducer> dlq;
  std::unique_ptr<detail::PollLoop> poll;
  std::unique_ptr<detail::FetchGate> gate;  // over poll and the positions' progress
  // Declared after poll: records must be destroyed before the consumer handle.
  std::unique_ptr<detail::BatchPipeline> batches;
  std::unique_ptr<detail::EffectPipeline> effects;  // null without effect handlers
  Lifecycle life;
  SharedStats shared;
};

void Consumer::Impl::on_revoked(std::span<const TopicPartition> tps, bool lost) {
  // The batch (and the effects' apply transaction) whose commit is in flight is finished
  // first, so its offsets are among those committed here and none is advanced for a
  // partition no longer owned.
  if (!life.finishing) {
    settle_all();
    // The letters the settle acknowledged moved positions no transaction wrote; the next
    // owner starts from the store, and would send them again.
    if (!lost) write_moved_positions();
  }
  // Commit exactly what was processed before the partitions go; a failure (the mock
  // rejects commits during a rebalance) only means duplicates for the next owner.
  // While finishing, the final commit was made (or could not be made in time) already;
  // a synchronous one here could wait for a broker that is gone past the stop deadline.
  const std::vector<PartitionOffset> moved = positions.positions(tps);
  if (!lost && !life.finishing && !moved.empty()) {
    static_cast<void>(poll->commit(moved, /*async=*/false));
    ConsumerStats delta;
    delta.offset_commits = 1;
    shared.add(delta);
  }
  positions.forget(tps);
  gate->forget(tps);
  if (effects) effects->on_revoked(tps);
}

void Consumer::Impl::settle_all() {
  batches->settle();
  if (effects) {
    ConsumerStats delta;
    effects->settle(delta);
    shared.add(delta);
  }
}

std::vector<std::optional<std::int64_t>> Consumer::Impl::start_offsets(
    std::span<const TopicPartition> tps) {
  if (!positions.in_store()) return {};
  settle_all();  // the first connection is free, and nothing commits unverified
  // Nothing of these partitions may be fetched before their stored offsets are known; a
  // store that does not answer for long stops the consumer (rethrown by the poll).
  const std::vector<StoredOffset> rows = positions.read(life.stop_requested, kStoredOffsetReads);
  std::vector<detail::CommittedOffset> kafka(tps.size());
  try {
    kafka = poll->committed(tps, std::chrono::seconds(10));
  } catch (const Error& e) {
    hooks.log(fmt::format(
        "idem consumer: Kafka's committed offsets not compared with the store's: {}", e.what()));
  }
  ConsumerStats delta;
  std::vector<std::optional<std::int64_t>> starts = positions.starts(tps, rows, kafka, delta);
  shared.add(delta);
  return starts;
}

void Consumer::Impl::go_back_to_the_store() {
  settle_all();
  // Not read (the store is still away): nothing commits on the replaced connection
  // meanwhile, and the next turn tries again.
  const std::optional<std::vector<StoredOffset>> rows = positions.read_again();
  if (!rows) return;
  ConsumerStats delta;
  const std::vector<PartitionOffset> back = positions.go_back(poll->assignment(), *rows, delta);
  shared.add(delta);
  if (effects) {
    std::vector<TopicPartition> tps;
    tps.reserve(back.size());
    for (const auto& b : back) tps.push_back(b.tp);
    effects->on_revoked(tps);
  }
  gate->rewind(back);
}

void Consumer::Impl::write_moved_positions() {
  if (!in_flight()) positions.write_moved();
}

std::vector<PartitionLag> Consumer::Impl::lag() const {
  // Runs on the caller's (scrape) thread; no librdkafka call is made under a lock (the
  // poll thread takes it from callbacks).
  return detail::assignment_lag(
      poll->handle(),
      [this](std::string_view topic, std::int32_t partition) -> std::optional<std::int64_t> {
        return positions.next_to_process({std::string(topic), partition});
      });
}

std::vector<std::string> Consumer::Impl::finish(SteadyClock::time_point deadline) {
  life.finishing = true;
  const std::vector<PartitionOffset> moved = positions.positions({});
  if (!moved.empty()) {
    ConsumerStats delta;
    delta.offset_commits = 1;
    shared.add(delta);
  }
  return poll->finish(moved, deadline, format_duration(config.stop_timeout));
}

void Consumer::Impl::finish_quietly() noexcept {
  try {
    for (const std::string& problem : finish(life.stop_deadline(config.stop_timeout)))
      hooks.log("idem consumer: while closing: " + problem);
  } catch (const std::exception& e) {
    hooks.log(fmt::format("idem consumer: error while closing: {}", e.what()));
  } catch (...) {
  }
}

void Consumer::Impl::resume_due() {
  const auto now = SteadyClock::now();
  const auto due = gate->next_due();
  if (!due || *due > now) return;
  // A partition resumes at the record expected next, which a batch still committing moves:
  // finished first, its records are not fetched again.
  batches->settle();
  gate->release_due(now);
}

void Consumer::Impl::run() {
  std::optional<detail::TopicRetentionCheck> retention_check;
  if (config.check_topic_retention) retention_check.emplace(config, hooks.log);
  std::vector<std::string> subscription = config.topics;
  for (auto& name : retry_topics.all()) subscription.push_back(std::move(name));
  if (!handlers.effects.empty()) {
    effects = std::make_unique<detail::EffectPipeline>(
        detail::EffectPipeline::Deps{context, *store, batches->first_processor(), *gate, positions,
                                     [this](const detail::BatchResult& r, ConsumerStats& delta) {
                                       return send_dead_letters(r, delta);
                                     }});
  }
  declarer.declare_at_start(life.stop_requested);
  poll->subscribe(subscription);
  try {
    loop();
    batches->settle();
    // As on a revoke: the letters of the batch finished just now moved positions that no
    // transaction wrote.
    write_moved_positions();
  } catch (const detail::HookAbort& abort) {
    batches->abandon();
    finish_quietly();
    std::rethrow_exception(abort.error);
  } catch (...) {
    batches->abandon();
    finish_quietly();
    throw;
  }
  // Graceful stop: the last batch is processed; commit it and leave the group, both
  // bounded by the stop deadline. What could not be done is the caller's error to report.
  const std::vector<std::string> undone = finish(life.stop_deadline(config.stop_timeout));
  if (!undone.empty()) {
    for (std::size_t i = 1; i < undone.size(); ++i) hooks.log("idem consumer: " + undone[i]);
    throw Error(ErrorCode::Timeout, ErrorSource::Kafka, "consumer stop: " + undone.front());
  }
}

void Consumer::Impl::loop() {
  // While stopping, calls in flight are awaited (their results applied and committed)
  // and the poll keeps being served meanwhile; no new call starts.
  const std::atomic<bool> keep_polling{false};
  std::optional<SteadyClock::time_point> drain_deadline;
  // Declared here, after poll: the records are destroyed before the consumer handle.
  std::vector<detail::KafkaMessage> batch;
  while (true) {
    const bool stopping = life.stop_requested.load();
    const auto now = SteadyClock::now();
    if (stopping) {
      if (!effects || effects->settled()) break;
      // The drain gets its own timeout, but at most half of the stop budget: the final
      // offset commit and the group leave keep the other half (else the partitions wait
      // out session.timeout.ms before another member gets them).
      if (!drain_deadline) {
        drain_deadline =
            std::min(now + config.call_drain_timeout,
                     life.stop_deadline(config.stop_timeout) - config.stop_timeout / 2);
      }
      if (now >= *drain_deadline) {
        hooks.log(
            "idem consumer: stopping with calls still in flight; their events are not "
            "committed and will be delivered again");
        break;
      }
    }
    shared.last_loop.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    if (declarer.renewal_due()) batches->settle();  // the declaration uses the first connection
    declarer.renew_if_due();
    resume_due();
    auto wait = kIdleWait;
    std::optional<SteadyClock::time_point> due = gate->next_due();
    if (effects) {
      if (const auto work = effects->next_work(now)) due = due ? std::min(*due, *work) : *work;
    }
    if (due) {
      wait = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(*due - now),
                        std::chrono::milliseconds(0), kIdleWait);
    }
    // A batch whose commit is in flight is finished as soon as the commit returns; the
    // poll stops waiting for it then.
    poll->poll_batch(batch, config.batch_size, wait, config.batch_window,
                     stopping ? keep_polling : life.stop_requested,
                     effects ? &effects->wake_flag() : &batches->commit_done());
    if (!batch.empty()) positions.records_polled(now);
    // Polled while the calls drain (the poll keeps the membership alive): not taken. They
    // are the next owner's; nothing of them is received, so no commit covers them.
    if (stopping) batch.clear();
    // Pausing purges fetched records, but nothing of a held partition may be processed
    // ahead of its retry or past the effect path's buffer: it comes again when resumed.
    gate->drop_held(batch);
    // Before the effect path takes its records: a retry of an effect topic waits too.
    if (config.retry_topics.enabled() && !batch.empty()) {
      gate->defer_not_due(batch, retry_topics,
                          std::chrono::duration_cast<std::chrono::milliseconds>(
                              config.clock->now().time_since_epoch())
                              .count(),
                          SteadyClock::now());
    }
    ConsumerStats effect_delta;
    if (effects && !batch.empty()) {
      const std::size_t polled = batch.size();
      effects->admit(batch, effect_delta);
      if (batch.size() != polled) detail::call_hook(hooks, HookPoint::BatchPolled);
    }
    if (!batch.empty())
      process_batch(batch);
    else
      batches->settle();
    batch.clear();
    if (effects) run_effects(effect_delta, !stopping);
    // Idle: no transaction would notice a failover, nor apply again what it took back.
    if (!positions.resync_due() && !stopping && !in_flight()) positions.idle_look(now);
    if (positions.resync_due()) go_back_to_the_store();
    write_moved_positions();
  }
}

void Consumer::Impl::run_effects(ConsumerStats& delta, bool start_calls) {
  effects->turn(delta, start_calls);
  const bool committed = commit_moved(delta);
  shared.add(delta);
  if (committed) detail::call_hook(hooks, HookPoint::AfterOffsetCommit);
}

bool Consumer::Impl::commit_moved(ConsumerStats& delta) {
  const std::vector<PartitionOffset> moved = positions.take_moved();
  if (moved.empty()) return false;
  static_cast<void>(poll->commit(moved, /*async=*/true));
  delta.offset_commits = 1;
  return true;
}

std::vector<PartitionOffset> Consumer::Impl::send_dead_letters(const detail::BatchResult& r,
                                                               ConsumerStats& delta) {
  std::vector<PartitionOffset> refused = detail::send_letters(*dlq, config, hooks.log, r, delta);
  for (const detail::DeadLetter& letter : r.dead_letters) {
    const rd_kafka_message_t& m = *letter.original;
    PartitionOffset at{{rd_kafka_topic_name(m.rkt), m.partition}, m.offset};
    if (std::find(refused.begin(), refused.end(), at) == refused.end())
      positions.progress().acknowledge_letter(at.tp, at.offset);
  }
  return refused;
}

void Consumer::Impl::process_batch(std::vector<detail::KafkaMessage>& batch) {
  detail::call_hook(hooks, HookPoint::BatchPolled);
  batches->submit(batch, gate->schedule());
  if (effects) batches->settle();  // the effect path uses the first connection
}

void Consumer::Impl::finish_batch(detail::BatchPipeline::Lane& lane) {
  detail::BatchResult& r = lane.result;
  ConsumerStats delta;
  delta.delivered = lane.batch.size();
  if (!r.failure.empty()) {
    hooks.log(
        fmt::format("idem consumer: batch of {} record(s) not committed, retrying its "
                    "partitions after a backoff: {}",
                    lane.batch.size(), r.failure));
  }
  delta.processed = r.processed;
  delta.duplicates = r.duplicates;
  detail::add_route_counts(r, delta);
  delta.transactions = r.committed ? 1 : 0;
  if (r.committed && r.rows) positions.committed(*r.rows);
  const std::vector<PartitionOffset> refused = send_dead_letters(r, delta);

  const auto now = SteadyClock::now();
  detail::PartitionProgress& progress = positions.progress();
  std::vector<std::int64_t> refused_here;
  for (auto& p : r.partitions) {
    refused_here.clear();
    for (const auto& letter : refused) {
      if (letter.tp == p.tp) refused_here.push_back(letter.offset);
    }
    const std::optional<std::int64_t> again = progress.settle_batch(p, refused_here);
    if (const auto position = progress.commit_position(p.tp)) gate->progressed(p.tp, *position);
    if (!again) continue;
    p.retry_at = again;  // BatchPipeline holds the partition's later records back too
    const auto delay = gate->retry_later(p.tp, *again, now);
    const auto retried = std::find_if(lane.batch.begin(), lane.batch.end(), [&](const auto& m) {
      return m->partition == p.tp.partition && m->offset == *again &&
             p.tp.topic == rd_kafka_topic_name(m->rkt);
    });
    if (retried != lane.batch.end()) {
      hooks.log(fmt::format("idem consumer: retrying {} in {} ms", record_location(**retried),
                            delay.count()));
    }
    ++delta.retries;
  }

  const bool committed = commit_moved(delta);
  shared.add(delta);
  if (committed) detail::call_hook(hooks, HookPoint::AfterOffsetCommit);
  if (hooks.on_batch)
    hooks.on_batch({lane.batch.size(), r.committed, lane.committed - lane.started});
}

Consumer::Consumer(ConsumerConfig config, std::unique_ptr<Store> store, ConsumerHooks hooks) {
  detail::validate_consumer_config(config);
  if (!store) bad_config("store is null");
  // librdkafka's own lines go to the caller's log only when the caller gave one.
  const bool forward_kafka_logs = static_cast<bool>(hooks.log);
  if (!hooks.log) hooks.log = log_to_stderr;
  impl_ = std::make_unique<Impl>(std::move(config), std::move(store), std::move(hooks),
                                 forward_kafka_logs);
}

Consumer::~Consumer() = default;

void Consumer::check_topic_handler(const std::string& topic, bool has_handler) const {
  if (impl_->life.started.load()) bad_config("on() after run() started");
  if (!has_handler) bad_config(fmt::format("empty handler for topic '{}'", topic));
  const auto& topics = impl_->config.topics;
  if (std::find(topics.begin(), topics.end(), topic) == topics.end())
    bad_config(fmt::format("topic '{}' is not in the subscription", topic));
  if (impl_->handlers.contains(topic))
    bad_config(fmt::format("topic '{}' has a handler already", topic));
}

void Consumer::add_topic_handler(std::string topic, std::unique_ptr<detail::TopicHandler> handler,
                                 bool has_handler) {
  check_topic_handler(topic, has_handler);
  for (auto& name : impl_->retry_topics.of(topic))
    impl_->handlers.batch.emplace(std::move(name),
                                  std::make_unique<detail::RetryTopicHandler>(*handler));
  impl_->handlers.batch.emplace(std::move(topic), std::move(handler));
}

void Consumer::add_effect_topic_handler(std::string topic,
                                        std::unique_ptr<detail::EffectTopicHandler> handler,
                                        bool complete) {
  if (!complete)
    bad_config(fmt::format("effect handler for topic '{}' needs both call and apply", topic));
  check_topic_handler(topic, true);
  for (auto& name : impl_->retry_topics.of(topic)) {
    impl_->handlers.effects.emplace(std::move(name),
                                    std::make_unique<detail::RetryEffectTopicHandler>(*handler));
  }
  impl_->handlers.effects.emplace(std::move(topic), std::move(handler));
}

void Consumer::run() {
  if (impl_->life.started.exchange(true)) bad_config("run() may be called only once");
  impl_->run();
}

void Consumer::stop() noexcept {
  impl_->life.request_stop();
  impl_->poll->wake();
}

std::vector<PartitionLag> Consumer::lag() const {
  return impl_->lag();
}

ConsumerStats Consumer::stats() const {
  std::lock_guard lock(impl_->shared.mutex);
  ConsumerStats out = impl_->shared.totals;
  impl_->declarer.guard().fill(out);
  out.last_loop = SteadyClock::time_point(
      SteadyClock::duration(impl_->shared.last_loop.load(std::memory_order_relaxed)));
  return out;
}

}  // namespace idem
