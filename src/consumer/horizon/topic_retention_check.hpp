#pragma once
// The start-up check of the dedup horizon: reads each subscribed topic's retention.ms
// from the broker (DescribeConfigs) and logs a warning when the topic keeps records
// longer than the dedup rows are kept, because replaying such a topic from its start
// (auto.offset.reset=earliest, a new group, an offset reset) meets events whose dedup
// rows are gone. It runs on a thread of its own, so a broker that is slow to answer,
// or does not implement DescribeConfigs, never delays consuming.
#include <atomic>
#include <thread>

#include "idem/consumer.hpp"
#include "idem/kafka/kafka_handle.hpp"

namespace idem::detail {

class TopicRetentionCheck {
 public:
  /// Starts the check; `config` and `log` must outlive the object.
  TopicRetentionCheck(const ConsumerConfig& config, const LogFn& log);
  /// Abandons a check still waiting for the broker and joins its thread (at most ~200 ms).
  ~TopicRetentionCheck();
  TopicRetentionCheck(const TopicRetentionCheck&) = delete;
  TopicRetentionCheck& operator=(const TopicRetentionCheck&) = delete;

 private:
  void run() noexcept;

  const ConsumerConfig& config_;
  const LogFn& log_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace idem::detail
