#pragma once
// The effect path (EffectPipeline with its BatchProcessor, PartitionProgress, retry
// schedule and the real DeadLetterProducer) driven turn by turn, deterministically:
//  - records are real librdkafka messages: appended to topics of the tests' dev broker
//    and fetched back (RecordLog), so headers, retry letters and dead letters are the
//    real ones;
//  - which records a poll returns is decided by ScriptedFetch, a FetchControl that keeps
//    librdkafka's per-partition fetch position and pause flag the way librdkafka does
//    (a pause purges what was fetched; a resume fetches from the position sought);
//  - the wall clock (event ages, retry not-before) and the steady clock (backoffs,
//    deferrals) move only when the test moves them;
//  - calls complete only when the test completes them (ScriptedCalls);
//  - the store is a private in-memory SQLite database, so applies commit inline.
// One turn() is one pass of the consumer's loop for effect topics, in its order.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "consumer/batch/batch_processor.hpp"
#include "consumer/effects/effect_pipeline.hpp"
#include "consumer/horizon/dedup_horizon_guard.hpp"
#include "consumer/intake/fetch_control.hpp"
#include "consumer/intake/fetch_gate.hpp"
#include "consumer/letters/dead_letter_producer.hpp"
#include "consumer/letters/retry_topics.hpp"
#include "consumer/positions/partition_positions.hpp"
#include "consumer/steady_clock.hpp"
#include "idem/consumer.hpp"
#include "idem/kafka/kafka_handle.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/store.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/manual_clock.hpp"
#include "support/shared_broker.hpp"

namespace idem::test {

using detail::KafkaMessage;
using detail::TopicPartition;

/// A steady clock the test moves by hand. Thread-safe.
class ManualSteadyClock final : public detail::SteadyClock {
 public:
  [[nodiscard]] TimePoint now() const noexcept override { return now_.load(); }
  void advance(std::chrono::milliseconds d) { now_.store(now_.load() + d); }

 private:
  std::atomic<TimePoint> now_{TimePoint(std::chrono::hours(1))};
};

/// Records on topics of a dev broker, appended by the test (or by the consumer's letter
/// producer) and fetched back as fresh librdkafka messages, as often as asked.
class RecordLog {
 public:
  explicit RecordLog(const std::string& bootstrap_servers);
  ~RecordLog();
  RecordLog(const RecordLog&) = delete;
  RecordLog& operator=(const RecordLog&) = delete;

  /// Appends one record and waits for the broker; returns its offset.
  std::int64_t append(const TopicPartition& tp, const std::string& key, const std::string& payload,
                      const Headers& headers = {});
  /// One past the last record of `tp` as this log knows it.
  [[nodiscard]] std::int64_t end(const TopicPartition& tp) const;
  /// Reads the broker's end of `tp` again (records produced by someone else).
  void refresh_end(const TopicPartition& tp);
  /// Up to `max` records of `tp` from `from`, fresh messages the caller owns.
  [[nodiscard]] std::vector<KafkaMessage> fetch(const TopicPartition& tp, std::int64_t from,
                                                std::size_t max);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// librdkafka's fetching, scripted: per assigned partition a fetch position and a pause
/// flag, set by pause_and_seek and seek_and_resume exactly as on the real handle. A poll
/// hands out what unpaused partitions hold from their positions, in a fixed order.
class ScriptedFetch final : public detail::FetchControl {
 public:
  explicit ScriptedFetch(RecordLog& log) : log_(log) {}
  void assign(const TopicPartition& tp, std::int64_t position);
  void unassign(const TopicPartition& tp);
  /// Up to `max` records: from each unpaused partition in turn (starting after the one
  /// that began the last poll), at most `per_partition` from each.
  [[nodiscard]] std::vector<KafkaMessage> poll(std::size_t max, std::size_t per_partition);

  void pause_and_seek(const detail::PartitionOffset& at) override;
  void seek_and_resume(const detail::PartitionOffset& at) override;
  void wake() noexcept override {}

  [[nodiscard]] bool paused(const TopicPartition& tp) const;
  [[nodiscard]] std::int64_t position(const TopicPartition& tp) const;
  [[nodiscard]] std::vector<TopicPartition> assignment() const;

 private:
  struct Partition {
    std::int64_t position = 0;
    bool paused = false;
  };
  RecordLog& log_;
  std::map<std::pair<std::string, std::int32_t>, Partition> partitions_;
  std::size_t rotation_ = 0;
};

/// One call the effect path started and the test has not completed yet.
struct PendingCall {
  TopicPartition tp;
  std::int64_t offset = 0;
  OrderConfirmed event;
  std::string key;  ///< the record's key
  CallCompletion<bool> done;
};

/// What the harness is built with.
struct HarnessOptions {
  std::vector<std::pair<std::string, int>> topics = {};  ///< source topics and partition counts
  std::vector<std::chrono::milliseconds> retry_delays = {};
  std::size_t max_in_flight = 64;
  std::size_t max_buffered_per_partition = 4096;
  std::size_t batch_size = 100;
  std::size_t fetch_per_partition = 100;  ///< records one poll takes of one partition
  StaleEventPolicy stale_events = StaleEventPolicy::Quarantine;
  DedupHorizon dedup_horizon = {};
  /// Called for each started call before it is queued (may complete it at once).
  std::function<void(PendingCall&)> on_call = {};
  /// The route's parser; empty: EventCodec<OrderConfirmed>::parse.
  RecordParser<OrderConfirmed> parser = {};
};

class EffectHarness {
 public:
  EffectHarness(SharedBroker& broker, HarnessOptions options);
  ~EffectHarness();
  EffectHarness(const EffectHarness&) = delete;
  EffectHarness& operator=(const EffectHarness&) = delete;

  /// An order.confirmed event born `age` before the wall clock's now.
  [[nodiscard]] OrderConfirmed order(std::int64_t order_id,
                                     std::chrono::milliseconds age = std::chrono::milliseconds(0));
  /// Appends `payload` to `tp` keyed `key`; returns its offset.
  std::int64_t append(const TopicPartition& tp, const std::string& key, const std::string& payload,
                      const Headers& headers = {});
  std::int64_t append(const TopicPartition& tp, const OrderConfirmed& e) {
    return append(tp, std::to_string(e.order_id), to_json(e));
  }

  /// One pass of the consumer's loop over effect topics.
  void turn();
  /// Moves both clocks on.
  void advance(std::chrono::milliseconds d);

  /// Calls started and not yet completed, oldest first.
  [[nodiscard]] std::vector<PendingCall>& pending() { return pending_; }
  /// Completes pending()[i] (and removes it).
  void complete(std::size_t i, Outcome outcome, const std::string& why = "scripted");

  /// Revokes `partitions` as a rebalance does (commit, forget, drop), then assigns them
  /// again at their committed positions.
  void reassign(const std::vector<TopicPartition>& partitions);

  [[nodiscard]] std::optional<std::int64_t> committed(const TopicPartition& tp) const;
  /// Effect rows applied (committed) for `event_id`.
  [[nodiscard]] std::int64_t effects_of(const Uuid& event_id);
  [[nodiscard]] std::int64_t effects();
  /// Letters on `<source>.dlq`: (original topic, partition, offset) -> error class, each copy.
  [[nodiscard]] std::vector<ReadRecord> dead_letters(const std::string& source_topic);
  [[nodiscard]] const ConsumerStats& stats() const { return stats_; }
  [[nodiscard]] std::vector<std::string> log_lines() const { return log_lines_; }
  [[nodiscard]] std::string retry_topic(const std::string& source, std::uint32_t level) const;

  ManualClock& wall() { return wall_; }
  ManualSteadyClock& steady() { return steady_; }
  ScriptedFetch& fetch() { return fetch_; }
  detail::PartitionProgress& progress() { return positions_.progress(); }
  detail::FetchGate& gate() { return gate_; }
  detail::DedupHorizonGuard& horizon_guard() { return horizon_guard_; }
  ConsumerConfig& config() { return config_; }
  RecordLog& log() { return records_; }

 private:
  SharedBroker& broker_;
  HarnessOptions options_;
  ManualClock wall_;
  ManualSteadyClock steady_;
  ConsumerConfig config_;
  ConsumerHooks hooks_;
  std::vector<std::string> log_lines_;
  detail::LogFn log_;
  detail::TopicHandlers handlers_;
  detail::RetryTopicMap retry_topics_;
  detail::DedupHorizonGuard horizon_guard_;
  detail::ConsumerContext context_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<detail::BatchProcessor> processor_;
  detail::PartitionPositions positions_;
  RecordLog records_;
  ScriptedFetch fetch_;
  detail::FetchGate gate_;
  std::unique_ptr<detail::DeadLetterProducer> letters_;
  std::unique_ptr<detail::EffectPipeline> pipeline_;
  std::vector<PendingCall> pending_;
  std::map<std::pair<std::string, std::int32_t>, std::int64_t> committed_;
  ConsumerStats stats_;
  std::unique_ptr<UuidV7Generator> ids_;
};

}  // namespace idem::test
