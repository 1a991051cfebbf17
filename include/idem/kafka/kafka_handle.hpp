#pragma once
/// \file
/// RAII for librdkafka's C objects, building a handle from properties, reading a record's
/// headers and producing a copy. The core's consumer, dead-letter producer and relay use
/// them, and so do idem's components that talk to Kafka themselves (the console's topic
/// view, the dev tools): one way to hold a librdkafka object. Namespace detail: building
/// blocks for idem's own parts, with no promise of stability to other users; including
/// this header needs librdkafka's.
#include <librdkafka/rdkafka.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace idem::detail {

struct KafkaHandleDeleter {
  void operator()(rd_kafka_t* rk) const noexcept { rd_kafka_destroy(rk); }
};
struct KafkaConfDeleter {
  void operator()(rd_kafka_conf_t* conf) const noexcept { rd_kafka_conf_destroy(conf); }
};
struct PartitionListDeleter {
  void operator()(rd_kafka_topic_partition_list_t* list) const noexcept {
    rd_kafka_topic_partition_list_destroy(list);
  }
};
struct MessageDeleter {
  void operator()(rd_kafka_message_t* m) const noexcept { rd_kafka_message_destroy(m); }
};
struct QueueDeleter {
  void operator()(rd_kafka_queue_t* q) const noexcept { rd_kafka_queue_destroy(q); }
};

using KafkaHandle = std::unique_ptr<rd_kafka_t, KafkaHandleDeleter>;
using KafkaConf = std::unique_ptr<rd_kafka_conf_t, KafkaConfDeleter>;
using PartitionList = std::unique_ptr<rd_kafka_topic_partition_list_t, PartitionListDeleter>;
using KafkaMessage = std::unique_ptr<rd_kafka_message_t, MessageDeleter>;
using KafkaQueue = std::unique_ptr<rd_kafka_queue_t, QueueDeleter>;

using Property = std::pair<std::string, std::string>;
using LogFn = std::function<void(std::string_view)>;

/// Sets each property on `conf`; throws Error(InvalidArgument, Config) naming the
/// first one librdkafka rejects.
void set_properties(rd_kafka_conf_t* conf, std::span<const Property> properties);

/// Creates a handle, taking ownership of `conf` (also on failure).
/// Throws Error(Internal, Kafka) when librdkafka refuses.
[[nodiscard]] KafkaHandle create_handle(rd_kafka_type_t type, KafkaConf conf);

[[nodiscard]] PartitionList make_partition_list(int capacity);

/// A duration as librdkafka's int milliseconds, clamped to [0, INT_MAX].
[[nodiscard]] int to_kafka_ms(std::chrono::milliseconds d) noexcept;

/// Calls `f(const char* name, std::string_view value)` for each header of `m`, in order
/// (an empty value for a null one). The views point into the message.
template <class F>
void for_each_header(const rd_kafka_message_t& m, F&& f) {
  rd_kafka_headers_t* headers = nullptr;  // owned by the message
  // rd_kafka_message_headers needs a non-const message; it only parses lazily.
  if (rd_kafka_message_headers(const_cast<rd_kafka_message_t*>(&m), &headers) !=
      RD_KAFKA_RESP_ERR_NO_ERROR) {
    return;
  }
  const char* name = nullptr;
  const void* value = nullptr;
  std::size_t size = 0;
  for (std::size_t i = 0;
       rd_kafka_header_get_all(headers, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
       ++i) {
    f(name, value == nullptr ? std::string_view()
                             : std::string_view(static_cast<const char*>(value), size));
  }
}

/// Queues one message, copied (RD_KAFKA_MSG_F_COPY), through rd_kafka_produceva (the
/// RD_KAFKA_V_* macros of producev are C casts). `headers` passes to librdkafka when the
/// message is queued and is destroyed here otherwise; `opaque` comes back in the
/// delivery report. Returns RD_KAFKA_RESP_ERR_NO_ERROR when queued, else the error
/// (RD_KAFKA_RESP_ERR__QUEUE_FULL included: the caller decides whether to wait).
[[nodiscard]] rd_kafka_resp_err_t produce_copy(rd_kafka_t* rk, const char* topic,
                                               std::string_view key, std::string_view payload,
                                               rd_kafka_headers_t* headers, void* opaque) noexcept;

/// What every handle's opaque points to (librdkafka has one opaque per handle, shared
/// by all its callbacks): owners derive from it and pass
/// `static_cast<CallbackContext*>(this)` to rd_kafka_conf_set_opaque.
struct CallbackContext {
  const LogFn* kafka_log = nullptr;  ///< librdkafka's log lines go here when set
};

/// Installs a log callback that forwards librdkafka's log lines to the opaque's
/// CallbackContext::kafka_log (which must be thread-safe: librdkafka logs from its threads).
void forward_logs(rd_kafka_conf_t* conf);

}  // namespace idem::detail
