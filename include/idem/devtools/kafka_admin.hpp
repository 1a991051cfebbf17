#pragma once
/// \file
/// Small administrative Kafka operations for tools and tests: watermarks, a group's
/// committed offsets, reading a topic back without a group, and taking a group's
/// committed offsets back to the beginning ("offset reset to earliest", one of the
/// duplicate sources of DUP-SOURCES). They use plain librdkafka clients, so they work
/// against the embedded dev broker and real Kafka alike.
///
/// Every call takes a deadline. Errors are idem::Error with source Kafka.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/store.hpp"

namespace idem {

/// A record read back from a topic.
struct KafkaRecord {
  std::string topic;
  std::int32_t partition = 0;
  std::int64_t offset = 0;
  std::string key;
  std::string payload;
  std::vector<std::pair<std::string, std::string>> headers;

  /// The first header named `name`, or nullopt.
  [[nodiscard]] std::optional<std::string> header(std::string_view name) const;
};

/// The partition count of `topic` from the cluster's metadata.
/// \throws Error(Kafka): Timeout when the cluster does not answer, InvalidArgument when
///   the topic does not exist.
[[nodiscard]] int partition_count(const std::string& bootstrap_servers, const std::string& topic,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// The high watermark (next offset to be written) of partitions 0..partitions-1.
/// Their sum is the number of records ever written to the topic while nothing was
/// deleted by retention (always so on the dev broker below its 5 MiB per partition).
/// \throws Error(Kafka) when a partition cannot be queried.
[[nodiscard]] std::vector<std::int64_t> end_offsets(
    const std::string& bootstrap_servers, const std::string& topic, int partitions,
    std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// The offsets `group` has committed for `topic` partitions 0..partitions-1 (-1 where
/// nothing is committed). Asks the coordinator without joining the group.
/// \throws Error(Kafka) on failure (e.g. the coordinator is busy with a rebalance).
[[nodiscard]] std::vector<std::int64_t> committed_offsets(
    const std::string& bootstrap_servers, const std::string& group, const std::string& topic,
    int partitions, std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// Reads `topic` (partitions 0..partitions-1) from the beginning, without a consumer
/// group, until `count` records were read or `timeout` passed. Returns what it read.
[[nodiscard]] std::vector<KafkaRecord> read_topic(const std::string& bootstrap_servers,
                                                  const std::string& topic, int partitions,
                                                  std::size_t count,
                                                  std::chrono::milliseconds timeout);

/// Sets `group`'s committed offsets for every partition of `topic` to 0, so that the
/// group's next member re-reads the whole topic, as after an offset reset to earliest.
/// Call it while no member of the group runs: it joins the group as its only member
/// (waiting out the session of members that were killed) and commits offset 0 for
/// every partition. (Not DeleteConsumerGroupOffsets: librdkafka 2.0.2's mock cluster
/// has no OffsetDelete and the admin request aborts the calling process.)
/// `kafka` adds librdkafka properties to the joining client (after session.timeout.ms=6000
/// and heartbeat.interval.ms=1000): give it the session timeout the group's members use,
/// since the mock cluster can leave the next member's join unanswered when they differ.
/// \throws Error(Kafka, Timeout) when the group does not assign every partition or the
///   commit does not succeed before `timeout`.
void rewind_group(const std::string& bootstrap_servers, const std::string& group,
                  const std::string& topic, int partitions,
                  std::chrono::milliseconds timeout = std::chrono::seconds(60),
                  const std::vector<std::pair<std::string, std::string>>& kafka = {});

/// Commits `offsets` (partition -> next offset) of `topic` as `group`'s committed offsets,
/// the way rewind_group() does (joining the group as its only member: call it while no
/// member runs). \throws like rewind_group().
void commit_group_offsets(const std::string& bootstrap_servers, const std::string& group,
                          const std::string& topic,
                          const std::map<std::int32_t, std::int64_t>& offsets,
                          std::chrono::milliseconds timeout = std::chrono::seconds(60),
                          const std::vector<std::pair<std::string, std::string>>& kafka = {});

/// Sets `group`'s position in `topic` to `offsets` (partition -> next offset) in both
/// places a consumer reads it from: Kafka's committed offsets (commit_group_offsets) and
/// the store's (idem_consumer_offsets, with no acknowledged letters), so that a consumer
/// with offsets in the store follows it (docs/consumer-offsets.md). Kafka first: it
/// refuses while a member runs, and then nothing is written. \throws like
/// commit_group_offsets(), or Error from the store.
void reset_group_offsets(Store& store, const std::string& bootstrap_servers,
                         const std::string& group, const std::string& topic,
                         const std::map<std::int32_t, std::int64_t>& offsets,
                         std::chrono::milliseconds timeout = std::chrono::seconds(60),
                         const std::vector<std::pair<std::string, std::string>>& kafka = {});

}  // namespace idem
