#pragma once
/// \file
/// The embedded development broker: librdkafka's mock cluster (`rdkafka_mock.h`)
/// hosted in-process, speaking the real Kafka protocol on loopback.
///
/// It is what `idem demo`, `idem dev-broker` and the tests use so that nothing
/// needs installing. Any Kafka client (idem's own, kcat, confluent-kafka, ...)
/// reaches it through bootstrap_servers(). To use a real cluster instead, pass
/// that cluster's bootstrap servers to the clients; nothing else changes.
///
/// Limits of the mock cluster in librdkafka 2.0.2 (see docs/dev-broker.md):
/// - Everything is in memory and lost when the DevBroker is destroyed.
/// - Retention is about 5 MiB (at most 100k batches) per partition; older data is
///   dropped silently, and a group whose committed offset fell below the log start is
///   reset by `auto.offset.reset` without an error.
/// - Transactions are not real (aborted messages are delivered to `read_committed`
///   consumers, no fencing), and the idempotent producer is not deduplicated.
/// - Ports are random (127.0.0.1:<ephemeral>); they cannot be chosen.
/// - Unknown topics are auto-created with 4 partitions: create topics explicitly.
/// - No compaction, no topic deletion, `offsets_for_times` returns -1.
/// - The first group join waits about 3 s; use `session.timeout.ms` 4000-6000 with
///   `heartbeat.interval.ms` 1000.

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "idem/config_keys.hpp"

namespace idem {

/// A topic to create when the broker starts.
struct TopicSpec {
  std::string name;    ///< Kafka topic name: [A-Za-z0-9._-], 1 to 249 characters
  int partitions = 3;  ///< 1 to DevBroker::kMaxPartitions
};

/// How to start a DevBroker.
struct DevBrokerOptions {
  int brokers = 1;                ///< number of brokers, ids 1..brokers (1 to kMaxBrokers)
  std::vector<TopicSpec> topics;  ///< created before the constructor returns
};

/// An in-process Kafka-protocol broker cluster for development and tests
/// (librdkafka's mock cluster on a throwaway producer handle).
///
/// The cluster lives exactly as long as this object: it serves clients in this
/// process and in other processes until destruction, which closes every client
/// connection and discards all data.
///
/// Thread-safety: every member function may be called from any thread
/// concurrently; the mock cluster applies commands one at a time on its own thread.
/// Non-copyable and non-movable (clients hold its address and ports).
class DevBroker {
 public:
  /// Largest broker count accepted by the constructor.
  static constexpr int kMaxBrokers = 32;
  /// Largest partition count accepted per topic (measured to work in 2.0.2).
  static constexpr int kMaxPartitions = 100'000;

  /// Starts the cluster on random loopback ports and creates `options.topics`.
  /// Blocks until the listeners are bound and the topics exist (milliseconds).
  /// \throws idem::Error (source Kafka): InvalidArgument for a bad broker count or
  ///   topic spec (including a duplicate topic name); Connection when the cluster
  ///   could not be started (e.g. no loopback port could be bound); Internal when
  ///   librdkafka refused to create its handle.
  explicit DevBroker(DevBrokerOptions options = {});

  /// Stops the cluster: closes all client connections and frees all data.
  /// Blocks until the cluster's threads have exited: often about 1 s, because
  /// librdkafka 2.0.2 joins an internal broker thread that wakes once a second.
  /// Never throws.
  ~DevBroker();

  DevBroker(const DevBroker&) = delete;
  DevBroker& operator=(const DevBroker&) = delete;
  DevBroker(DevBroker&&) = delete;
  DevBroker& operator=(DevBroker&&) = delete;

  /// Comma-separated `host:port` list of every broker, e.g.
  /// `127.0.0.1:40123,127.0.0.1:40125`, for a client's `bootstrap.servers`.
  /// Fixed for the object's lifetime. Never throws, never blocks.
  [[nodiscard]] const std::string& bootstrap_servers() const noexcept;

  /// Number of brokers; their ids are 1..broker_count(). Never throws.
  [[nodiscard]] int broker_count() const noexcept;

  /// Creates a topic with `partitions` partitions (replication factor is ignored by
  /// the mock; leaders are spread over the brokers). Visible to the next Metadata
  /// request of any client once this returns.
  /// Blocks for one round trip to the cluster thread (microseconds).
  /// \throws idem::Error (source Kafka, InvalidArgument) when the name is not a valid
  ///   Kafka topic name, `partitions` is outside 1..kMaxPartitions, or the topic
  ///   already exists (including one auto-created by a client's Metadata request).
  void create_topic(std::string_view name, int partitions);

  /// Takes broker `broker_id` down: closes its client connections and refuses new
  /// ones until set_broker_up(). Leadership does not move, so its partitions are
  /// unavailable meanwhile. Idempotent. Blocks for one round trip to the cluster thread.
  /// \throws idem::Error (source Kafka, InvalidArgument) when `broker_id` is not in
  ///   1..broker_count().
  void set_broker_down(int broker_id);

  /// Lets broker `broker_id` accept connections again, on the same port. Clients
  /// reconnect on their own schedule: with librdkafka's default
  /// `reconnect.backoff.max.ms` (10 s) that can take about 10 s. Idempotent.
  /// Blocks for one round trip to the cluster thread.
  /// \throws idem::Error (source Kafka, InvalidArgument) when `broker_id` is not in
  ///   1..broker_count().
  void set_broker_up(int broker_id);

  /// Delays every response of broker `broker_id` by `rtt` (zero removes the delay).
  /// Blocks for one round trip to the cluster thread.
  /// \throws idem::Error (source Kafka, InvalidArgument) when `broker_id` is not in
  ///   1..broker_count() or `rtt` is negative or above INT_MAX ms.
  void set_broker_rtt(int broker_id, std::chrono::milliseconds rtt);

  /// Makes the next `error_codes.size()` requests with Kafka API key `api_key`
  /// (to any broker) fail, in order, with the given Kafka error codes; later requests
  /// succeed again. API keys: Produce=0, Fetch=1, ListOffsets=2, Metadata=3,
  /// OffsetCommit=8, OffsetFetch=9, FindCoordinator=10, JoinGroup=11, Heartbeat=12,
  /// SyncGroup=14, InitProducerId=22. Error codes are Kafka protocol codes (0 means
  /// "succeed this one"); the one librdkafka-internal code accepted is -195
  /// (`RD_KAFKA_RESP_ERR__TRANSPORT`), which makes the broker close the connection on
  /// that request. Most transient errors are retried by librdkafka invisibly.
  /// An empty `error_codes` does nothing. Never blocks.
  /// \throws idem::Error (source Kafka, InvalidArgument) for an API key outside the
  ///   range librdkafka 2.0.2 knows (0..58) or an unknown error code.
  void push_request_errors(int api_key, std::span<const int> error_codes);

  /// Makes every Metadata response report Kafka error `error_code` for topic `name`
  /// (0 clears it), e.g. 3 UNKNOWN_TOPIC_OR_PART: a topic that does not exist on a broker
  /// without auto-creation (the mock otherwise creates every unknown topic), or 29
  /// TOPIC_AUTHORIZATION_FAILED. Creates the topic in the mock if needed. Never blocks.
  /// \throws idem::Error (source Kafka, InvalidArgument) for an unknown error code.
  void set_topic_error(std::string_view name, int error_code);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// `dev_broker.*`: what `idem dev-broker` starts, and whether it reads control commands.
struct DevBrokerSettings {
  DevBrokerOptions options;
  bool read_stdin = true;  ///< read control commands from stdin
};

/// Declares the `dev_broker.*` keys (ConfigSchema::add<DevBrokerSettings>); a topic is
/// `NAME` or `NAME:PARTITIONS`.
void declare_dev_broker_keys(SectionKeys<DevBrokerSettings>& keys);

}  // namespace idem
