#pragma once
/// \file
/// Reading and replaying a dead-letter topic (`idem dlq`).
///
/// The consumer writes a record that can never be processed to `<topic>.dlq` with
/// its original key, payload and headers plus `idem.*` headers naming the original
/// topic/partition/offset, the consumer group, the error class and message and the
/// attempt count. This library reads such a topic (without a consumer group, up to
/// the end offsets seen when reading starts), decodes those headers, filters, and
/// replays records to their original topic (or another one).
///
/// A replayed record keeps its key, payload and non-`idem.*` headers, so it keeps
/// its event_id: a consumer group that already applied the event skips it through
/// its dedup row, so replaying twice, or replaying a record another group dead-lettered,
/// is harmless. That holds only while the dedup rows exist, so replay refuses events
/// born past the dedup horizon unless forced (see DedupHorizon).
///
/// This header does not include librdkafka.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/clock.hpp"
#include "idem/dedup_horizon.hpp"
#include "idem/uuid.hpp"

namespace idem {

/// Where the dead-letter topic lives.
struct DlqConnection {
  std::string bootstrap_servers;  ///< librdkafka `bootstrap.servers`; required
  /// librdkafka properties passed through unchanged (TLS, SASL, ...).
  std::vector<std::pair<std::string, std::string>> kafka;
  /// Deadline for each broker step (metadata, end offsets, reading, acknowledgements).
  std::chrono::milliseconds timeout{30'000};
};

/// One dead letter as read from the DLQ topic, with its idem.* headers decoded.
struct DeadLetterRecord {
  std::string topic;  ///< the DLQ topic
  std::int32_t partition = 0;
  std::int64_t offset = 0;
  /// When the dead letter was written (the record's Kafka timestamp), if the broker has one.
  std::optional<std::chrono::system_clock::time_point> dead_lettered_at;
  std::string key;
  std::string payload;
  std::vector<std::pair<std::string, std::string>> headers;  ///< all of them, in order

  // Decoded idem.* headers; empty / nullopt when a header is missing or unreadable.
  std::string original_topic;
  std::optional<std::int32_t> original_partition;
  std::optional<std::int64_t> original_offset;
  std::string consumer_group;
  std::string error_class;  ///< the reason, e.g. validation.missing, handler.dead_letter, stale
  std::string error_message;
  std::optional<std::uint32_t> attempts;
  /// The event's id: the payload's top-level "event_id" when it is a UUID, else the
  /// `event_id` header when it is one. nullopt for a record that carries none.
  std::optional<Uuid> event_id;
  /// Letters read for the same original record (topic, partition, offset, event id): a consumer
  /// that crashed after its letter was acknowledged but before its offset commit sends the letter
  /// again. read_dead_letters returns the first and counts the rest here, so a record is listed and
  /// replayed once.
  std::size_t copies = 1;

  /// The value of the first header named `name`, or nullopt.
  [[nodiscard]] std::optional<std::string_view> header(std::string_view name) const noexcept;
  /// The event's age at `now`, from its UUIDv7 timestamp; nullopt without a v7 event id.
  [[nodiscard]] std::optional<std::chrono::milliseconds> event_age(
      std::chrono::system_clock::time_point now) const noexcept;
};

/// Which dead letters to select. Every set field must match.
struct DlqFilter {
  /// Error class: `handler.dead_letter` matches exactly; `handler` matches every
  /// `handler.*` class as well.
  std::optional<std::string> reason;
  std::optional<std::string> key;             ///< exact Kafka key
  std::optional<std::string> consumer_group;  ///< exact idem.consumer.group
  std::optional<Uuid> event_id;
  /// Only dead letters at least this old (by dead_lettered_at; records without a
  /// timestamp never match an age bound).
  std::optional<std::chrono::milliseconds> min_age;
  /// Only dead letters at most this old.
  std::optional<std::chrono::milliseconds> max_age;
  std::optional<std::int32_t> partition;  ///< DLQ partition
  std::optional<std::int64_t> offset;     ///< DLQ offset (with or without partition)

  [[nodiscard]] bool matches(const DeadLetterRecord& record,
                             std::chrono::system_clock::time_point now) const;
};

/// Reads every record of `dlq_topic` that exists when the call starts (all partitions,
/// from the log start to the end offsets queried first) and returns those matching
/// `filter`, in partition then offset order, one per original record (see
/// DeadLetterRecord::copies). Blocks until done or connection.timeout per step.
/// \throws Error(InvalidArgument, Kafka) when the topic does not exist;
///   Error(Timeout, Kafka) when the broker does not answer in time;
///   Error(InvalidArgument, Config) for a rejected property.
[[nodiscard]] std::vector<DeadLetterRecord> read_dead_letters(
    const DlqConnection& connection, std::string_view dlq_topic, const DlqFilter& filter = {},
    const Clock& clock = SystemClock::instance());

/// Progress of a replay, reported after each acknowledged (or, in a dry run, planned) record.
struct ReplayProgress {
  std::size_t done = 0;   ///< records handled so far (replayed, refused or skipped)
  std::size_t total = 0;  ///< records selected
};

/// How to replay.
struct ReplayOptions {
  DlqFilter filter;
  /// Target topic; empty means each record's idem.original.topic.
  std::string to_topic;
  /// Say what would be replayed; send nothing.
  bool dry_run = false;
  /// At most this many records per second; 0 = unlimited.
  double rate_limit = 0;
  /// Events born past this horizon are refused (their dedup rows may be gone, so a
  /// replay could apply them twice) ...
  DedupHorizon horizon;
  /// ... unless this is set.
  bool force = false;
  const Clock* clock = &SystemClock::instance();
  /// Called on the calling thread; may be empty.
  std::function<void(const ReplayProgress&)> on_progress;
};

/// What happened to one selected dead letter.
enum class ReplayAction {
  Replayed,      ///< acknowledged on the target topic (or would be, in a dry run)
  RefusedStale,  ///< event past the dedup horizon and not forced
  NoTarget,      ///< no --to and no idem.original.topic header
  Failed,        ///< the broker did not acknowledge it (see ReplayItem::error)
};
[[nodiscard]] std::string_view to_string(ReplayAction action) noexcept;

struct ReplayItem {
  DeadLetterRecord record;
  std::string target_topic;
  ReplayAction action = ReplayAction::Replayed;
  std::string error;  ///< librdkafka's reason for Failed
};

/// The outcome of replay_dead_letters(). Records are never removed from a DLQ topic
/// (Kafka cannot delete single records): replaying again sends them again, and the
/// consumers' dedup rows make that a no-op.
struct ReplayReport {
  std::vector<ReplayItem> items;  ///< every selected record, in DLQ order
  std::size_t replayed = 0;
  std::size_t refused_stale = 0;
  std::size_t no_target = 0;
  std::size_t failed = 0;
  bool dry_run = false;
};

/// Reads `dlq_topic` like read_dead_letters(), then sends each selected record to its
/// target with its original key, payload and headers (idem.* headers dropped, plus
/// `idem.replayed.from` = `<dlq topic>/<partition>/<offset>`) through an idempotent
/// producer (acks=all), in DLQ order, paced by options.rate_limit. Waits for every
/// acknowledgement (connection.timeout after the last send).
/// \throws as read_dead_letters(); Error(InvalidArgument, Config) for a negative rate.
[[nodiscard]] ReplayReport replay_dead_letters(const DlqConnection& connection,
                                               std::string_view dlq_topic,
                                               const ReplayOptions& options);

}  // namespace idem
