#include "consumer/retry_topics.hpp"

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

}  // namespace

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
  return value == nullptr ? std::string_view() : std::string_view(static_cast<const char*>(value), size);
}

RetryTopicMap::RetryTopicMap(const ConsumerConfig& config) : config_(config) {
  for (const auto& delay : config.retry_topics.delays) {
    if (delay.count() <= 0)
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                  "consumer: retry_topics.delays must all be positive");
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
  const Level* level = find(rd_kafka_topic_name(m.rkt));
  if (level == nullptr) return 0;
  // The header is ours; if it is unreadable, the topic's level says as much.
  const auto header = message_header(m, kAttemptsHeader);
  const auto parsed = header ? parse_int(*header) : std::nullopt;
  return parsed && *parsed > 0 ? static_cast<std::uint32_t>(*parsed) : level->level;
}

std::optional<std::int64_t> RetryTopicMap::not_before_ms(const rd_kafka_message_t& m) const {
  if (find(rd_kafka_topic_name(m.rkt)) == nullptr) return std::nullopt;
  const auto header = message_header(m, kNotBeforeHeader);
  return header ? parse_int(*header) : std::nullopt;
}

DeadLetter RetryTopicMap::retry_letter(const rd_kafka_message_t& m, std::string error_class,
                                       std::string message, std::int64_t now_ms) const {
  DeadLetter letter{&m, std::move(error_class), std::move(message), previous_attempts(m) + 1};
  if (letter.attempts < config_.retry_topics.max_attempts()) {
    letter.retry_level = letter.attempts;
    letter.not_before_ms = now_ms + config_.retry_topics.delays[letter.attempts - 1].count();
  }
  return letter;
}

}  // namespace idem::detail
