#pragma once
// Sends records that can never be processed to `<topic><dlq_suffix>` with the original
// key, payload and headers plus idem.* headers that say why. An idempotent producer with
// acks=all; send() returns only what the broker acknowledged, because a dead-lettered
// record's offset may advance only after that (never lose a bad message). The same
// produce-and-await path sends records to their next retry topic (RetryTopics): a
// letter with retry_level > 0.
#include <chrono>
#include <cstdint>
#include <deque>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "idem/consumer.hpp"
#include "idem/kafka/kafka_handle.hpp"
#include "kafka/produce_errors.hpp"

namespace idem::detail {

/// Largest payload a dead letter carries whole. A larger one (or one the producer or the
/// broker refuses as too large) is sent cut to kDeadLetterPayloadPrefix bytes with
/// `idem.payload.truncated`, `idem.original.size` and `idem.original.sha256`: a record
/// that can never be valid must reach the DLQ whatever its size, and the original stays
/// in the source topic at the offset the letter names.
inline constexpr std::size_t kDeadLetterMaxPayload = 512 * 1024;
inline constexpr std::size_t kDeadLetterPayloadPrefix = 4 * 1024;

/// One record to dead-letter.
struct DeadLetter {
  const rd_kafka_message_t* original = nullptr;
  std::string error_class;  ///< e.g. validation.not_uuid_v7, handler.dead_letter
  std::string message;
  std::uint32_t attempts = 1;
  /// > 0: not a dead letter but a retry, to retry topic `retry_level` of the source topic.
  std::uint32_t retry_level = 0;
  std::int64_t not_before_ms = 0;  ///< for a retry: idem.retry.not_before (ms since the epoch)
  std::string_view route{};        ///< what the parser filed the record under (count_as)
};

class RetryTopicMap;

class DeadLetterProducer : private CallbackContext {
 public:
  /// \throws Error(InvalidArgument, Config) for a rejected property.
  /// `retry_topics` must outlive the producer.
  DeadLetterProducer(const ConsumerConfig& config, const RetryTopicMap& retry_topics,
                     const LogFn* log, bool forward_kafka_logs);
  ~DeadLetterProducer();
  DeadLetterProducer(const DeadLetterProducer&) = delete;
  DeadLetterProducer& operator=(const DeadLetterProducer&) = delete;

  /// Produces every letter and waits up to `timeout` for the broker's acknowledgements.
  /// Element i of the result is RD_KAFKA_RESP_ERR_NO_ERROR when letters[i] is durably on
  /// its DLQ topic, else why not (permanent_produce_error() tells whether trying again
  /// can help).
  /// A letter this producer already got acknowledged for the same source record (its
  /// batch is being retried) is not sent again and counts as acknowledged. A letter
  /// refused as too large is sent once more, truncated. Blocks for at most about
  /// 2 × `timeout`.
  [[nodiscard]] std::vector<rd_kafka_resp_err_t> send(std::span<const DeadLetter> letters,
                                                      std::chrono::milliseconds timeout);

 private:
  static void delivery_trampoline(rd_kafka_t* rk, const rd_kafka_message_t* m, void* opaque);
  void build_handle();
  void produce_one(const DeadLetter& letter, std::uint64_t id, bool truncate);
  /// Produces `letters[i]` for each i in `which` and waits for their reports; returns
  /// each one's delivery error (or "timed out" as RD_KAFKA_RESP_ERR__TIMED_OUT).
  std::vector<rd_kafka_resp_err_t> produce_and_wait(std::span<const DeadLetter> letters,
                                                    const std::vector<std::size_t>& which,
                                                    bool truncate,
                                                    std::chrono::milliseconds timeout);

  // Source records (topic, partition, offset, retry level) whose letter the broker
  // acknowledged, oldest first, bounded: a batch that is retried after a later failure
  // must not send its letters again. Forgetting the oldest only risks a duplicate letter,
  // which `idem dlq list/replay` collapse by original coordinates.
  using SourceRecord = std::tuple<std::string, std::int32_t, std::int64_t, std::uint32_t>;
  static constexpr std::size_t kRememberedLetters = 100'000;
  std::set<SourceRecord> acknowledged_;
  std::deque<SourceRecord> acknowledged_order_;
  void remember(SourceRecord record);

  ConsumerConfig config_;
  const RetryTopicMap& retry_topics_;
  const LogFn* log_;
  bool forward_kafka_logs_;
  KafkaHandle rk_;
  // Delivery reports carry a sequence number, not a pointer: a report that arrives after
  // send() gave up (it purges, but a report can still be in flight) finds no slot and is
  // ignored instead of writing into freed memory.
  std::uint64_t next_id_ = 1;
  std::uint64_t base_id_ = 0;
  std::vector<rd_kafka_resp_err_t> results_;
};

}  // namespace idem::detail
