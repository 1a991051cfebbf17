#pragma once
// Sends the letters of one transaction (dead letters and retry-topic sends) once it
// committed, and says which the broker did not acknowledge: those records are not done,
// and their partitions go back to them, so a bad message is never lost.
#include <vector>

#include "consumer/batch/batch_processor.hpp"
#include "consumer/letters/dead_letter_producer.hpp"
#include "consumer/topic_partition.hpp"
#include "idem/consumer.hpp"
#include "idem/kafka/kafka_handle.hpp"

namespace idem::detail {

/// Sends `r`'s letters through `producer` and waits for the broker
/// (ConsumerConfig::dlq_ack_timeout); counts them in `delta`. Returns the records whose
/// letters were not acknowledged.
[[nodiscard]] std::vector<PartitionOffset> send_letters(DeadLetterProducer& producer,
                                                        const ConsumerConfig& config,
                                                        const LogFn& log, const BatchResult& r,
                                                        ConsumerStats& delta);

}  // namespace idem::detail
