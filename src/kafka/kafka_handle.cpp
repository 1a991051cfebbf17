#include "idem/kafka/kafka_handle.hpp"

#include <algorithm>
#include <array>
#include <climits>

#include <fmt/format.h>

#include "idem/config.hpp"
#include "idem/error.hpp"

namespace idem::detail {

void set_properties(rd_kafka_conf_t* conf, std::span<const Property> properties) {
  char errstr[512];
  for (const auto& [key, value] : properties) {
    if (rd_kafka_conf_set(conf, key.c_str(), value.c_str(), errstr, sizeof errstr) !=
        RD_KAFKA_CONF_OK) {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                  is_secret_key(key)  // never echo a secret (nor librdkafka's quote of it)
                      ? fmt::format("kafka property {}: rejected by librdkafka", key)
                      : fmt::format("kafka property {}={}: {}", key, value, errstr));
    }
  }
}

KafkaHandle create_handle(rd_kafka_type_t type, KafkaConf conf) {
  char errstr[512];
  // rd_kafka_new takes ownership of conf only on success.
  rd_kafka_t* rk = rd_kafka_new(type, conf.get(), errstr, sizeof errstr);
  if (rk == nullptr) {
    throw Error(ErrorCode::Internal, ErrorSource::Kafka,
                fmt::format("cannot create librdkafka {}: {}",
                            type == RD_KAFKA_CONSUMER ? "consumer" : "producer", errstr));
  }
  static_cast<void>(conf.release());
  return KafkaHandle(rk);
}

PartitionList make_partition_list(int capacity) {
  return PartitionList(rd_kafka_topic_partition_list_new(std::max(capacity, 1)));
}

int to_kafka_ms(std::chrono::milliseconds d) noexcept {
  return static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(d.count(), 0, INT_MAX));
}

rd_kafka_resp_err_t produce_copy(rd_kafka_t* rk, const char* topic, std::string_view key,
                                 std::string_view payload, rd_kafka_headers_t* headers,
                                 void* opaque) noexcept {
  std::array<rd_kafka_vu_t, 6> vus{};
  vus[0].vtype = RD_KAFKA_VTYPE_TOPIC;
  vus[0].u.cstr = topic;
  vus[1].vtype = RD_KAFKA_VTYPE_KEY;
  vus[1].u.mem = {const_cast<char*>(key.data()), key.size()};
  vus[2].vtype = RD_KAFKA_VTYPE_VALUE;
  vus[2].u.mem = {const_cast<char*>(payload.data()), payload.size()};
  vus[3].vtype = RD_KAFKA_VTYPE_MSGFLAGS;
  vus[3].u.i = RD_KAFKA_MSG_F_COPY;
  vus[4].vtype = RD_KAFKA_VTYPE_HEADERS;
  vus[4].u.headers = headers;
  vus[5].vtype = RD_KAFKA_VTYPE_OPAQUE;
  vus[5].u.ptr = opaque;
  rd_kafka_error_t* e = rd_kafka_produceva(rk, vus.data(), vus.size());
  if (e == nullptr) return RD_KAFKA_RESP_ERR_NO_ERROR;
  const rd_kafka_resp_err_t err = rd_kafka_error_code(e);
  rd_kafka_error_destroy(e);
  rd_kafka_headers_destroy(headers);  // ownership passes only on success
  return err;
}

namespace {
void log_trampoline(const rd_kafka_t* rk, int level, const char* facility, const char* text) {
  // No exception may cross into librdkafka.
  try {
    const auto* ctx = static_cast<const CallbackContext*>(rd_kafka_opaque(rk));
    if (ctx == nullptr || ctx->kafka_log == nullptr || !*ctx->kafka_log) return;
    (*ctx->kafka_log)(
        fmt::format("librdkafka {} [{}] {}: {}", rd_kafka_name(rk), level, facility, text));
  } catch (...) {
  }
}
}  // namespace

void forward_logs(rd_kafka_conf_t* conf) {
  rd_kafka_conf_set_log_cb(conf, &log_trampoline);
}

}  // namespace idem::detail
