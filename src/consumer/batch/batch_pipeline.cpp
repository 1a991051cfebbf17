#include "consumer/batch/batch_pipeline.hpp"

#include <algorithm>

#include "consumer/positions/partition_positions.hpp"
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

BatchPipeline::BatchPipeline(const ConsumerContext& context, Store& store, Finish finish,
                             std::function<void()> wake)
    : context_(context),
      hooks_(context.hooks),
      one_writer_(store.backend() == Backend::Sqlite),
      finish_(std::move(finish)),
      wake_(std::move(wake)) {
  processors_.push_back(std::make_unique<BatchProcessor>(context, store));
  if (context.config.pipeline_depth < 2) return;
  second_store_ = store.connect_again();
  processors_.push_back(std::make_unique<BatchProcessor>(context, *second_store_));
  commit_ = std::make_unique<BackgroundCommit>(wake_);
}

BatchPipeline::~BatchPipeline() {
  abandon();
}

const std::atomic<bool>& BatchPipeline::commit_done() const noexcept {
  static const std::atomic<bool> never{false};  // depth 1: every commit runs inline
  return commit_ ? commit_->done() : never;
}

BatchProcessor& BatchPipeline::processor_of(const Lane& lane) noexcept {
  return *processors_[static_cast<std::size_t>(&lane - lanes_)];
}

void BatchPipeline::prepare(Lane& lane, const RetrySchedule& schedule) {
  lane.started = std::chrono::steady_clock::now();
  // With nothing in flight the stored offsets are known now, and go with the handlers'
  // statements; else they are written at the commit.
  lane.result = processor_of(lane).prepare(lane.batch, schedule, waiting_ == nullptr);
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
  // Now that the batch before is finished (its letters acknowledged, its records done),
  // where this one leaves its partitions is known.
  if (context_.positions != nullptr && !lane.result.rows_written)
    lane.result.rows = context_.positions->rows_after(lane.result.partitions);
  waiting_ = &lane;
  const auto commit = [&processor, &lane] {
    processor.commit(lane.result);
    lane.committed = std::chrono::steady_clock::now();
  };
  if (!commit_ || !processor.open()) {
    commit();
    if (!commit_) settle();
    return;
  }
  commit_->start(commit);
}

void BatchPipeline::await_commit() {
  if (commit_) commit_->wait();  // depth 1: every commit ran inline
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
  // The connection stays in use until the commit in flight returns.
  if (commit_) commit_->wait_quietly();
  waiting_ = nullptr;
  for (auto& processor : processors_) processor->rollback();
  for (Lane& lane : lanes_) {
    lane.batch.clear();
    lane.result = {};
  }
}

}  // namespace idem::detail
