#pragma once
// Sends the letters of one transaction (dead letters and retry-topic sends) once it
// committed, and says which the broker did not acknowledge: those records are not done,
// and their partitions go back to them, so a bad message is never lost.
#include <vector>

#include "consumer/batch_processor.hpp"
#include "consumer/dead_letter_producer.hpp"
#include "consumer/topic_partition.hpp"
#include "idem/consumer.hpp"
#include "kafka/kafka_handle.hpp"

namespace idem::detail {

class DeadLetterSender {
 public:
  /// Everything must outlive the sender.
  DeadLetterSender(DeadLetterProducer& producer, const ConsumerConfig& config, const LogFn& log)
      : producer_(producer), config_(config), log_(log) {}

  /// Sends `r`'s letters and waits for the broker (ConsumerConfig::dlq_ack_timeout);
  /// counts them in `delta`. Returns the records whose letters were not acknowledged.
  [[nodiscard]] std::vector<PartitionOffset> send(const BatchResult& r, ConsumerStats& delta);

 private:
  DeadLetterProducer& producer_;
  const ConsumerConfig& config_;
  const LogFn& log_;
};

}  // namespace idem::detail
