#pragma once
// What the console reads from Kafka: the topics, each group's committed offsets against
// the partitions' end offsets, the group's state, and the event waiting at a group's
// committed offset (its UUIDv7 age is how long the oldest unprocessed event has waited).
// No group is ever joined and nothing is committed: the handles only look.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "idem/dlq.hpp"

namespace idem::console {

struct TopicInfo {
  std::string name;
  int partitions = 0;
};

struct PartitionLag {
  std::string topic;
  std::int32_t partition = 0;
  std::int64_t committed = -1;  ///< -1: the group has committed nothing here
  std::int64_t end = 0;         ///< the high watermark
  std::int64_t lag = 0;         ///< end - committed (end - low without a commit)
  /// Age of the event at the committed offset (UUIDv7 time), when there is lag and it
  /// carries a v7 event id.
  std::optional<std::chrono::milliseconds> oldest_unprocessed_age;
};

struct GroupLag {
  std::string group;
  std::string state;  ///< librdkafka's name (Stable, Empty, ...), or "unknown"
  std::size_t members = 0;
  std::vector<PartitionLag> partitions;  ///< only topics the group has committed on
  std::string error;                     ///< why the numbers are missing, if they are
};

class KafkaView {
 public:
  explicit KafkaView(DlqConnection connection);
  ~KafkaView();
  KafkaView(const KafkaView&) = delete;
  KafkaView& operator=(const KafkaView&) = delete;

  /// Every topic but the broker's internal ones (`__*`), by name. \throws Error(Kafka).
  [[nodiscard]] std::vector<TopicInfo> topics();

  /// `group`'s lag on the topics of `topics` it has committed offsets on. Never throws:
  /// a broker error lands in GroupLag::error.
  [[nodiscard]] GroupLag group_lag(const std::string& group, const std::vector<TopicInfo>& topics);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idem::console
