#pragma once
// The librdkafka consumer side of idem::Consumer: subscription, collecting batches,
// the rebalance callback (eager and cooperative), pause/seek/resume and offset commits.
// Processing decisions live elsewhere (BatchProcessor, Consumer::Impl).
#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "consumer/intake/fetch_control.hpp"
#include "consumer/topic_partition.hpp"
#include "idem/consumer.hpp"
#include "idem/kafka/kafka_handle.hpp"

namespace idem::detail {

class PollLoop final : private CallbackContext, public FetchControl {
 public:
  /// Called on the poll thread from inside poll_batch() or close_before(), i.e. from the
  /// rebalance callback. Exceptions are caught there and rethrown by the PollLoop call
  /// that was running (never through librdkafka's C frames).
  struct Listener {
    /// `partitions` are being taken away (`lost`: already owned by someone else, so a
    /// commit would be rejected). Called before they are unassigned, so a synchronous
    /// commit of what was processed still works.
    std::function<void(std::span<const TopicPartition> partitions, bool lost)> revoked;
    /// `partitions` were assigned; they resume from the committed offsets.
    std::function<void(std::span<const TopicPartition> partitions)> assigned;
    /// `partitions` are about to be assigned: where each starts (nullopt: at Kafka's
    /// committed offset, else auto.offset.reset). May be empty.
    std::function<std::vector<std::optional<std::int64_t>>(
        std::span<const TopicPartition> partitions)>
        start_offsets;
    /// What each offset commit of a partition carries as its metadata (the string Kafka
    /// keeps beside a committed offset); empty: none. Called on the run() thread.
    std::function<std::string_view(const TopicPartition& partition)> commit_metadata;
  };

  /// Creates the consumer handle. `log` must outlive the PollLoop; librdkafka's own log
  /// lines go there too when `forward_kafka_logs` (else librdkafka prints to stderr).
  /// \throws Error(InvalidArgument, Config) for a rejected property.
  PollLoop(const ConsumerConfig& config, const LogFn* log, bool forward_kafka_logs,
           Listener listener);
  ~PollLoop();
  PollLoop(const PollLoop&) = delete;
  PollLoop& operator=(const PollLoop&) = delete;

  void subscribe(const std::vector<std::string>& topics);

  /// Collects up to `max` records into `out` (cleared first): waits up to `first_wait`
  /// for the first record, then up to `window` for more. Returns early when `stop` is
  /// set (with whatever was collected) or wake() is called. Records of partitions
  /// revoked meanwhile are dropped from `out`.
  /// \throws Error(Internal, Kafka) on a fatal consumer error; rethrows listener errors.
  /// `ready`, when given, also ends the wait as soon as it is set (completions of effect
  /// calls waiting for the run() thread).
  void poll_batch(std::vector<KafkaMessage>& out, std::size_t max,
                  std::chrono::milliseconds first_wait, std::chrono::milliseconds window,
                  const std::atomic<bool>& stop, const std::atomic<bool>* ready = nullptr);

  void pause_and_seek(const PartitionOffset& at) override;
  void seek_and_resume(const PartitionOffset& at) override;

  /// The group's committed offsets of `partitions`, with their metadata, as the
  /// coordinator answers within `timeout`. \throws Error(Timeout or Connection, Kafka)
  /// when it does not answer.
  [[nodiscard]] std::vector<CommittedOffset> committed(std::span<const TopicPartition> partitions,
                                                       std::chrono::milliseconds timeout);
  /// The partitions assigned now.
  [[nodiscard]] std::vector<TopicPartition> assignment() const;

  /// Commits `offsets` (each the next offset to consume). Async returns at once (errors
  /// are logged from the commit callback); sync blocks until the broker answered.
  /// Returns the request's error (always NO_ERROR for async unless it could not be queued).
  rd_kafka_resp_err_t commit(std::span<const PartitionOffset> offsets, bool async);

  /// Commits `offsets` and waits for the broker's answer until `deadline`, serving
  /// nothing else meanwhile. Returns the answer, or RD_KAFKA_RESP_ERR__TIMED_OUT when none
  /// came in time (broker or coordinator unreachable: a plain synchronous commit would
  /// wait for it without bound).
  rd_kafka_resp_err_t commit_before(std::span<const PartitionOffset> offsets,
                                    std::chrono::steady_clock::time_point deadline);

  /// The end of a graceful stop: commits `positions` (with half the time left before
  /// `deadline`, so the group leave always gets the rest), then leaves the group. Returns
  /// what was not done in time, one line each, saying so `within` the stop timeout.
  [[nodiscard]] std::vector<std::string> finish(std::span<const PartitionOffset> positions,
                                                std::chrono::steady_clock::time_point deadline,
                                                std::string_view within);

  /// Leaves the group (revokes through the listener first), giving up at `deadline`.
  /// Returns false when the group was not left in time (or the close failed): the handle
  /// is then abandoned at destruction (librdkafka's destroy would wait for the broker
  /// too; its threads end with the process), and the group reassigns the partitions
  /// after session.timeout.ms, as after a crash. Idempotent once it returned true.
  bool close_before(std::chrono::steady_clock::time_point deadline);

  /// Makes a blocked poll_batch() return promptly. Thread-safe, never blocks.
  void wake() noexcept override;

  /// The consumer handle, for read-only queries (assignment, cached watermarks).
  [[nodiscard]] rd_kafka_t* handle() const noexcept { return rk_.get(); }

 private:
  static void rebalance_trampoline(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                                   rd_kafka_topic_partition_list_t* partitions, void* opaque);
  static void commit_trampoline(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                                rd_kafka_topic_partition_list_t* offsets, void* opaque);
  static void error_trampoline(rd_kafka_t* rk, int err, const char* reason, void* opaque);
  void on_rebalance(rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t* partitions);
  void handle_message_error(const rd_kafka_message_t& m);
  void rethrow_pending();
  /// `offsets` as a partition list for a commit, each with Listener::commit_metadata.
  [[nodiscard]] PartitionList commit_list(std::span<const PartitionOffset> offsets) const;
  void log_line(std::string_view line) const;

  const LogFn* log_;
  Listener listener_;
  KafkaHandle rk_;
  KafkaQueue queue_;  // the consumer queue, kept for wake()
  std::vector<KafkaMessage>* collecting_ = nullptr;
  std::exception_ptr pending_;
  bool closed_ = false;
  bool abandoned_ = false;  // close_before() gave up: the destructor must not wait either
};

}  // namespace idem::detail
