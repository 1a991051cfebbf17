#include "consumer/stored_positions.hpp"

#include <algorithm>
#include <charconv>
#include <thread>

#include <fmt/format.h>

#include "retry/backoff.hpp"
#include "stores/store_errors.hpp"

namespace idem::detail {

namespace {

// The prefix of the metadata of an offset commit naming where the store keeps the
// partition's row from (commit_metadata). Kafka keeps the string with the offset; other
// clients and tools ignore it.
constexpr std::string_view kStoreKeptFrom = "idem.store-from=";

const StoredOffset* row_of(std::span<const StoredOffset> rows, const TopicPartition& tp) {
  const auto it = std::find_if(rows.begin(), rows.end(), [&](const StoredOffset& r) {
    return r.partition == tp.partition && r.topic == tp.topic;
  });
  return it == rows.end() ? nullptr : &*it;
}

}  // namespace

std::vector<StoredOffset> StoredPositions::read(const std::atomic<bool>& stop,
                                                std::uint32_t attempts) {
  Backoff backoff(config_.retry);
  for (std::uint32_t attempt = 1;; ++attempt) {
    try {
      auto tx = store_.begin_read();
      std::vector<StoredOffset> rows = read_stored_offsets(*tx, config_.group_id);
      tx->rollback();
      return rows;
    } catch (const std::exception& e) {
      stop_if_refused_for_good("idem consumer", e);
      if (attempt >= attempts || stop.load()) throw;
      const auto delay = backoff.delay(attempt);
      log_(fmt::format("idem consumer: reading the stored offsets failed, again in {} ms: {}",
                       delay.count(), e.what()));
      // Nothing of the group's partitions may be processed before these are known.
      std::this_thread::sleep_for(delay);
    }
  }
}

std::optional<std::vector<StoredOffset>> StoredPositions::read_again() {
  const std::atomic<bool> go_on{false};
  try {
    return read(go_on, 1);
  } catch (const std::exception& e) {
    if (refused_for_good(e) != nullptr) throw;
    log_(fmt::format("idem consumer: reading the stored offsets again failed: {}", e.what()));
    return std::nullopt;
  }
}

void StoredPositions::report(const TopicPartition& tp, std::int64_t stored, std::int64_t other,
                             std::string_view what, ConsumerStats& delta) const {
  if (stored == other) return;
  ++delta.offset_disagreements;
  const std::int64_t by = stored < other ? other - stored : stored - other;
  if (stored < other)
    delta.offset_records_read_again += static_cast<std::uint64_t>(by);
  else
    delta.offset_records_not_read_again += static_cast<std::uint64_t>(by);
  log_(fmt::format(
      "idem consumer: {} [{}]: the stored offset {} is {} {} {}: going on from the store's, {} "
      "{} record(s)",
      tp.topic, tp.partition, stored, stored < other ? "behind" : "ahead of", what, other,
      stored < other ? "reading again" : "not reading again", by));
}

std::vector<std::optional<std::int64_t>> StoredPositions::starts(
    std::span<const TopicPartition> partitions, std::span<const StoredOffset> rows,
    std::span<const CommittedOffset> kafka, ConsumerStats& delta) {
  std::vector<std::optional<std::int64_t>> out(partitions.size());
  for (std::size_t i = 0; i < partitions.size(); ++i) {
    const TopicPartition& tp = partitions[i];
    const CommittedOffset committed = i < kafka.size() ? kafka[i] : CommittedOffset{};
    const std::optional<std::int64_t> kept_from = store_kept_from(committed.metadata);
    if (const StoredOffset* row = row_of(rows, tp)) {
      out[i] = row->next_offset;
      progress_.restore(*row);
      // A row from before Kafka learnt F: the store keeps it from there at the latest.
      keep_from(tp, kept_from.value_or(row->next_offset));
      if (committed.offset)
        report(tp, row->next_offset, *committed.offset, "Kafka's committed offset", delta);
      continue;
    }
    if (!committed.offset || !kept_from) {
      // Never kept in the store: Kafka's committed offset (an upgrade from a release that
      // kept none, nothing read again), or auto.offset.reset for a new partition. F is
      // where it starts, known at the first record unless Kafka says.
      if (committed.offset) keep_from(tp, *committed.offset);
      continue;
    }
    // The store kept this partition and has no row of it now: it lost every transaction
    // that wrote one. Kafka's offset may be past effects it lost; F is not.
    const std::int64_t from = std::min(*kept_from, *committed.offset);
    out[i] = from;
    keep_from(tp, from);
    ++delta.offset_disagreements;
    delta.offset_records_read_again += static_cast<std::uint64_t>(*committed.offset - from);
    log_(fmt::format(
        "idem consumer: {} [{}]: the store has no stored offset, but Kafka's committed offset "
        "{} was written while the store kept one from {}: the store lost it (a failover that "
        "took back every transaction that wrote it?); reading again from {}, {} record(s)",
        tp.topic, tp.partition, *committed.offset, from, from, *committed.offset - from));
  }
  return out;
}

void StoredPositions::keep_from(const TopicPartition& tp, std::int64_t offset) {
  kept_from_.insert_or_assign(tp, fmt::format("{}{}", kStoreKeptFrom, offset));
}

std::string_view StoredPositions::commit_metadata(const TopicPartition& tp) {
  if (!enabled()) return {};
  auto it = kept_from_.find(tp);
  if (it == kept_from_.end()) {
    const std::optional<std::int64_t> first = progress_.first_seen(tp);
    if (!first) return {};
    keep_from(tp, *first);
    it = kept_from_.find(tp);
  }
  return it->second;
}

void StoredPositions::forget(std::span<const TopicPartition> partitions) {
  for (const TopicPartition& tp : partitions) kept_from_.erase(tp);
}

std::optional<std::int64_t> store_kept_from(std::string_view metadata) {
  if (!metadata.starts_with(kStoreKeptFrom)) return std::nullopt;
  metadata.remove_prefix(kStoreKeptFrom.size());
  std::int64_t offset = 0;
  const auto [end, ec] =
      std::from_chars(metadata.data(), metadata.data() + metadata.size(), offset);
  if (ec != std::errc() || end != metadata.data() + metadata.size() || offset < 0)
    return std::nullopt;
  return offset;
}

std::vector<PartitionOffset> StoredPositions::rewinds(std::span<const TopicPartition> owned,
                                                      std::span<const StoredOffset> rows,
                                                      ConsumerStats& delta) {
  std::vector<PartitionOffset> out;
  for (const TopicPartition& tp : owned) {
    const StoredOffset* row = row_of(rows, tp);
    const std::optional<std::int64_t> target =
        row != nullptr ? std::optional(row->next_offset) : progress_.first_seen(tp);
    if (!target) continue;  // nothing received of it yet: it starts where it was assigned
    if (const auto position = progress_.commit_position(tp))
      report(tp, *target, *position, "the consumer's position", delta);
    out.push_back({tp, *target});
  }
  log_(
      fmt::format("idem consumer: the store connection was replaced: {} partition(s) go on from "
                  "the stored offsets",
                  out.size()));
  return out;
}

void StoredPositions::restore(std::span<const TopicPartition> partitions,
                              std::span<const StoredOffset> rows) {
  for (const TopicPartition& tp : partitions) {
    if (const StoredOffset* row = row_of(rows, tp)) progress_.restore(*row);
  }
}

bool StoredPositions::write_unstored(BatchProcessor& processor) {
  const std::vector<StoredOffset> rows = progress_.unstored();
  if (rows.empty()) return true;
  try {
    if (!processor.commit_offsets(rows)) return false;
  } catch (const std::exception& e) {
    stop_if_refused_for_good("idem consumer", e);
    log_(fmt::format("idem consumer: writing the stored offsets failed (written later): {}",
                     e.what()));
    return true;
  }
  for (const StoredOffset& row : rows) progress_.stored(row);
  return true;
}

}  // namespace idem::detail
