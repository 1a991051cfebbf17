#pragma once
// The consumer's own copy of a record on an effect topic: what the call phase sees
// (topic, key, payload, headers as RecordInfo views) plus the parsed event. Owned through
// a shared_ptr that the call's ticket shares, so the views stay valid however late the
// call completes, independent of the librdkafka message (which must die on the run()
// thread before the consumer handle does).
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/consumer.hpp"
#include "idem/kafka/kafka_handle.hpp"

namespace idem::detail {

struct EffectRecord {
  EffectRecord(const rd_kafka_message_t& m, std::string_view consumer_group);
  EffectRecord(const EffectRecord&) = delete;
  EffectRecord& operator=(const EffectRecord&) = delete;

  std::string topic;
  std::string key;
  bool has_key = false;
  std::string payload;
  std::vector<std::pair<std::string, std::string>> header_values;
  std::vector<RecordHeader> headers;  // views into header_values
  std::string consumer_group;
  RecordInfo info;              // views into the members above
  std::shared_ptr<void> event;  // the parsed event, when valid
};

}  // namespace idem::detail
