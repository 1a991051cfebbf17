#pragma once
// Plain librdkafka clients for tests: a producer that waits for acknowledgements; the
// topic reader and offset probes come from the library (idem/devtools/kafka_admin.hpp).
// Every call takes a deadline.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/devtools/kafka_admin.hpp"
#include "idem/uuid.hpp"

#include "support/wait.hpp"

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

/// A record read back (the library type of include/idem/devtools/kafka_admin.hpp).
using ReadRecord = idem::KafkaRecord;

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

// Reading a topic back, committed offsets and watermarks: the library's versions.
using idem::committed_offsets;
using idem::end_offsets;
using idem::read_topic;

/// Produces `count` valid order.confirmed.v1 events (order ids 1..count, customer 42,
/// 19.99) to partition `partition` of `topic`, keyed by order id with an `event_id`
/// header, and waits for the broker. Returns order id -> event id.
[[nodiscard]] std::map<std::int64_t, Uuid> produce_order_events(
    const std::string& bootstrap_servers, const std::string& topic, int count,
    std::int32_t partition = 0);

/// Order events produced by produce_keyed_order_events.
struct KeyedOrderEvents {
  /// Per record key, its order ids in offset order (one producer, so within a
  /// partition, send order is offset order).
  std::map<std::string, std::vector<std::int64_t>> order_ids_by_key;
  std::map<std::int64_t, Uuid> event_ids;  ///< order id -> event id
  std::map<std::int64_t, std::string> key_of_order;
};

/// Produces `count` valid order.confirmed.v1 events (order ids 1..count, 19.99 each) to
/// `topic`, order `i` keyed `key_of(i)` (the key decides the partition), with an
/// `event_id` header, and waits for the broker.
[[nodiscard]] KeyedOrderEvents produce_keyed_order_events(
    const std::string& bootstrap_servers, const std::string& topic, int count,
    const std::function<std::string(std::int64_t)>& key_of);

}  // namespace idem::test
