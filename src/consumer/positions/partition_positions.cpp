#include "consumer/positions/partition_positions.hpp"

#include <algorithm>
#include <charconv>
#include <thread>

#include <fmt/format.h>

#include "idem/retry.hpp"
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

PartitionPositions::PartitionPositions(const ConsumerConfig& config, Store& store, const LogFn& log)
    : config_(config),
      store_(store),
      log_(log),
      in_store_(config.offsets_in_store),
      idle_check_(config, store) {
  watch(store_);
}

// ---- Connections.

void PartitionPositions::watch(Store& connection) {
  const auto known = std::find_if(watched_.begin(), watched_.end(),
                                  [&](const Watched& w) { return w.connection == &connection; });
  if (known == watched_.end())
    watched_.push_back({&connection, connection.reconnects()});
  else
    ++known->watchers;
}

void PartitionPositions::unwatch(const Store& connection) noexcept {
  std::erase_if(watched_,
                [&](Watched& w) { return w.connection == &connection && --w.watchers == 0; });
}

bool PartitionPositions::replaced(const Store& connection) const noexcept {
  if (!in_store_) return false;
  const auto it = std::find_if(watched_.begin(), watched_.end(),
                               [&](const Watched& w) { return w.connection == &connection; });
  return it != watched_.end() && connection.reconnects() != it->verified_reconnects;
}

void PartitionPositions::verified() noexcept {
  for (Watched& w : watched_) w.verified_reconnects = w.connection->reconnects();
}

bool PartitionPositions::look_at_connections() {
  // Each one is looked at, so that all are replaced before the rows are read again.
  bool any = false;
  for (const Watched& w : watched_) {
    try {
      w.connection->begin_read()->rollback();
    } catch (const std::exception& e) {
      log_(fmt::format("idem consumer: the store connection broke: {}", e.what()));
    }
    any = replaced(*w.connection) || any;
  }
  return any;
}

void PartitionPositions::idle_look(TimePoint now) {
  if (idle_check_.take_due(now) && look_at_connections()) unverified();
}

// ---- Where assigned partitions start.

std::vector<StoredOffset> PartitionPositions::read(const std::atomic<bool>& stop,
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

std::optional<std::vector<StoredOffset>> PartitionPositions::read_again() {
  const std::atomic<bool> go_on{false};
  try {
    return read(go_on, 1);
  } catch (const std::exception& e) {
    if (refused_for_good(e) != nullptr) throw;
    log_(fmt::format("idem consumer: reading the stored offsets again failed: {}", e.what()));
    return std::nullopt;
  }
}

void PartitionPositions::report(const TopicPartition& tp, std::int64_t stored, std::int64_t other,
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

std::vector<std::optional<std::int64_t>> PartitionPositions::starts(
    std::span<const TopicPartition> partitions, std::span<const StoredOffset> rows,
    std::span<const CommittedOffset> kafka, ConsumerStats& delta) {
  std::vector<std::optional<std::int64_t>> out(partitions.size());
  for (std::size_t i = 0; i < partitions.size(); ++i) {
    const TopicPartition& tp = partitions[i];
    const CommittedOffset committed = i < kafka.size() ? kafka[i] : CommittedOffset{};
    const std::optional<std::int64_t> kept_from = store_kept_from(committed.metadata);
    if (const StoredOffset* row = row_of(rows, tp)) {
      out[i] = row->next_offset;
      restore(*row);
      // A row from before Kafka learnt F: the store keeps it from there at the latest.
      keep_from(tp, kept_from.value_or(row->next_offset));
      if (committed.offset)
        report(tp, row->next_offset, *committed.offset, "Kafka's committed offset", delta);
    } else if (!committed.offset || !kept_from) {
      // Never kept in the store: Kafka's committed offset (an upgrade from a release that
      // kept none, nothing read again), or auto.offset.reset for a new partition. F is
      // where it starts, known at the first record unless Kafka says.
      if (committed.offset) keep_from(tp, *committed.offset);
    } else {
      // The store kept this partition and has no row of it now: it lost every
      // transaction that wrote one. Kafka's offset may be past effects it lost; F is not.
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
    if (out[i] && out[i] != committed.offset) start_commits_.push_back({tp, *out[i]});
  }
  verified();
  return out;
}

void PartitionPositions::keep_from(const TopicPartition& tp, std::int64_t offset) {
  kept_[tp].metadata = fmt::format("{}{}", kStoreKeptFrom, offset);
}

std::string_view PartitionPositions::commit_metadata(const TopicPartition& tp) {
  if (!in_store_) return {};
  Kept& kept = kept_[tp];
  if (kept.metadata.empty()) {
    const std::optional<std::int64_t> first = progress_.first_seen(tp);
    if (!first) return {};
    keep_from(tp, *first);
  }
  return kept.metadata;
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

// ---- The rows of a transaction.

std::optional<std::vector<StoredOffset>> PartitionPositions::rows_after(
    std::span<const PartitionOutcome> outcomes) const {
  if (!in_store_) return std::nullopt;
  std::vector<StoredOffset> rows;
  for (const PartitionOutcome& p : outcomes) {
    std::optional<StoredOffset> row = progress_.row_after(p.tp, p.done_on_commit);
    if (!row) continue;
    const auto kept = kept_.find(p.tp);
    if (kept != kept_.end() && kept->second.held == row) continue;  // nothing new to write
    rows.push_back(std::move(*row));
  }
  return rows;
}

void PartitionPositions::write(Transaction& tx, std::span<const StoredOffset> rows) const {
  write_stored_offsets(tx, config_.group_id, rows);
}

void PartitionPositions::committed(std::span<const StoredOffset> rows) {
  for (const StoredOffset& row : rows) kept_[{row.topic, row.partition}].held = row;
}

void PartitionPositions::restore(const StoredOffset& row) {
  const TopicPartition tp{row.topic, row.partition};
  kept_[tp].held = row;
  for (const std::int64_t letter : row.acknowledged_letters)
    progress_.acknowledge_letter(tp, letter);
}

void PartitionPositions::write_moved() {
  if (!in_store_) return;
  std::vector<StoredOffset> rows;
  progress_.for_each_partition([&](const TopicPartition& tp) {
    std::optional<StoredOffset> now = progress_.row_after(tp, {});
    if (!now) return;
    const auto kept = kept_.find(tp);
    if (kept != kept_.end() && kept->second.held) {
      const StoredOffset& held = *kept->second.held;
      // Never behind what is stored: a position read at assignment is not taken back by
      // one that started lower (records the store already counts as done, delivered again).
      if (held == *now || held.next_offset > now->next_offset) return;
    }
    rows.push_back(std::move(*now));
  });
  if (rows.empty()) return;
  try {
    if (replaced(store_)) return unverified();
    const std::unique_ptr<Transaction> tx = store_.begin();
    // begin() may have replaced a broken connection: not verified either.
    if (replaced(store_)) return unverified();
    write(*tx, rows);
    tx->commit();
  } catch (const std::exception& e) {
    stop_if_refused_for_good("idem consumer", e);
    log_(fmt::format("idem consumer: writing the stored offsets failed (written later): {}",
                     e.what()));
    return;
  }
  committed(rows);
}

// ---- Kafka's commits and lag.

std::vector<PartitionOffset> PartitionPositions::take_moved() {
  std::vector<PartitionOffset> moved = progress_.take_moved();
  if (moved.empty()) return moved;
  std::lock_guard lock(next_mutex_);
  for (const PartitionOffset& p : moved) next_to_process_[p.tp] = p.offset;
  return moved;
}

std::optional<std::int64_t> PartitionPositions::next_to_process(const TopicPartition& tp) const {
  std::lock_guard lock(next_mutex_);
  const auto it = next_to_process_.find(tp);
  if (it == next_to_process_.end()) return std::nullopt;
  return it->second;
}

// ---- Going back, and revokes.

std::vector<PartitionOffset> PartitionPositions::go_back(std::span<const TopicPartition> owned,
                                                         std::span<const StoredOffset> rows,
                                                         ConsumerStats& delta) {
  // The other connections, if broken too, are replaced before they count as verified.
  static_cast<void>(look_at_connections());
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
  // As if revoked and assigned again at the rows, with no commit in between.
  for (const PartitionOffset& back : out) {
    progress_.forget({&back.tp, 1});
    kept_[back.tp].held.reset();
    if (const StoredOffset* row = row_of(rows, back.tp)) restore(*row);
  }
  verified();
  resync_due_.store(false, std::memory_order_relaxed);
  return out;
}

void PartitionPositions::forget(std::span<const TopicPartition> partitions) {
  progress_.forget(partitions);
  for (const TopicPartition& tp : partitions) kept_.erase(tp);
  std::lock_guard lock(next_mutex_);
  for (const TopicPartition& tp : partitions) next_to_process_.erase(tp);
}

}  // namespace idem::detail
