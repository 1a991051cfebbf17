#include "consumer/intake/admission.hpp"

#include <fmt/format.h>

#include "consumer/positions/partition_positions.hpp"

namespace idem::detail {

namespace {

std::size_t header_count(const rd_kafka_message_t& m) {
  rd_kafka_headers_t* headers = nullptr;  // owned by the message
  if (rd_kafka_message_headers(&m, &headers) != RD_KAFKA_RESP_ERR_NO_ERROR) return 0;
  return rd_kafka_header_cnt(headers);
}

}  // namespace

bool letter_acknowledged(const ConsumerContext& context, const TopicPartition& tp,
                         std::int64_t offset) {
  return context.positions != nullptr &&
         context.positions->progress().letter_acknowledged(tp, offset);
}

std::optional<Admission> refusal_before_parse(const ConsumerContext& context,
                                              const TopicPartition& tp, const rd_kafka_message_t& m,
                                              bool routed) {
  Admission refused;
  if (letter_acknowledged(context, tp, m.offset)) {
    refused.skip = true;
    return refused;
  }
  if (!routed) {
    refused.error_class = "route.no_route";
    refused.error_message = fmt::format("no handler is registered for topic '{}'", tp.topic);
    return refused;
  }
  const std::size_t limit = context.config.limits.max_headers;
  if (const std::size_t headers = header_count(m); headers > limit) {
    refused.error_class = fmt::format("validation.{}", to_string(ValidationReason::TooManyHeaders));
    refused.error_message =
        fmt::format("record has {} headers, more than the limit of {}", headers, limit);
    return refused;
  }
  // A retry-topic record with headers idem never writes.
  if (auto problem = context.retry_topics.header_problem(m)) {
    refused.error_class = kBadRetryHeaderClass;
    refused.error_message = std::move(*problem);
    return refused;
  }
  return std::nullopt;
}

void take_parse(Admission& admission, const Validated<Uuid>& parsed) {
  admission.valid = parsed.ok();
  if (admission.valid) {
    admission.event_id = parsed.value();
    return;
  }
  admission.error_class = fmt::format("validation.{}", to_string(parsed.error().reason));
  admission.error_message = parsed.error().message;
}

void judge_horizon(Admission& admission, HorizonVerdict verdict, std::string reason) {
  switch (verdict) {
    case HorizonVerdict::Fresh: return;
    case HorizonVerdict::Quarantine:
      admission.valid = false;
      admission.error_class = kStaleErrorClass;
      admission.error_message = std::move(reason);
      return;
    case HorizonVerdict::Skip:
      admission.valid = false;
      admission.skip = true;
      return;
  }
}

}  // namespace idem::detail
