#pragma once
// Plain librdkafka clients for tests: a producer that waits for acknowledgements, a
// reader that fetches a whole topic without a group, and a committed-offsets probe.
// Every call takes a deadline.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace idem::test {

using Headers = std::vector<std::pair<std::string, std::string>>;

/// A record to produce. partition -1 lets the key decide.
struct TestRecord {
  std::string topic;
  std::string key;
  std::string payload;
  Headers headers;
  std::int32_t partition = -1;
};

/// A record read back.
struct ReadRecord {
  std::string topic;
  std::int32_t partition = 0;
  std::int64_t offset = 0;
  std::string key;
  std::string payload;
  Headers headers;

  /// The first header named `name`, or nullopt.
  [[nodiscard]] std::optional<std::string> header(std::string_view name) const;
};

/// An idempotent producer (acks=all). Not thread-safe.
class KafkaTestProducer {
 public:
  explicit KafkaTestProducer(const std::string& bootstrap_servers);
  ~KafkaTestProducer();
  KafkaTestProducer(const KafkaTestProducer&) = delete;
  KafkaTestProducer& operator=(const KafkaTestProducer&) = delete;

  /// Queues one record. Throws std::runtime_error if librdkafka refuses it.
  void send(const TestRecord& record);
  /// Waits until every queued record is acknowledged. Throws std::runtime_error on
  /// timeout or when any record failed.
  void flush(std::chrono::milliseconds timeout = std::chrono::seconds(30));

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;  // keeps rdkafka.h out of this header
};

/// Reads `topic` (partitions 0..partitions-1) from the beginning, without a consumer
/// group, until `count` records were read or `timeout` passed. Returns what it read.
[[nodiscard]] std::vector<ReadRecord> read_topic(const std::string& bootstrap_servers,
                                                 const std::string& topic, int partitions,
                                                 std::size_t count,
                                                 std::chrono::milliseconds timeout);

/// The offsets `group` has committed for `topic` partitions 0..partitions-1
/// (-1 where nothing is committed). Throws std::runtime_error on failure.
[[nodiscard]] std::vector<std::int64_t> committed_offsets(const std::string& bootstrap_servers,
                                                          const std::string& group,
                                                          const std::string& topic, int partitions,
                                                          std::chrono::milliseconds timeout =
                                                              std::chrono::seconds(10));

/// `prefix` plus 12 random hex digits: a topic or group name no other test run uses.
[[nodiscard]] std::string unique_name(std::string_view prefix);

/// The high watermark (next offset to be written) of each partition.
[[nodiscard]] std::vector<std::int64_t> end_offsets(const std::string& bootstrap_servers,
                                                    const std::string& topic, int partitions,
                                                    std::chrono::milliseconds timeout =
                                                        std::chrono::seconds(10));

}  // namespace idem::test
