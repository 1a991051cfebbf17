#include "consumer/letters/dead_letter_sender.hpp"

#include <fmt/format.h>

#include "consumer/letters/retry_topics.hpp"
#include "kafka/consumer_queries.hpp"
#include "kafka/produce_errors.hpp"

namespace idem::detail {

std::vector<PartitionOffset> send_letters(DeadLetterProducer& producer,
                                          const ConsumerConfig& config, const LogFn& log,
                                          const BatchResult& r, ConsumerStats& delta) {
  std::vector<PartitionOffset> refused;
  if (r.dead_letters.empty()) return refused;
  std::vector<rd_kafka_resp_err_t> errors = producer.send(r.dead_letters, config.dlq_ack_timeout);
  // A retry letter refused as too large for its retry topic is refused on every attempt
  // (the whole record must go there, to be processed again): its partition would stop
  // there for good and its call be repeated forever. The record becomes a dead letter
  // instead, cut to a prefix like any dead letter too large, with a reason of its own.
  std::vector<DeadLetter> instead;
  std::vector<std::size_t> instead_of;
  for (std::size_t i = 0; i < errors.size(); ++i) {
    const DeadLetter& letter = r.dead_letters[i];
    if (letter.retry_level == 0 || !too_large_produce_error(errors[i])) continue;
    instead.push_back({letter.original, std::string(kRetryTooLargeClass),
                       fmt::format("its retry letter is too large for the retry topic ({}); it "
                                   "was to be retried because: {}",
                                   rd_kafka_err2str(errors[i]), letter.message),
                       letter.attempts, 0, 0, letter.route});
    instead_of.push_back(i);
  }
  std::vector<const DeadLetter*> sent(r.dead_letters.size());
  for (std::size_t i = 0; i < sent.size(); ++i) sent[i] = &r.dead_letters[i];
  if (!instead.empty()) {
    const auto again = producer.send(instead, config.dlq_ack_timeout);
    for (std::size_t k = 0; k < instead.size(); ++k) {
      errors[instead_of[k]] = again[k];
      sent[instead_of[k]] = &instead[k];
    }
  }
  for (std::size_t i = 0; i < errors.size(); ++i) {
    const DeadLetter& letter = *sent[i];
    const bool acked = errors[i] == RD_KAFKA_RESP_ERR_NO_ERROR;
    if (acked && letter.retry_level > 0) {
      ++delta.retry_topic_sends;
      continue;
    }
    if (acked) {
      ++delta.dead_lettered;
      ++delta.dead_lettered_by_reason[letter.error_class];
      if (!letter.route.empty()) {
        RouteStats& route = delta.route(letter.route);
        ++route.dead_lettered;
        ++route.dead_lettered_by_reason[letter.error_class];
      }
      log(fmt::format("idem consumer: dead-lettered {} class={} attempts={}",
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
