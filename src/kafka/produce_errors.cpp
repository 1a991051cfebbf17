#include "kafka/produce_errors.hpp"

namespace idem::detail {

bool too_large_produce_error(rd_kafka_resp_err_t err) noexcept {
  return err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
         err == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE;
}

bool permanent_produce_error(rd_kafka_resp_err_t err) noexcept {
  if (too_large_produce_error(err)) return true;
  switch (err) {
    case RD_KAFKA_RESP_ERR_INVALID_MSG:
    case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
    case RD_KAFKA_RESP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT: return true;
    default: return false;
  }
}

}  // namespace idem::detail
