#pragma once
// ConsumerConfig::pipeline_depth. With depth 1 a batch is prepared (validated, marked,
// handlers run: BatchProcessor::prepare), committed and finished (dead letters, offsets:
// the consumer's `finish` step) before the next one is polled. With depth 2 its COMMIT,
// which mostly waits for the database's WAL flush, runs on a background thread while
// the run() thread polls the next batch and prepares it on a second connection; the
// next batch commits only after this one committed and was finished, so:
//   - offsets are committed strictly in order, each after its own batch committed;
//   - a duplicate whose two copies straddle the two batches resolves as a duplicate: on
//     PostgreSQL the second mark waits on the first one's primary-key lock until that
//     commits (or rolls back, and then the second copy is the first);
//   - when a batch does not commit, or stops a partition for a retry, the next batch is
//     rolled back and prepared again without that partition's records, so nothing of a
//     partition commits ahead of its retry.
// SQLite has one writer at a time: there the next batch's transaction starts once this
// one's commit returned (the overlap is the poll, not the handlers).
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "consumer/batch/background_commit.hpp"
#include "consumer/batch/batch_processor.hpp"

namespace idem::detail {

class BatchPipeline {
 public:
  /// One batch on its way: its records (kept alive until finished: the result's dead
  /// letters point into them) and what became of it.
  struct Lane {
    std::vector<KafkaMessage> batch;
    BatchResult result;
    std::chrono::steady_clock::time_point started;    ///< prepare() began
    std::chrono::steady_clock::time_point committed;  ///< commit() returned
  };
  /// Called on the run() thread for each batch, in order, once its commit is decided:
  /// sends its dead letters and advances its offsets. It may add retry_at to partitions
  /// of `lane.result` (a dead letter the broker refused); the next batch then holds
  /// back those partitions too.
  using Finish = std::function<void(Lane& lane)>;

  /// Everything must outlive the pipeline. `store` is the first connection; depth 2
  /// opens a second one (Store::connect_again). `wake` is called from the commit
  /// thread when a commit completes (it wakes the poll, which then finishes the batch).
  /// \throws Error from connect_again().
  BatchPipeline(const ConsumerContext& context, Store& store, Finish finish,
                std::function<void()> wake);
  ~BatchPipeline();
  BatchPipeline(const BatchPipeline&) = delete;
  BatchPipeline& operator=(const BatchPipeline&) = delete;

  /// Takes `batch` (leaves it empty), prepares it, finishes the batch before it, and
  /// commits it: with depth 1 it is finished before this returns; with depth 2 the
  /// commit runs in the background and the batch is finished by the next submit() or
  /// settle(). \throws HookAbort (nothing stays open), stopping_error.
  void submit(std::vector<KafkaMessage>& batch, const RetrySchedule& schedule);

  /// Waits for the batch in flight, if any, and finishes it. Call before anything else
  /// uses the first connection, before offsets of revoked partitions are committed, and
  /// before stopping. \throws like submit().
  void settle();

  /// Drops the batch in flight without finishing it (its commit is awaited, its offsets
  /// are not committed: it is redelivered and deduplicated). For leaving run() on an
  /// error.
  void abandon() noexcept;

  [[nodiscard]] bool in_flight() const noexcept { return waiting_ != nullptr; }
  /// Set once the commit in flight has returned; the poll then stops waiting.
  [[nodiscard]] const std::atomic<bool>& commit_done() const noexcept;

  /// The processor on the first connection, for the effect path; only while nothing is
  /// in flight (settle() first).
  [[nodiscard]] BatchProcessor& first_processor() noexcept { return *processors_[0]; }

 private:
  void prepare(Lane& lane, const RetrySchedule& schedule);
  /// Waits for the commit of the batch in flight to return. \throws what it threw.
  void await_commit();
  /// Waits for the batch in flight and finishes it (AfterDbCommit, then `finish_`);
  /// returns its lane, still holding its records and result.
  Lane& finish_waiting();
  [[nodiscard]] BatchProcessor& processor_of(const Lane& lane) noexcept;

  const ConsumerContext& context_;
  const ConsumerHooks& hooks_;
  const bool one_writer_;  // SQLite: prepare only after the commit before returned
  Finish finish_;
  std::function<void()> wake_;
  std::unique_ptr<Store> second_store_;
  std::vector<std::unique_ptr<BatchProcessor>> processors_;  // one per lane
  Lane lanes_[2];
  std::size_t next_lane_ = 0;
  Lane* waiting_ = nullptr;                   // committed or committing, not yet finished
  std::unique_ptr<BackgroundCommit> commit_;  // depth 2 only; last: it uses the lanes
};

}  // namespace idem::detail
