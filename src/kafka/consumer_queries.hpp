#pragma once
// What the consumer reads off librdkafka for its logs and its lag, kept here so that the
// consumer's processing code stays free of raw rd_kafka_* calls.
#include <librdkafka/rdkafka.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idem/consumer.hpp"

namespace idem::detail {

/// `topic=T partition=P offset=O [event_id=E] [trace_id=X]`: where a dead-lettered or
/// retried record is, so its log line can be matched with the DLQ and with traces.
[[nodiscard]] std::string record_location(const rd_kafka_message_t& m);

/// The lag of each assigned partition: its high watermark (librdkafka's cached one) minus
/// `processed_next(topic, partition)`, or minus the fetch position when that says nothing.
/// librdkafka's assignment, position and cached-watermark calls are thread-safe and local
/// (no broker round trip), so any thread may call this; `processed_next` is called after
/// every librdkafka call, for each partition.
[[nodiscard]] std::vector<PartitionLag> assignment_lag(
    rd_kafka_t* rk,
    const std::function<std::optional<std::int64_t>(std::string_view topic,
                                                    std::int32_t partition)>& processed_next);

}  // namespace idem::detail
