#include "consumer/letters/retry_topics.hpp"

#include <charconv>
#include <cstring>

#include <fmt/format.h>

#include "idem/error.hpp"

namespace idem::detail {

namespace {

bool legal_topic_name(std::string_view name) {
  if (name.empty() || name.size() > 249) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::optional<std::int64_t> parse_int(std::string_view text) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// A header value for a message (DLQ header, log line): anyone's bytes, so cut short and
// shown as printable ASCII only; it cannot forge message structure or break a line.
std::string shown(std::string_view value) {
  constexpr std::size_t kMax = 32;
  std::string out = "'";
  for (const char c : value.substr(0, kMax)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f || c == '\\' || c == '\'') {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('\'');
  if (value.size() > kMax) out += "...";
  return out;
}

std::int64_t saturating_add(std::int64_t a, std::int64_t b) noexcept {
  std::int64_t sum = 0;
  if (!__builtin_add_overflow(a, b, &sum)) return sum;
  return b > 0 ? INT64_MAX : INT64_MIN;
}

RetryHeaderCheck bad(std::string problem) {
  return {std::nullopt, std::move(problem)};
}

}  // namespace

RetryHeaderCheck check_retry_headers(std::optional<std::string_view> attempts,
                                     std::optional<std::string_view> not_before,
                                     std::uint32_t level, std::uint32_t retry_levels,
                                     std::chrono::milliseconds delay, std::int64_t now_ms) {
  RetryHeaders headers;
  if (!attempts)
    return bad(fmt::format("{} is missing (idem writes it on every retry)", kAttemptsHeader));
  const auto count = parse_int(*attempts);
  if (!count)
    return bad(
        fmt::format("{} {} is not a decimal attempt count", kAttemptsHeader, shown(*attempts)));
  // Attempts before a retry-topic delivery: 1 to max attempts - 1 (after the last one
  // the record goes to the DLQ, never to a retry topic), and exactly the topic's level.
  if (*count < 1 || *count > static_cast<std::int64_t>(retry_levels))
    return bad(fmt::format("{} {} is out of range: retry topics hold attempts 1 to {}",
                           kAttemptsHeader, *count, retry_levels));
  if (*count != static_cast<std::int64_t>(level))
    return bad(fmt::format("{} {} does not match this retry topic's level {}", kAttemptsHeader,
                           *count, level));
  headers.attempts = static_cast<std::uint32_t>(*count);

  if (!not_before)
    return bad(fmt::format("{} is missing (idem writes it on every retry)", kNotBeforeHeader));
  const auto due = parse_int(*not_before);
  if (!due)
    return bad(fmt::format("{} {} is not a time in ms since the epoch", kNotBeforeHeader,
                           shown(*not_before)));
  // Any time in the past is due now. Later than now + delay the writer cannot have
  // meant: waiting for it would pause the retry partition for that long.
  const std::int64_t latest =
      saturating_add(saturating_add(now_ms, delay.count()), kRetryClockSkewAllowance.count());
  if (*due > latest)
    return bad(fmt::format(
        "{} {} is later than now ({}) + this retry topic's delay ({} ms) + the "
        "clock-skew allowance ({} ms)",
        kNotBeforeHeader, *due, now_ms, delay.count(), kRetryClockSkewAllowance.count()));
  headers.not_before_ms = *due;
  return {headers, {}};
}

std::string retry_topic_name(std::string_view topic, std::string_view group, std::uint32_t level) {
  return fmt::format("{}.retry.{}.{}", topic, group, level);
}

std::optional<std::string_view> message_header(const rd_kafka_message_t& m, const char* name) {
  rd_kafka_headers_t* headers = nullptr;
  // rd_kafka_message_headers needs a non-const message; it only parses lazily.
  if (rd_kafka_message_headers(const_cast<rd_kafka_message_t*>(&m), &headers) !=
      RD_KAFKA_RESP_ERR_NO_ERROR)
    return std::nullopt;
  const void* value = nullptr;
  std::size_t size = 0;
  if (rd_kafka_header_get_last(headers, name, &value, &size) != RD_KAFKA_RESP_ERR_NO_ERROR)
    return std::nullopt;
  return value == nullptr ? std::string_view()
                          : std::string_view(static_cast<const char*>(value), size);
}

RetryTopicMap::RetryTopicMap(const ConsumerConfig& config) : config_(config) {
  for (const auto& delay : config.retry_topics.delays) {
    if (delay.count() <= 0)
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                  "consumer: retry_topics.delays must all be positive");
    if (delay > kMaxRetryTopicDelay)
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                  fmt::format("consumer: retry_topics.delays must be at most {} ms (365 days)",
                              kMaxRetryTopicDelay.count()));
  }
  for (const auto& topic : config.topics) {
    for (std::uint32_t level = 1; level <= config.retry_topics.delays.size(); ++level) {
      std::string name = retry_topic_name(topic, config.group_id, level);
      if (!legal_topic_name(name))
        throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                    fmt::format("consumer: retry topic name '{}' is not a legal Kafka topic name "
                                "(allowed: a-z A-Z 0-9 . _ -, at most 249 characters); "
                                "check topic and group_id",
                                name));
      levels_.emplace(std::move(name), Level{topic, level});
    }
  }
}

std::vector<std::string> RetryTopicMap::all() const {
  std::vector<std::string> out;
  out.reserve(levels_.size());
  for (const auto& [name, level] : levels_) out.push_back(name);
  return out;
}

std::vector<std::string> RetryTopicMap::of(std::string_view source) const {
  std::vector<std::string> out;
  for (std::uint32_t level = 1; level <= config_.retry_topics.delays.size(); ++level)
    out.push_back(retry_topic_name(source, config_.group_id, level));
  return out;
}

const RetryTopicMap::Level* RetryTopicMap::find(std::string_view topic) const {
  const auto it = levels_.find(topic);
  return it == levels_.end() ? nullptr : &it->second;
}

std::uint32_t RetryTopicMap::previous_attempts(const rd_kafka_message_t& m) const {
  // The topic's level, not the header: a record with any other idem.attempts never
  // reaches a handler (header_problem), and the level indexes delays safely.
  const Level* level = find(rd_kafka_topic_name(m.rkt));
  return level == nullptr ? 0 : level->level;
}

RetryHeaderCheck RetryTopicMap::check(const rd_kafka_message_t& m, const Level& level) const {
  const auto now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(config_.clock->now().time_since_epoch())
          .count();
  const auto& delays = config_.retry_topics.delays;
  return check_retry_headers(
      message_header(m, kAttemptsHeader), message_header(m, kNotBeforeHeader), level.level,
      static_cast<std::uint32_t>(delays.size()), delays[level.level - 1], now_ms);
}

std::optional<std::string> RetryTopicMap::header_problem(const rd_kafka_message_t& m) const {
  const Level* level = find(rd_kafka_topic_name(m.rkt));
  if (level == nullptr) return std::nullopt;
  RetryHeaderCheck checked = check(m, *level);
  if (checked.headers) return std::nullopt;
  return std::move(checked.problem);
}

std::optional<std::int64_t> RetryTopicMap::not_before_ms(const rd_kafka_message_t& m) const {
  const Level* level = find(rd_kafka_topic_name(m.rkt));
  if (level == nullptr) return std::nullopt;
  const RetryHeaderCheck checked = check(m, *level);
  return checked.headers ? std::optional(checked.headers->not_before_ms) : std::nullopt;
}

DeadLetter RetryTopicMap::retry_letter(const rd_kafka_message_t& m, std::string error_class,
                                       std::string message, std::int64_t now_ms) const {
  DeadLetter letter{.original = &m,
                    .error_class = std::move(error_class),
                    .message = std::move(message),
                    .attempts = previous_attempts(m) + 1};
  if (letter.attempts < config_.retry_topics.max_attempts()) {
    letter.retry_level = letter.attempts;
    letter.not_before_ms = now_ms + config_.retry_topics.delays[letter.attempts - 1].count();
  }
  return letter;
}

}  // namespace idem::detail
