#pragma once
// What every part of idem::Consumer's processing uses and none of them owns: the
// configuration, the hooks and the log line sink, the topic handlers, the retry
// topics, the dedup horizon guard, the steady clock, and the owner of the partitions'
// positions (which the parts ask, never decide for). Consumer::Impl owns them and hands
// this out by reference; each must outlive whoever holds it.
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "consumer/horizon/dedup_horizon_guard.hpp"
#include "consumer/letters/retry_topics.hpp"
#include "consumer/steady_clock.hpp"
#include "idem/consumer.hpp"
#include "idem/kafka/kafka_handle.hpp"

namespace idem::detail {

class PartitionPositions;

using TopicHandlerTable = std::map<std::string, std::unique_ptr<TopicHandler>, std::less<>>;
using EffectTopicHandlerTable =
    std::map<std::string, std::unique_ptr<EffectTopicHandler>, std::less<>>;

/// Each topic's handler: a handler's (its records take the batch path) or an effect
/// handler's (the effect path); a topic has at most one of either.
struct TopicHandlers {
  TopicHandlerTable batch;
  EffectTopicHandlerTable effects;

  [[nodiscard]] bool contains(std::string_view topic) const {
    return batch.contains(topic) || effects.contains(topic);
  }
};

struct ConsumerContext {
  const ConsumerConfig& config;
  const ConsumerHooks& hooks;
  const LogFn& log;
  /// A batch handler holds the parsed events of the batch being prepared: two processors
  /// may share the table only when one's prepare never overlaps the other's
  /// (BatchPipeline).
  TopicHandlers& handlers;
  const RetryTopicMap& retry_topics;
  DedupHorizonGuard& horizon_guard;
  /// The clock of retry times, backoffs and deferrals (SteadyClock::real() but in tests).
  const SteadyClock& steady_clock;
  /// Where the partitions stand (PartitionPositions): the letters acknowledged above the
  /// committed positions (a record whose letter the broker acknowledged, by this process
  /// or before a restart, is skipped, not sent again), the rows each transaction writes,
  /// and whether its connection may commit. Null: none of that (a processor on its own).
  PartitionPositions* positions = nullptr;
};

}  // namespace idem::detail
