#pragma once
// Non-blocking retry topics (ConsumerConfig::retry_topics): their names, which source
// topic and attempt level a retry topic stands for, and the decision what to do with a
// record whose handler asked for a retry (next retry topic, or the DLQ when attempts
// are exhausted). Producing goes through the DeadLetterProducer (produce-and-await).
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "consumer/letters/dead_letter_producer.hpp"
#include "idem/consumer.hpp"

namespace idem::detail {

/// Header names of a record on a retry topic.
inline constexpr const char* kAttemptsHeader = "idem.attempts";
inline constexpr const char* kNotBeforeHeader = "idem.retry.not_before";

/// Error class of a retry-topic record whose idem.* headers idem would never have
/// written: it goes to the DLQ (its message names the header) instead of crashing the
/// consumer or pausing its retry partition for as long as the header says.
inline constexpr std::string_view kBadRetryHeaderClass = "retry.bad_header";
/// The error class of a record whose retry letter its retry topic refused as too large: it
/// could never be sent there, so it is dead-lettered (cut to a prefix) instead.
inline constexpr std::string_view kRetryTooLargeClass = "retry.too_large";

/// How far a retry's not-before may lie beyond now + its topic's delay: the consumer
/// that wrote it may run on a host whose clock is ahead of ours. Generous on purpose:
/// too small sends good retries to the DLQ, too large only lengthens the longest pause
/// a forged header can cause by this much.
inline constexpr std::chrono::milliseconds kRetryClockSkewAllowance = std::chrono::minutes(5);

/// The longest retry-topic delay accepted. Delays are added to wall-clock and steady-clock
/// times (the steady clock overflows ~292 years out), and a year is beyond the retention
/// of any retry topic: a record waiting that long would be gone before it is due.
inline constexpr std::chrono::milliseconds kMaxRetryTopicDelay = std::chrono::hours(24 * 365);

/// The idem.* headers of a record on a retry topic, checked (check_retry_headers).
struct RetryHeaders {
  std::uint32_t attempts = 0;      ///< handler attempts before this delivery: the topic's level
  std::int64_t not_before_ms = 0;  ///< ms since the epoch; at most now + delay + skew allowance
};

/// The headers, or what is wrong with them: a message that names the header.
struct RetryHeaderCheck {
  std::optional<RetryHeaders> headers;
  std::string problem;  ///< empty when `headers` is set
};

/// Checks the values of idem.attempts and idem.retry.not_before (nullopt: absent) of a
/// record on retry topic `level` (1-based, of `retry_levels` levels) whose delay is
/// `delay`, at wall time `now_ms` (ms since the epoch). idem writes attempts = the level
/// (so 1 to retry_levels = max attempts - 1) and not_before = failure time + delay, so:
/// attempts must be a decimal equal to `level`, and not_before a decimal no later than
/// now + delay + kRetryClockSkewAllowance (any earlier time is fine: the retry is due).
/// Pure, never throws except std::bad_alloc: the header bytes are anyone's (fuzzed in
/// fuzz/retry_headers_fuzz.cpp).
[[nodiscard]] RetryHeaderCheck check_retry_headers(std::optional<std::string_view> attempts,
                                                   std::optional<std::string_view> not_before,
                                                   std::uint32_t level, std::uint32_t retry_levels,
                                                   std::chrono::milliseconds delay,
                                                   std::int64_t now_ms);

/// `topic.retry.<group>.<level>`, level 1-based.
[[nodiscard]] std::string retry_topic_name(std::string_view topic, std::string_view group,
                                           std::uint32_t level);

/// The value of the first header `name` of `m`, or nullopt.
[[nodiscard]] std::optional<std::string_view> message_header(const rd_kafka_message_t& m,
                                                             const char* name);

/// The handler of a retry topic: the source topic's handler under another name. Parsed
/// events live in the source handler's slots (slot numbers are unique within a batch), so
/// reset() is left to the source handler.
class RetryTopicHandler final : public TopicHandler {
 public:
  explicit RetryTopicHandler(TopicHandler& source) : source_(source) {}
  void reset(std::size_t /*n*/) override {}
  Validated<Uuid> parse(std::size_t slot, const RecordInfo& record,
                        const ParseLimits& limits) override {
    return source_.parse(slot, record, limits);
  }
  Outcome invoke(std::size_t slot, const RecordInfo& record, Transaction& tx) override {
    return source_.invoke(slot, record, tx);
  }
  [[nodiscard]] const HandlerScope* scope() const noexcept override { return source_.scope(); }

 private:
  TopicHandler& source_;
};

/// The handler of a retry topic whose source topic has an effect handler: records there
/// take the effect path too (call phase concurrent, outside the transaction), through
/// the source topic's handler.
class RetryEffectTopicHandler final : public EffectTopicHandler {
 public:
  explicit RetryEffectTopicHandler(EffectTopicHandler& source) : source_(source) {}
  Owned parse_owned(const RecordInfo& record, const ParseLimits& limits) override {
    return source_.parse_owned(record, limits);
  }
  std::optional<std::string> ordering_key(const void* event, const RecordInfo& record) override {
    return source_.ordering_key(event, record);
  }
  void start_call(const void* event, const RecordInfo& record,
                  std::shared_ptr<CallTicket> ticket) override {
    source_.start_call(event, record, std::move(ticket));
  }
  Outcome apply(const void* event, const void* result, const RecordInfo& record,
                Transaction& tx) override {
    return source_.apply(event, result, record, tx);
  }
  [[nodiscard]] const HandlerScope* scope() const noexcept override { return source_.scope(); }

 private:
  EffectTopicHandler& source_;
};

class RetryTopicMap {
 public:
  struct Level {
    std::string source;  ///< the topic the record was first read from
    std::uint32_t level = 0;
  };

  /// Empty when retry topics are off. \throws Error(InvalidArgument, Config) when a retry
  /// topic name would be illegal (Kafka allows [a-zA-Z0-9._-], at most 249 characters)
  /// or a delay is not positive or above kMaxRetryTopicDelay.
  explicit RetryTopicMap(const ConsumerConfig& config);

  /// Every retry topic of every configured topic, for the subscription.
  [[nodiscard]] std::vector<std::string> all() const;
  /// The retry topics of `source`, by level.
  [[nodiscard]] std::vector<std::string> of(std::string_view source) const;
  /// Which source topic and level `topic` is, or nullopt for a non-retry topic.
  [[nodiscard]] const Level* find(std::string_view topic) const;

  /// Handler attempts already made before this delivery of `m` (0 on a source topic):
  /// the retry topic's level, which is what its idem.attempts must say (header_problem).
  [[nodiscard]] std::uint32_t previous_attempts(const rd_kafka_message_t& m) const;

  /// What is wrong with the idem.* headers of `m` on a retry topic at the consumer's
  /// clock (check_retry_headers), or nullopt when they are right or `m` is on a source
  /// topic. Such a record is dead-lettered with kBadRetryHeaderClass, never handled.
  [[nodiscard]] std::optional<std::string> header_problem(const rd_kafka_message_t& m) const;

  /// `m`'s not-before time (ms since the epoch) when it is on a retry topic and its
  /// headers are right at the consumer's clock. nullopt otherwise: a record with bad
  /// headers is not waited for, it goes on to be dead-lettered (header_problem).
  [[nodiscard]] std::optional<std::int64_t> not_before_ms(const rd_kafka_message_t& m) const;

  /// What to send for a record whose handler asked for a retry at wall time `now_ms`:
  /// a letter to the next retry topic, or, after the last attempt, a dead letter with
  /// the attempt count.
  [[nodiscard]] DeadLetter retry_letter(const rd_kafka_message_t& m, std::string error_class,
                                        std::string message, std::int64_t now_ms) const;

 private:
  [[nodiscard]] RetryHeaderCheck check(const rd_kafka_message_t& m, const Level& level) const;

  const ConsumerConfig& config_;
  std::map<std::string, Level, std::less<>> levels_;
};

}  // namespace idem::detail
