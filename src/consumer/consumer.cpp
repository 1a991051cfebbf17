// idem::Consumer: wires the poll loop, the batch pipeline, the dead-letter producer,
// the offset tracker and the retry schedule together. The order of one batch is the
// whole protocol: poll -> validate -> transaction (mark, handlers, commit) -> DLQ acks
// -> offset commit; a partition that failed pauses and retries after a backoff. With
// pipeline_depth 2 the next batch is polled and prepared while one commits
// (BatchPipeline); each batch's steps keep this order.
#include "idem/consumer.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "consumer/batch_pipeline.hpp"
#include "consumer/consumer_config_check.hpp"
#include "consumer/dead_letter_producer.hpp"
#include "consumer/dedup_retention_declarer.hpp"
#include "consumer/effect_pipeline.hpp"
#include "consumer/offset_tracker.hpp"
#include "consumer/poll_loop.hpp"
#include "consumer/retry_schedule.hpp"
#include "consumer/retry_topics.hpp"
#include "consumer/topic_retention_check.hpp"
#include "idem/config.hpp"
#include "idem/error.hpp"
#include "idem/tracing.hpp"
#include "retry/backoff.hpp"

namespace idem {

using detail::PartitionOffset;
using detail::TopicPartition;

namespace {

using detail::bad_config;

// How long one idle poll waits for a first record. stop() wakes it early; a paused
// partition that becomes due shortens it.
constexpr std::chrono::milliseconds kIdleWait{500};

detail::LogFn make_log(const ConsumerHooks& hooks) {
  if (hooks.log) return hooks.log;
  return [](std::string_view line) {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  };
}

// `topic=T partition=P offset=O [event_id=E] [trace_id=X]`: where a dead-lettered or
// retried record is, so its log line can be matched with the DLQ and with traces.
std::string record_location(const rd_kafka_message_t& m) {
  std::string out = fmt::format("topic={} partition={} offset={}", rd_kafka_topic_name(m.rkt),
                                m.partition, m.offset);
  rd_kafka_headers_t* headers = nullptr;  // owned by the message
  if (rd_kafka_message_headers(&m, &headers) != RD_KAFKA_RESP_ERR_NO_ERROR) return out;
  const auto last = [&](const char* name) -> std::optional<std::string_view> {
    const void* value = nullptr;
    std::size_t size = 0;
    if (rd_kafka_header_get_last(headers, name, &value, &size) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        value == nullptr) {
      return std::nullopt;
    }
    return std::string_view(static_cast<const char*>(value), size);
  };
  if (const auto event_id = last("event_id")) out += fmt::format(" event_id={}", *event_id);
  if (const auto traceparent = last(kTraceparentHeader.data())) {
    if (const auto trace = parse_traceparent(*traceparent))
      out += " trace_id=" + trace->trace_id_hex();
  }
  return out;
}

}  // namespace

std::string_view to_string(HookPoint point) noexcept {
  switch (point) {
    case HookPoint::BatchPolled: return "batch_polled";
    case HookPoint::AfterHandler: return "after_handler";
    case HookPoint::BeforeDbCommit: return "before_db_commit";
    case HookPoint::AfterDbCommit: return "after_db_commit";
    case HookPoint::AfterOffsetCommit: return "after_offset_commit";
  }
  return "unknown";
}

struct Consumer::Impl {
  Impl(ConsumerConfig cfg, std::unique_ptr<Store> s, ConsumerHooks h)
      : config(std::move(cfg)),
        store(std::move(s)),
        hooks(std::move(h)),
        log(make_log(hooks)),
        backoff(config.retry),
        retry_topics(config),
        horizon_guard(config),
        declarer(config, *store, horizon_guard, log) {
    const bool forward = static_cast<bool>(hooks.log);
    poll = std::make_unique<detail::PollLoop>(
        config, &log, forward,
        detail::PollLoop::Listener{
            [this](std::span<const TopicPartition> tps, bool lost) { on_revoked(tps, lost); },
            [](std::span<const TopicPartition>) {}});
    dlq = std::make_unique<detail::DeadLetterProducer>(config, retry_topics, &log, forward);
    batches = std::make_unique<detail::BatchPipeline>(
        config, *store, routes, hooks, retry_topics, horizon_guard,
        [this](detail::BatchPipeline::Lane& lane) { finish_batch(lane); },
        [this] { poll->wake(); });
  }

  void run();
  void loop();
  void process_batch();
  void finish_batch(detail::BatchPipeline::Lane& lane);
  void run_effects(ConsumerStats& delta, bool start_calls);
  void add_stats(const ConsumerStats& delta);
  /// Records where processing of each partition in `moved` goes on, for lag().
  void note_moved(const std::vector<PartitionOffset>& moved);
  void apply_dead_letter_acks(detail::BatchResult& r, ConsumerStats& delta);
  void resume_due();
  void defer_early_retries();
  void on_revoked(std::span<const TopicPartition> tps, bool lost);
  [[nodiscard]] std::chrono::steady_clock::time_point stop_deadline() const noexcept;
  [[nodiscard]] std::vector<std::string> finish(std::chrono::steady_clock::time_point deadline);
  void finish_quietly() noexcept;
  std::vector<PartitionLag> lag() const;

  ConsumerConfig config;
  std::unique_ptr<Store> store;
  ConsumerHooks hooks;
  detail::LogFn log;
  detail::RouteTable routes;
  detail::OffsetTracker tracker;
  detail::RetrySchedule schedule;
  detail::Backoff backoff;
  detail::RetryTopicMap retry_topics;
  detail::DedupHorizonGuard horizon_guard;
  detail::DedupRetentionDeclarer declarer;
  std::unique_ptr<detail::DeadLetterProducer> dlq;
  std::unique_ptr<detail::PollLoop> poll;
  // Declared after poll: records must be destroyed before the consumer handle.
  std::unique_ptr<detail::BatchPipeline> batches;
  std::vector<detail::KafkaMessage> batch;
  std::unique_ptr<detail::EffectPipeline> effects;  // null without effect routes

  // Next offset to process per partition, for lag() (the tracker's positions are
  // consumed by commits); guarded by stats_mutex, dropped on revoke.
  std::unordered_map<TopicPartition, std::int64_t, detail::TopicPartitionHash> processed_next;
  std::atomic<std::chrono::steady_clock::rep> last_loop{0};

  std::atomic<bool> stop_requested{false};
  // When stop() was first called (steady clock), or 0: the start of the stop timeout.
  std::atomic<std::chrono::steady_clock::rep> stop_requested_at{0};
  // Set once finish() began: the revoke of the close must not commit again.
  bool final_commit_attempted = false;
  std::atomic<bool> started{false};
  mutable std::mutex stats_mutex;
  ConsumerStats stats;
};

void Consumer::Impl::on_revoked(std::span<const TopicPartition> tps, bool lost) {
  // The batch (and the effects' apply transaction) whose commit is in flight is finished
  // first, so its offsets are among those committed here and none is advanced for a
  // partition no longer owned.
  if (!final_commit_attempted) {
    batches->settle();
    if (effects) {
      ConsumerStats delta;
      note_moved(effects->settle(delta));
      add_stats(delta);
    }
  }
  // Commit exactly what was processed before the partitions go; a failure (the mock
  // rejects commits during a rebalance) only means duplicates for the next owner.
  // While finishing, the final commit was made (or could not be made in time) already;
  // a synchronous one here could wait for a broker that is gone past the stop deadline.
  const std::vector<PartitionOffset> positions = tracker.positions(tps);
  if (!lost && !final_commit_attempted && !positions.empty()) {
    static_cast<void>(poll->commit(positions, /*async=*/false));
    std::lock_guard lock(stats_mutex);
    ++stats.offset_commits;
  }
  tracker.forget(tps);
  schedule.forget(tps);
  if (effects) effects->on_revoked(tps);
  std::lock_guard lock(stats_mutex);
  for (const auto& tp : tps) processed_next.erase(tp);
}

std::vector<PartitionLag> Consumer::Impl::lag() const {
  // librdkafka's assignment, position and cached-watermark calls are thread-safe and
  // local (no broker round trip), so this runs on the caller's (scrape) thread.
  rd_kafka_t* rk = poll->handle();
  rd_kafka_topic_partition_list_t* assignment = nullptr;
  if (rk == nullptr || rd_kafka_assignment(rk, &assignment) != RD_KAFKA_RESP_ERR_NO_ERROR)
    return {};
  const detail::PartitionList owned(assignment);
  rd_kafka_position(rk, owned.get());  // offset after the last record handed out
  std::vector<PartitionLag> out;
  std::vector<std::int64_t> high(static_cast<std::size_t>(owned->cnt), -1);
  for (int i = 0; i < owned->cnt; ++i) {
    const auto& p = owned->elems[i];
    std::int64_t low = -1;
    if (rd_kafka_get_watermark_offsets(rk, p.topic, p.partition, &low,
                                       &high[static_cast<std::size_t>(i)]) !=
        RD_KAFKA_RESP_ERR_NO_ERROR)
      high[static_cast<std::size_t>(i)] = -1;
  }
  // No librdkafka call under the lock: the poll thread takes it from callbacks.
  std::lock_guard lock(stats_mutex);
  for (int i = 0; i < owned->cnt; ++i) {
    const auto& p = owned->elems[i];
    PartitionLag& l = out.emplace_back(PartitionLag{p.topic, p.partition, -1});
    const auto it = processed_next.find({p.topic, p.partition});
    const std::int64_t next = it != processed_next.end() ? it->second : p.offset;
    const std::int64_t hw = high[static_cast<std::size_t>(i)];
    if (next >= 0 && hw >= 0) l.lag = std::max<std::int64_t>(0, hw - next);
  }
  return out;
}

std::chrono::steady_clock::time_point Consumer::Impl::stop_deadline() const noexcept {
  using SteadyClock = std::chrono::steady_clock;
  const SteadyClock::rep requested = stop_requested_at.load();
  const SteadyClock::time_point from =
      requested != 0 ? SteadyClock::time_point(SteadyClock::duration(requested))
                     : SteadyClock::now();
  return from + config.stop_timeout;
}

std::vector<std::string> Consumer::Impl::finish(std::chrono::steady_clock::time_point deadline) {
  batch.clear();
  final_commit_attempted = true;
  std::vector<std::string> undone;
  const std::string within = format_duration(config.stop_timeout);
  if (const std::vector<PartitionOffset> positions = tracker.positions({}); !positions.empty()) {
    const rd_kafka_resp_err_t err = poll->commit_before(positions, deadline);
    {
      std::lock_guard lock(stats_mutex);
      ++stats.offset_commits;
    }
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      const std::string why = err == RD_KAFKA_RESP_ERR__TIMED_OUT
                                  ? "no answer from the group coordinator (broker unreachable)"
                                  : std::string(rd_kafka_err2str(err));
      undone.push_back(
          fmt::format("final offset commit not made within {}: {}; the uncommitted events will be "
                      "redelivered and deduplicated",
                      within, why));
    }
  }
  if (!poll->close_before(deadline)) {
    undone.push_back(
        fmt::format("consumer group not left within {}: the group reassigns its partitions after "
                    "session.timeout.ms",
                    within));
  }
  return undone;
}

void Consumer::Impl::finish_quietly() noexcept {
  try {
    for (const std::string& problem : finish(stop_deadline()))
      log("idem consumer: while closing: " + problem);
  } catch (const std::exception& e) {
    log(fmt::format("idem consumer: error while closing: {}", e.what()));
  } catch (...) {
  }
}

void Consumer::Impl::resume_due() {
  if (!schedule.any_paused()) return;
  for (const PartitionOffset& at : schedule.take_due(std::chrono::steady_clock::now())) {
    poll->seek_and_resume(at);
  }
}

void Consumer::Impl::defer_early_retries() {
  // A retry-topic record before its not-before time: pause its partition there and come
  // back when it is due (the poll loop waits on the schedule, it never sleeps). Records
  // of that partition before it are processed now; it and those after it are refetched.
  const auto wall_now =
      std::chrono::duration_cast<std::chrono::milliseconds>(config.clock->now().time_since_epoch())
          .count();
  const auto steady_now = std::chrono::steady_clock::now();
  std::unordered_map<TopicPartition, std::int64_t, detail::TopicPartitionHash> deferred_from;
  for (const auto& m : batch) {
    const auto not_before = retry_topics.not_before_ms(*m);
    if (!not_before || *not_before <= wall_now) continue;
    const TopicPartition tp{rd_kafka_topic_name(m->rkt), m->partition};
    if (deferred_from.contains(tp)) continue;
    deferred_from.emplace(tp, m->offset);
    schedule.defer(tp, m->offset, steady_now + std::chrono::milliseconds(*not_before - wall_now));
    poll->pause_and_seek({tp, m->offset});
  }
  if (deferred_from.empty()) return;
  std::erase_if(batch, [&](const detail::KafkaMessage& m) {
    const auto it = deferred_from.find({rd_kafka_topic_name(m->rkt), m->partition});
    return it != deferred_from.end() && m->offset >= it->second;
  });
}

void Consumer::Impl::run() {
  std::optional<detail::TopicRetentionCheck> retention_check;
  if (config.check_topic_retention) retention_check.emplace(config, log);
  std::vector<std::string> subscription = config.topics;
  for (auto& name : retry_topics.all()) subscription.push_back(std::move(name));
  const bool has_effects = std::any_of(routes.begin(), routes.end(), [](const auto& r) {
    return dynamic_cast<const detail::EffectRoute*>(r.second.get()) != nullptr;
  });
  if (has_effects) {
    effects = std::make_unique<detail::EffectPipeline>(detail::EffectPipeline::Deps{
        config, *store, batches->first_processor(), routes, hooks, horizon_guard, *poll, tracker,
        retry_topics, log, hooks.on_batch, [this](detail::BatchResult& r, ConsumerStats& delta) {
          apply_dead_letter_acks(r, delta);
        }});
  }
  declarer.declare_at_start(stop_requested);
  poll->subscribe(subscription);
  try {
    loop();
    batches->settle();
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
  const std::vector<std::string> undone = finish(stop_deadline());
  if (!undone.empty()) {
    for (std::size_t i = 1; i < undone.size(); ++i) log("idem consumer: " + undone[i]);
    throw Error(ErrorCode::Timeout, ErrorSource::Kafka, "consumer stop: " + undone.front());
  }
}

void Consumer::Impl::loop() {
  using SteadyClock = std::chrono::steady_clock;
  // While stopping, calls in flight are awaited (their results applied and committed)
  // and the poll keeps being served meanwhile; no new call starts.
  const std::atomic<bool> keep_polling{false};
  std::optional<SteadyClock::time_point> drain_deadline;
  while (true) {
    const bool stopping = stop_requested.load();
    const auto now = SteadyClock::now();
    if (stopping) {
      if (!effects || effects->settled()) break;
      // The drain gets its own timeout, but never past the stop deadline.
      if (!drain_deadline)
        drain_deadline = std::min(now + config.call_drain_timeout, stop_deadline());
      if (now >= *drain_deadline) {
        log("idem consumer: stopping with calls still in flight; their events are not "
            "committed and will be delivered again");
        break;
      }
    }
    last_loop.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    if (declarer.renewal_due()) batches->settle();  // the declaration uses the first connection
    declarer.renew_if_due();
    resume_due();
    auto wait = kIdleWait;
    std::optional<SteadyClock::time_point> due = schedule.next_due();
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
                     stopping ? keep_polling : stop_requested,
                     effects ? &effects->wake_flag() : &batches->commit_done());
    if (schedule.any_paused()) {
      // Belt and braces: pausing purges fetched records, but nothing of a paused
      // partition may be processed ahead of its retry.
      std::erase_if(batch, [&](const detail::KafkaMessage& m) {
        return schedule.paused({rd_kafka_topic_name(m->rkt), m->partition});
      });
    }
    // Before the effect path takes its records: a retry of an effect topic waits too.
    if (config.retry_topics.enabled() && !batch.empty()) defer_early_retries();
    ConsumerStats effect_delta;
    if (effects && !batch.empty()) {
      const std::size_t polled = batch.size();
      effects->admit(batch, effect_delta);
      if (batch.size() != polled) detail::call_hook(hooks, HookPoint::BatchPolled);
    }
    if (!batch.empty())
      process_batch();
    else
      batches->settle();
    batch.clear();
    if (effects) run_effects(effect_delta, !stopping);
  }
}

void Consumer::Impl::run_effects(ConsumerStats& delta, bool start_calls) {
  const std::vector<PartitionOffset> moved = effects->turn(delta, start_calls);
  const std::vector<PartitionOffset> dirty = tracker.take_dirty();
  if (!dirty.empty()) {
    static_cast<void>(poll->commit(dirty, /*async=*/true));
    delta.offset_commits = 1;
  }
  add_stats(delta);
  note_moved(moved);
  if (!dirty.empty()) detail::call_hook(hooks, HookPoint::AfterOffsetCommit);
}

void Consumer::Impl::note_moved(const std::vector<PartitionOffset>& moved) {
  std::lock_guard lock(stats_mutex);
  for (const auto& p : moved) processed_next[p.tp] = p.offset;
}

void Consumer::Impl::add_stats(const ConsumerStats& delta) {
  std::lock_guard lock(stats_mutex);
  stats.delivered += delta.delivered;
  stats.processed += delta.processed;
  stats.duplicates += delta.duplicates;
  stats.dead_lettered += delta.dead_lettered;
  for (const auto& [reason, n] : delta.dead_lettered_by_reason)
    stats.dead_lettered_by_reason[reason] += n;
  stats.retries += delta.retries;
  stats.retry_topic_sends += delta.retry_topic_sends;
  stats.dead_letters_refused += delta.dead_letters_refused;
  stats.transactions += delta.transactions;
  stats.offset_commits += delta.offset_commits;
  stats.calls += delta.calls;
  stats.call_retries += delta.call_retries;
}

void Consumer::Impl::apply_dead_letter_acks(detail::BatchResult& r, ConsumerStats& delta) {
  if (r.dead_letters.empty()) return;
  const std::vector<rd_kafka_resp_err_t> errors = dlq->send(r.dead_letters, config.dlq_ack_timeout);
  for (std::size_t i = 0; i < errors.size(); ++i) {
    const detail::DeadLetter& letter = r.dead_letters[i];
    const bool acked = errors[i] == RD_KAFKA_RESP_ERR_NO_ERROR;
    if (acked && letter.retry_level > 0) {
      ++delta.retry_topic_sends;
      continue;
    }
    if (acked) {
      ++delta.dead_lettered;
      ++delta.dead_lettered_by_reason[letter.error_class];
      log(fmt::format("idem consumer: dead-lettered {} class={} attempts={}",
                      record_location(*letter.original), letter.error_class, letter.attempts));
      continue;
    }
    // Never lose a bad message: the partition goes back to this record and retries. A
    // refusal for good (DLQ topic unknown or not authorized) is retried the same way,
    // after the backoff, and counted, so that it is seen rather than spinning silently:
    // the letter producer logs each one as permanent.
    if (detail::permanent_produce_error(errors[i])) ++delta.dead_letters_refused;
    const rd_kafka_message_t& m = *letter.original;
    for (auto& p : r.partitions) {
      if (p.tp.partition != m.partition || p.tp.topic != rd_kafka_topic_name(m.rkt)) continue;
      p.next_offset = std::min(p.next_offset, m.offset);
      p.retry_at = std::min(p.retry_at.value_or(m.offset), m.offset);
    }
  }
}

void Consumer::Impl::process_batch() {
  detail::call_hook(hooks, HookPoint::BatchPolled);
  batches->submit(batch, schedule);
  if (effects) batches->settle();  // the effect path uses the first connection
}

void Consumer::Impl::finish_batch(detail::BatchPipeline::Lane& lane) {
  detail::BatchResult& r = lane.result;
  ConsumerStats delta;
  delta.delivered = lane.batch.size();
  if (!r.failure.empty()) {
    log(
        fmt::format("idem consumer: batch of {} record(s) not committed, retrying its "
                    "partitions after a backoff: {}",
                    lane.batch.size(), r.failure));
  }
  delta.processed = r.processed;
  delta.duplicates = r.duplicates;
  delta.transactions = r.committed ? 1 : 0;
  apply_dead_letter_acks(r, delta);

  const auto now = std::chrono::steady_clock::now();
  for (const auto& p : r.partitions) {
    if (p.next_offset > p.first_offset) {
      tracker.advance(p.tp, p.next_offset);
      schedule.progressed(p.tp, p.next_offset);
    }
    if (p.retry_at) {
      const auto delay = schedule.failed(p.tp, *p.retry_at, now, backoff);
      const auto retried = std::find_if(lane.batch.begin(), lane.batch.end(), [&](const auto& m) {
        return m->partition == p.tp.partition && m->offset == *p.retry_at &&
               p.tp.topic == rd_kafka_topic_name(m->rkt);
      });
      if (retried != lane.batch.end()) {
        log(fmt::format("idem consumer: retrying {} in {} ms", record_location(**retried),
                        delay.count()));
      }
      poll->pause_and_seek({p.tp, *p.retry_at});
      ++delta.retries;
    }
  }

  const std::vector<PartitionOffset> dirty = tracker.take_dirty();
  if (!dirty.empty()) {
    static_cast<void>(poll->commit(dirty, /*async=*/true));
    delta.offset_commits = 1;
  }
  add_stats(delta);
  {
    std::lock_guard lock(stats_mutex);
    for (const auto& p : r.partitions) {
      if (p.next_offset > p.first_offset) processed_next[p.tp] = p.next_offset;
    }
  }
  if (!dirty.empty()) detail::call_hook(hooks, HookPoint::AfterOffsetCommit);
  if (hooks.on_batch)
    hooks.on_batch({lane.batch.size(), r.committed, lane.committed - lane.started});
}

Consumer::Consumer(ConsumerConfig config, std::unique_ptr<Store> store, ConsumerHooks hooks) {
  detail::validate_consumer_config(config);
  if (!store) bad_config("store is null");
  impl_ = std::make_unique<Impl>(std::move(config), std::move(store), std::move(hooks));
}

Consumer::~Consumer() = default;

void Consumer::add_route(std::string topic, std::unique_ptr<detail::Route> route,
                         bool has_handler) {
  if (impl_->started.load()) bad_config("on() after run() started");
  if (!has_handler) bad_config(fmt::format("empty handler for topic '{}'", topic));
  const auto& topics = impl_->config.topics;
  if (std::find(topics.begin(), topics.end(), topic) == topics.end())
    bad_config(fmt::format("topic '{}' is not in the subscription", topic));
  if (impl_->routes.contains(topic))
    bad_config(fmt::format("topic '{}' has a handler already", topic));
  detail::Route& source = *route;
  auto* effect = dynamic_cast<detail::EffectRoute*>(&source);
  for (auto& name : impl_->retry_topics.of(topic)) {
    std::unique_ptr<detail::Route> retry;
    if (effect != nullptr)
      retry = std::make_unique<detail::RetryEffectRoute>(*effect);
    else
      retry = std::make_unique<detail::RetryRoute>(source);
    impl_->routes.emplace(std::move(name), std::move(retry));
  }
  impl_->routes.emplace(std::move(topic), std::move(route));
}

void Consumer::add_effect_route(std::string topic, std::unique_ptr<detail::EffectRoute> route,
                                bool complete) {
  if (!complete)
    bad_config(fmt::format("effect handler for topic '{}' needs both call and apply", topic));
  add_route(std::move(topic), std::move(route), true);
}

void Consumer::run() {
  if (impl_->started.exchange(true)) bad_config("run() may be called only once");
  impl_->run();
}

void Consumer::stop() noexcept {
  std::chrono::steady_clock::rep unset = 0;
  impl_->stop_requested_at.compare_exchange_strong(
      unset, std::chrono::steady_clock::now().time_since_epoch().count());
  impl_->stop_requested.store(true);
  impl_->poll->wake();
}

std::vector<PartitionLag> Consumer::lag() const {
  return impl_->lag();
}

ConsumerStats Consumer::stats() const {
  std::lock_guard lock(impl_->stats_mutex);
  ConsumerStats out = impl_->stats;
  impl_->horizon_guard.fill(out);
  out.last_loop = std::chrono::steady_clock::time_point(
      std::chrono::steady_clock::duration(impl_->last_loop.load(std::memory_order_relaxed)));
  return out;
}

}  // namespace idem
