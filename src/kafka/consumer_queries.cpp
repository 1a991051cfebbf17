#include "kafka/consumer_queries.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "idem/kafka/kafka_handle.hpp"
#include "idem/tracing.hpp"

namespace idem::detail {

std::string record_location(const rd_kafka_message_t& m) {
  std::string out = fmt::format("topic={} partition={} offset={}", rd_kafka_topic_name(m.rkt),
                                m.partition, m.offset);
  rd_kafka_headers_t* headers = nullptr;  // owned by the message
  if (rd_kafka_message_headers(&m, &headers) != RD_KAFKA_RESP_ERR_NO_ERROR) return out;
  const auto last = [&](const char* name) -> std::optional<std::string_view> {
    const void* value = nullptr;
    std::size_t size = 0;
    if (rd_kafka_header_get_last(headers, name, &value, &size) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        value == nullptr) {
      return std::nullopt;
    }
    return std::string_view(static_cast<const char*>(value), size);
  };
  if (const auto event_id = last("event_id")) out += fmt::format(" event_id={}", *event_id);
  if (const auto traceparent = last(kTraceparentHeader.data())) {
    if (const auto trace = parse_traceparent(*traceparent))
      out += " trace_id=" + trace->trace_id_hex();
  }
  return out;
}

std::vector<PartitionLag> assignment_lag(
    rd_kafka_t* rk,
    const std::function<std::optional<std::int64_t>(std::string_view topic,
                                                    std::int32_t partition)>& processed_next) {
  rd_kafka_topic_partition_list_t* assignment = nullptr;
  if (rk == nullptr || rd_kafka_assignment(rk, &assignment) != RD_KAFKA_RESP_ERR_NO_ERROR)
    return {};
  const PartitionList owned(assignment);
  rd_kafka_position(rk, owned.get());  // offset after the last record handed out
  std::vector<std::int64_t> high(static_cast<std::size_t>(owned->cnt), -1);
  for (int i = 0; i < owned->cnt; ++i) {
    const auto& p = owned->elems[i];
    std::int64_t low = -1;
    if (rd_kafka_get_watermark_offsets(rk, p.topic, p.partition, &low,
                                       &high[static_cast<std::size_t>(i)]) !=
        RD_KAFKA_RESP_ERR_NO_ERROR)
      high[static_cast<std::size_t>(i)] = -1;
  }
  std::vector<PartitionLag> out;
  for (int i = 0; i < owned->cnt; ++i) {
    const auto& p = owned->elems[i];
    PartitionLag& l = out.emplace_back(PartitionLag{p.topic, p.partition, -1});
    const std::int64_t next = processed_next(p.topic, p.partition).value_or(p.offset);
    const std::int64_t hw = high[static_cast<std::size_t>(i)];
    if (next >= 0 && hw >= 0) l.lag = std::max<std::int64_t>(0, hw - next);
  }
  return out;
}

}  // namespace idem::detail
