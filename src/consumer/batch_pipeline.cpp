#include "consumer/batch_pipeline.hpp"

#include <algorithm>

#include "idem/error.hpp"

namespace idem::detail {

namespace {

/// True when `before` stopped the partition of `m` (retry_at set).
bool stopped_by(const BatchResult& before, const rd_kafka_message_t& m) {
  return std::any_of(before.partitions.begin(), before.partitions.end(), [&](const auto& p) {
    return p.retry_at && p.tp.partition == m.partition && p.tp.topic == rd_kafka_topic_name(m.rkt);
  });
}

}  // namespace

BatchPipeline::BatchPipeline(const ConsumerConfig& config, Store& store, RouteTable& routes,
                             const ConsumerHooks& hooks, const RetryTopicMap& retry_topics,
                             DedupHorizonGuard& horizon_guard, Finish finish,
                             std::function<void()> wake)
    : hooks_(hooks),
      one_writer_(store.backend() == Backend::Sqlite),
      finish_(std::move(finish)),
      wake_(std::move(wake)) {
  processors_.push_back(
      std::make_unique<BatchProcessor>(config, store, routes, hooks, retry_topics, horizon_guard));
  if (config.pipeline_depth < 2) return;
  second_store_ = store.connect_again();
  processors_.push_back(std::make_unique<BatchProcessor>(config, *second_store_, routes, hooks,
                                                         retry_topics, horizon_guard));
  commit_thread_ = std::thread([this] { commit_thread_main(); });
}

BatchPipeline::~BatchPipeline() {
  abandon();
  if (commit_thread_.joinable()) {
    {
      std::lock_guard lock(mutex_);
      quit_ = true;
    }
    cv_.notify_all();
    commit_thread_.join();
  }
}

BatchProcessor& BatchPipeline::processor_of(const Lane& lane) noexcept {
  return *processors_[static_cast<std::size_t>(&lane - lanes_)];
}

void BatchPipeline::prepare(Lane& lane, const RetrySchedule& schedule) {
  lane.started = std::chrono::steady_clock::now();
  lane.result = processor_of(lane).prepare(lane.batch, schedule);
}

void BatchPipeline::submit(std::vector<KafkaMessage>& batch, const RetrySchedule& schedule) {
  Lane& lane = lanes_[next_lane_];
  next_lane_ = (next_lane_ + 1) % processors_.size();
  lane.batch.swap(batch);  // the lane's vector is empty (finished), so `batch` is too
  // One writer: this batch's BEGIN would only queue behind the commit in flight.
  if (one_writer_) settle();
  prepare(lane, schedule);

  if (waiting_ != nullptr) {
    Lane& before = finish_waiting();
    // A partition of the batch before pauses for a retry (or that whole batch did not
    // commit): none of its later records may commit ahead of it.
    const auto held_back = std::erase_if(
        lane.batch, [&](const KafkaMessage& m) { return stopped_by(before.result, *m); });
    if (held_back > 0) {
      processor_of(lane).rollback();
      if (!lane.batch.empty()) prepare(lane, schedule);
    }
    before.batch.clear();
    before.result = {};
    if (lane.batch.empty()) {
      lane.result = {};
      return;
    }
  }

  BatchProcessor& processor = processor_of(lane);
  if (processor.open()) processor.before_commit();  // on HookAbort, abandon() clears the lane
  waiting_ = &lane;
  if (!commit_thread_.joinable() || !processor.open()) {
    processor.commit(lane.result);
    lane.committed = std::chrono::steady_clock::now();
    if (!commit_thread_.joinable()) settle();
    return;
  }
  {
    std::lock_guard lock(mutex_);
    committing_ = &lane;
  }
  cv_.notify_all();
}

void BatchPipeline::await_commit() {
  if (!commit_thread_.joinable()) return;  // depth 1: every commit ran inline
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return committing_ == nullptr; });
  commit_done_.store(false);
  if (commit_error_) std::rethrow_exception(std::exchange(commit_error_, nullptr));
}

BatchPipeline::Lane& BatchPipeline::finish_waiting() {
  Lane& lane = *waiting_;
  await_commit();
  waiting_ = nullptr;
  if (lane.result.committed) call_hook(hooks_, HookPoint::AfterDbCommit);
  finish_(lane);
  return lane;
}

void BatchPipeline::settle() {
  if (waiting_ == nullptr) return;
  Lane& lane = finish_waiting();
  lane.batch.clear();
  lane.result = {};
}

void BatchPipeline::abandon() noexcept {
  {
    // The connection stays in use until the commit in flight returns.
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return committing_ == nullptr; });
    commit_error_ = nullptr;
  }
  commit_done_.store(false);
  waiting_ = nullptr;
  for (auto& processor : processors_) processor->rollback();
  for (Lane& lane : lanes_) {
    lane.batch.clear();
    lane.result = {};
  }
}

void BatchPipeline::commit_thread_main() {
  std::unique_lock lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return quit_ || committing_ != nullptr; });
    if (committing_ == nullptr) return;  // quit, nothing left to commit
    Lane& lane = *committing_;
    lock.unlock();
    std::exception_ptr error;
    try {
      processor_of(lane).commit(lane.result);
    } catch (...) {
      error = std::current_exception();  // stopping_error: the run() thread rethrows it
    }
    lane.committed = std::chrono::steady_clock::now();
    lock.lock();
    commit_error_ = error;
    committing_ = nullptr;
    commit_done_.store(true);
    cv_.notify_all();
    if (wake_) wake_();
  }
}

}  // namespace idem::detail
