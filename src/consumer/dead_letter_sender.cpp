#include "consumer/dead_letter_sender.hpp"

#include <fmt/format.h>

#include "kafka/consumer_queries.hpp"
#include "kafka/produce_errors.hpp"

namespace idem::detail {

std::vector<PartitionOffset> DeadLetterSender::send(const BatchResult& r, ConsumerStats& delta) {
  std::vector<PartitionOffset> refused;
  if (r.dead_letters.empty()) return refused;
  const std::vector<rd_kafka_resp_err_t> errors =
      producer_.send(r.dead_letters, config_.dlq_ack_timeout);
  for (std::size_t i = 0; i < errors.size(); ++i) {
    const DeadLetter& letter = r.dead_letters[i];
    const bool acked = errors[i] == RD_KAFKA_RESP_ERR_NO_ERROR;
    if (acked && letter.retry_level > 0) {
      ++delta.retry_topic_sends;
      continue;
    }
    if (acked) {
      ++delta.dead_lettered;
      ++delta.dead_lettered_by_reason[letter.error_class];
      log_(fmt::format("idem consumer: dead-lettered {} class={} attempts={}",
                       record_location(*letter.original), letter.error_class, letter.attempts));
      continue;
    }
    // Never lose a bad message: the partition goes back to this record and retries. A
    // refusal for good (DLQ topic unknown or not authorized) is retried the same way,
    // after the backoff, and counted, so that it is seen rather than spinning silently:
    // the letter producer logs each one as permanent.
    if (permanent_produce_error(errors[i])) ++delta.dead_letters_refused;
    const rd_kafka_message_t& m = *letter.original;
    refused.push_back({{rd_kafka_topic_name(m.rkt), m.partition}, m.offset});
  }
  return refused;
}

}  // namespace idem::detail
