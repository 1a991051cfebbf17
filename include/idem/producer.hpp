#pragma once
/// \file
/// idem::Producer: an idempotent Kafka producer (rule PROD) for events whose
/// event_id was born with the event (IDEM-1). The producer never makes ids: it copies
/// the caller's event_id into an `event_id` header, and when it must send a message
/// again (after rebuilding its librdkafka handle) it sends the same bytes, so the
/// resend carries the same id.
///
/// This header does not include librdkafka (pimpl); librdkafka is linked privately.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/uuid.hpp"

namespace idem {

/// How to build a Producer. Defaults are the production ones.
struct ProducerConfig {
  std::string bootstrap_servers;            ///< librdkafka `bootstrap.servers`; required
  std::string client_id = "idem-producer";  ///< librdkafka `client.id`
  /// librdkafka `message.timeout.ms`: how long librdkafka keeps trying to deliver one
  /// message before reporting it failed. Zero means "never give up", which is what the
  /// relay uses: a message that fails by timeout while a later one of the same key is
  /// acknowledged would reorder that key (see docs/outbox.md).
  std::chrono::milliseconds delivery_timeout{0};
  std::chrono::milliseconds linger{5};        ///< librdkafka `linger.ms`
  std::size_t max_queued_messages = 200'000;  ///< librdkafka `queue.buffering.max.messages`
  /// How long the destructor waits for outstanding acknowledgements (flush on shutdown).
  std::chrono::milliseconds flush_timeout{10'000};
  /// How long send() waits for room when librdkafka's local queue is full.
  std::chrono::milliseconds queue_full_timeout{30'000};
  /// librdkafka properties passed through unchanged (TLS, SASL, compression, ...).
  /// `enable.idempotence` and `acks` are owned by idem and cannot be overridden.
  std::vector<std::pair<std::string, std::string>> kafka;
  /// Diagnostics (fatal errors, rebuilds). Called on the thread that calls poll()/send().
  std::function<void(std::string_view)> log;
};

/// One message to send. The key is the aggregate id (per-entity order, rule PROD).
struct ProducerMessage {
  std::string topic;
  std::string key;
  std::string payload;
  Uuid event_id;            ///< copied to the `event_id` header (36-char text)
  std::string traceparent;  ///< W3C trace context; sent as a header when not empty
  std::vector<std::pair<std::string, std::string>> headers;  ///< further headers
};

/// The outcome of one send(), as reported by poll().
struct Delivery {
  std::uint64_t ticket = 0;  ///< what send() returned
  bool ok = false;           ///< acknowledged by the broker (acks=all)
  std::int32_t partition = -1;
  std::int64_t offset = -1;
  std::string error;  ///< librdkafka's reason when !ok (its error name and text)
  /// !ok and sending the same message again cannot succeed until something else changes
  /// (too large, topic unknown or not authorized, record refused): see
  /// src/kafka/produce_errors.hpp. Transient failures have permanent = false.
  bool permanent = false;
};

/// An idempotent producer: `enable.idempotence=true`, `acks=all`.
///
/// Fatal errors: a fatal idempotent-producer error (e.g. the broker lost the producer
/// id's sequence state) poisons a librdkafka handle. poll() and send() notice it, log
/// it, destroy the handle, build a new one and send every message that was not yet
/// acknowledged again, in the original order and with the same bytes (so with the same
/// event_id). Tickets stay valid across a rebuild. A message acknowledged by the broker
/// before the fatal error is never sent again by the producer.
///
/// Not thread-safe: one thread calls send(), poll() and flush(). Delivery reports are
/// only produced from poll()/flush() on that thread; no exception ever crosses a
/// librdkafka callback.
class Producer {
 public:
  /// Builds the librdkafka handle (no network I/O yet).
  /// \throws Error(InvalidArgument, Config) for an empty bootstrap_servers or a property
  ///   librdkafka rejects; Error(Internal, Kafka) when librdkafka refuses to start.
  explicit Producer(ProducerConfig config);
  /// Flushes for at most config.flush_timeout, then drops what is still unacknowledged.
  /// Never throws.
  ~Producer();
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;

  /// Queues one message and returns its ticket (increasing, starting at 1). The result
  /// arrives later from poll(). Blocks only while librdkafka's local queue is full (at
  /// most config.queue_full_timeout, serving delivery reports meanwhile).
  /// A message librdkafka refuses for good at once (e.g. larger than its
  /// `message.max.bytes`) is not queued: its ticket's Delivery (!ok, permanent) comes from
  /// the next poll()/flush(), like a refusal by the broker, so callers handle both alike.
  /// \throws Error(Timeout, Kafka) when the queue stays full; Error(InvalidArgument,
  ///   Kafka) when librdkafka refuses the message for another reason.
  std::uint64_t send(ProducerMessage message);

  /// Serves delivery reports for up to `timeout` (returns early once at least one
  /// arrived) and appends them to `out`. Rebuilds the handle after a fatal error.
  /// Returns the number of reports appended. Never throws except std::bad_alloc and
  /// Error(Internal, Kafka) when a rebuilt handle cannot be created.
  std::size_t poll(std::chrono::milliseconds timeout, std::vector<Delivery>& out);

  /// Waits up to `timeout` until nothing is pending, appending reports to `out`.
  /// Returns true when everything sent was reported.
  bool flush(std::chrono::milliseconds timeout, std::vector<Delivery>& out);

  /// Drops every unacknowledged message (they get no Delivery). Messages already on the
  /// wire may still be written by the broker; callers must treat them as "maybe sent".
  void purge() noexcept;

  /// Messages sent and not yet reported.
  [[nodiscard]] std::size_t pending() const noexcept;
  /// How many times the handle was rebuilt after a fatal error.
  [[nodiscard]] std::uint64_t rebuilds() const noexcept;

  /// For tests and drills: raises a fatal idempotence error in the current handle, as
  /// librdkafka's rd_kafka_test_fatal_error does (the next poll() rebuilds).
  void raise_fatal_error_for_testing(std::string_view reason);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idem
