#pragma once
// One classification of produce and delivery errors, shared by every idem producer (the
// outbox relay's idem::Producer and the consumer's dead-letter producer): which errors
// can succeed if the same message is tried again as it is, and which never will. A
// permanent one must never be retried in place forever: it blocks whatever is queued
// behind it.
#include <librdkafka/rdkafka.h>

namespace idem::detail {

/// True when sending the same message again cannot succeed until something outside the
/// producer changes: the message is too large for the producer's or the broker's
/// limits, the broker refuses the record, the topic is not authorized, invalid or does
/// not exist (librdkafka reports an unknown topic only after
/// `topic.metadata.propagation.max.ms`, so a topic being created is not one). Everything
/// else (broker down, timeouts, leader changes, full queues) is transient.
[[nodiscard]] bool permanent_produce_error(rd_kafka_resp_err_t err) noexcept;

/// True for the permanent errors that mean "too large" (the dead-letter producer sends
/// such a letter once more, cut to a prefix).
[[nodiscard]] bool too_large_produce_error(rd_kafka_resp_err_t err) noexcept;

}  // namespace idem::detail
