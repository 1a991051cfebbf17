#include "consumer/effect_record.hpp"

namespace idem::detail {

EffectRecord::EffectRecord(const rd_kafka_message_t& m, std::string_view group)
    : topic(rd_kafka_topic_name(m.rkt)), has_key(m.key != nullptr), consumer_group(group) {
  if (m.key != nullptr) key.assign(static_cast<const char*>(m.key), m.key_len);
  if (m.payload != nullptr) payload.assign(static_cast<const char*>(m.payload), m.len);
  rd_kafka_headers_t* hdrs = nullptr;  // owned by the message
  // rd_kafka_message_headers needs a non-const message; it only parses lazily.
  if (rd_kafka_message_headers(const_cast<rd_kafka_message_t*>(&m), &hdrs) ==
      RD_KAFKA_RESP_ERR_NO_ERROR) {
    const char* name = nullptr;
    const void* value = nullptr;
    std::size_t size = 0;
    for (std::size_t i = 0;
         rd_kafka_header_get_all(hdrs, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
         ++i) {
      header_values.emplace_back(name, value == nullptr
                                           ? std::string()
                                           : std::string(static_cast<const char*>(value), size));
    }
  }
  headers.reserve(header_values.size());
  for (const auto& [name, value] : header_values) headers.push_back({name, value});
  info.topic = topic;
  info.partition = m.partition;
  info.offset = m.offset;
  info.key = key;
  info.headers = headers;
  info.payload = payload;
  info.consumer_group = consumer_group;
}

}  // namespace idem::detail
