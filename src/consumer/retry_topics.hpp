#pragma once
// Non-blocking retry topics (ConsumerConfig::retry_topics): their names, which source
// topic and attempt level a retry topic stands for, and the decision what to do with a
// record whose handler asked for a retry (next retry topic, or the DLQ when attempts
// are exhausted). Producing goes through the DeadLetterProducer (produce-and-await).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "consumer/dead_letter_producer.hpp"
#include "idem/consumer.hpp"

namespace idem::detail {

/// Header names of a record on a retry topic.
inline constexpr const char* kAttemptsHeader = "idem.attempts";
inline constexpr const char* kNotBeforeHeader = "idem.retry.not_before";

/// `topic.retry.<group>.<level>`, level 1-based.
[[nodiscard]] std::string retry_topic_name(std::string_view topic, std::string_view group,
                                           std::uint32_t level);

/// The value of the first header `name` of `m`, or nullopt.
[[nodiscard]] std::optional<std::string_view> message_header(const rd_kafka_message_t& m,
                                                             const char* name);

/// The route of a retry topic: the source topic's route under another name. Parsed events
/// live in the source route's slots (slot numbers are unique within a batch), so reset()
/// is left to the source route.
class RetryRoute final : public Route {
 public:
  explicit RetryRoute(Route& source) : source_(source) {}
  void reset(std::size_t /*n*/) override {}
  Validated<Uuid> parse(std::size_t slot, std::string_view payload, const ParseLimits& limits) override {
    return source_.parse(slot, payload, limits);
  }
  Outcome invoke(std::size_t slot, const RecordInfo& record, Transaction& tx) override {
    return source_.invoke(slot, record, tx);
  }

 private:
  Route& source_;
};

class RetryTopicMap {
 public:
  struct Level {
    std::string source;  ///< the topic the record was first read from
    std::uint32_t level = 0;
  };

  /// Empty when retry topics are off. \throws Error(InvalidArgument, Config) when a retry
  /// topic name would be illegal (Kafka allows [a-zA-Z0-9._-], at most 249 characters)
  /// or a delay is not positive.
  explicit RetryTopicMap(const ConsumerConfig& config);

  /// Every retry topic of every configured topic, for the subscription.
  [[nodiscard]] std::vector<std::string> all() const;
  /// The retry topics of `source`, by level.
  [[nodiscard]] std::vector<std::string> of(std::string_view source) const;
  /// Which source topic and level `topic` is, or nullopt for a non-retry topic.
  [[nodiscard]] const Level* find(std::string_view topic) const;

  /// Handler attempts already made before this delivery of `m` (0 on a source topic).
  [[nodiscard]] std::uint32_t previous_attempts(const rd_kafka_message_t& m) const;

  /// `m`'s not-before time (ms since the epoch) when it is on a retry topic.
  [[nodiscard]] std::optional<std::int64_t> not_before_ms(const rd_kafka_message_t& m) const;

  /// What to send for a record whose handler asked for a retry at wall time `now_ms`:
  /// a letter to the next retry topic, or, after the last attempt, a dead letter with
  /// the attempt count.
  [[nodiscard]] DeadLetter retry_letter(const rd_kafka_message_t& m, std::string error_class,
                                        std::string message, std::int64_t now_ms) const;

 private:
  const ConsumerConfig& config_;
  std::map<std::string, Level, std::less<>> levels_;
};

}  // namespace idem::detail
