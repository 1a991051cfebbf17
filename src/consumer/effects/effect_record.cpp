#include "consumer/effects/effect_record.hpp"
#include "idem/kafka/kafka_handle.hpp"

namespace idem::detail {

EffectRecord::EffectRecord(const rd_kafka_message_t& m, std::string_view group)
    : topic(rd_kafka_topic_name(m.rkt)), has_key(m.key != nullptr), consumer_group(group) {
  if (m.key != nullptr) key.assign(static_cast<const char*>(m.key), m.key_len);
  if (m.payload != nullptr) payload.assign(static_cast<const char*>(m.payload), m.len);
  for_each_header(m, [&](const char* name, std::string_view value) {
    header_values.emplace_back(name, std::string(value));
  });
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
