#pragma once
// The effect path of idem::Consumer (Consumer::on_effect, IDEM-4): records of effect
// topics are held here from poll to commit. Per run() turn:
//   1. completions of call phases come in from other threads (CompletionQueue);
//   2. keys whose previous event is finished start their next call (KeyedScheduler); an
//      event already marked makes no call (a duplicate never calls): which events are
//      marked is read once per polled batch, when they are admitted, and read again just
//      before the call only where that answer may have gone stale meanwhile (another
//      record held here carries the same event id, the call is retried, or the first read
//      failed);
//   3. events whose call completed are applied in ONE batch transaction through a
//      BatchProcessor (mark, apply phase, DLQ outcomes; the same machinery as handlers)
//      on the effect path's own connection; its COMMIT, which mostly waits for the WAL
//      flush, runs on a background thread while later turns take completions and start
//      calls; the next apply transaction starts once that commit returned and its
//      outcome was settled (dead letters sent, offsets advanced, keys freed);
//   4. each record applied (or dead-lettered and acknowledged) is done in the consumer's
//      PartitionPositions (its PartitionProgress), which moves the partition's commit position over
//      its contiguous done prefix only; a partition holding too many records is held in the
//      FetchGate.
// A call that completes with retry() holds back only its key (capped backoff), or, with
// retry topics on, sends its record to the next retry topic and frees the key. Records
// of revoked partitions are dropped; a call still in flight for one keeps its key busy
// until it completes, and its result is discarded (assignment generation), never applied.
// Only the run() thread calls this class.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "consumer/batch/background_commit.hpp"
#include "consumer/batch/batch_processor.hpp"
#include "consumer/effects/completion_queue.hpp"
#include "consumer/effects/effect_record.hpp"
#include "consumer/effects/keyed_scheduler.hpp"
#include "consumer/effects/partition_windows.hpp"
#include "consumer/effects/staged_record.hpp"
#include "consumer/horizon/dedup_horizon_guard.hpp"
#include "consumer/intake/fetch_gate.hpp"
#include "consumer/letters/retry_topics.hpp"
#include "consumer/positions/partition_positions.hpp"
#include "idem/retry.hpp"

namespace idem::detail {

class EffectPipeline {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  /// Sends a batch's dead letters; returns those the broker did not acknowledge.
  using SendDeadLetters =
      std::function<std::vector<PartitionOffset>(const BatchResult&, ConsumerStats&)>;

  /// What the pipeline works with; everything must outlive it.
  struct Deps {
    const ConsumerContext& context;
    Store& store;  ///< the first connection: the read-only check before calls
    /// On the first connection: applies commit inline there when the store has no
    /// second connection (a private in-memory SQLite database).
    BatchProcessor& processor;
    FetchGate& gate;                ///< holds partitions that are full; wakes the poll
    PartitionPositions& positions;  ///< the consumer's, shared with the batch path
    SendDeadLetters send_dead_letters;
  };

  /// Opens the effect path's own connection (Store::connect_again). \throws Error from it.
  explicit EffectPipeline(Deps deps);
  ~EffectPipeline();
  EffectPipeline(const EffectPipeline&) = delete;
  EffectPipeline& operator=(const EffectPipeline&) = delete;

  /// Moves the records of effect topics out of `batch` (the rest stays for handlers).
  void admit(std::vector<KafkaMessage>& batch, ConsumerStats& delta);

  /// One turn: take completions, start calls (unless `start_calls` is false: stopping),
  /// apply what completed (its records done in the PartitionProgress), pause and resume
  /// partitions. \throws HookAbort when a hook throws.
  void turn(ConsumerStats& delta, bool start_calls);

  /// Waits for the apply transaction whose commit is in flight, if any, and settles it
  /// (dead letters, records done, keys). Before the offsets of revoked partitions are
  /// committed. \throws stopping_error from the commit; HookAbort from AfterDbCommit.
  void settle(ConsumerStats& delta);

  /// Set while completions wait or an apply's commit returned: the poll returns early.
  [[nodiscard]] const std::atomic<bool>& wake_flag() const noexcept {
    return completions_->pending();
  }
  /// When the next turn has work without a completion: now when calls can start or
  /// results wait to be applied; else the earliest key retry; nullopt when idle.
  [[nodiscard]] std::optional<TimePoint> next_work(TimePoint now) const;
  /// No call in flight and nothing waiting to be applied.
  [[nodiscard]] bool settled() const noexcept {
    return calling_ == 0 && ready_.empty() && !applying_;
  }

  /// Whether an apply transaction is between its prepare and its settling.
  [[nodiscard]] bool applying() const noexcept { return applying_.has_value(); }

  /// Drops everything of `partitions` (called from the rebalance callback).
  void on_revoked(std::span<const TopicPartition> partitions);

 private:
  enum class State { Queued, Calling, Ready };
  /// What the read of the dedup marks said about an event before its call.
  enum class MarkCheck {
    Fresh,   ///< not marked when last read, and nothing here could have marked it since
    Marked,  ///< marked when last read: no call
    AtCall,  ///< to be read just before the call
  };
  struct Entry {
    KafkaMessage message;
    std::shared_ptr<EffectRecord> record;
    EffectTopicHandler* handler = nullptr;
    TopicPartition tp;
    std::uint64_t generation = 0;
    std::string key;  // ordering key; empty when not scheduled (invalid or stale)
    bool scheduled = false;
    Admission admission;  // made once, when polled; the processor applies it as made
    State state = State::Queued;
    MarkCheck mark_check = MarkCheck::AtCall;
    // Decided once, when its call was first to start, by the consumer's one horizon
    // guard (which knows what maintenance dropped); carried to the apply in `staged`.
    std::optional<HorizonVerdict> horizon;
    std::uint32_t attempts = 0;
    StagedCall staged;  // outcome Retry (no call result) until a call completed
    std::shared_ptr<void> result;
    std::string reason;
  };

  /// Decides `e`'s dedup-horizon verdict if not decided yet; true when it may be called.
  bool judge_horizon(Entry& e);
  /// Returns the entry if it will be called and its marks are to be read now (no other
  /// record of its event id is held); else nullptr.
  Entry* admit_one(KafkaMessage m, EffectTopicHandler& handler);
  /// Reads which of `entries` are marked for the group (one read) into their mark_check.
  /// \throws what the store throws; nothing is set then.
  void read_marks(std::span<Entry* const> entries);
  /// Removes an entry, and its event id from ids_held_.
  void erase_entry(std::unordered_map<std::uint64_t, Entry>::iterator it);
  void take_completions(ConsumerStats& delta, TimePoint now);
  void start_calls(ConsumerStats& delta, TimePoint now);
  void start_call(std::uint64_t ticket, Entry& e);
  /// An apply transaction between its prepare and its settling.
  struct Applying {
    std::vector<std::uint64_t> tickets;
    BatchResult result;
    TimePoint started;
    TimePoint committed;
  };
  void apply_ready(ConsumerStats& delta, TimePoint now);
  void settle_apply(ConsumerStats& delta, TimePoint now);
  void finish_apply(ConsumerStats& delta, Applying& a, TimePoint now);
  void settle_applied(const BatchResult& r, std::span<const PartitionOffset> refused,
                      std::span<const std::uint64_t> tickets, TimePoint now);
  void retry_key(Entry& e, TimePoint now, std::string_view why);
  void finish(std::uint64_t ticket);
  std::string default_key(const EffectRecord& r) const;

  Deps deps_;
  const ConsumerConfig& config_;  // deps_.context.config
  std::shared_ptr<CompletionQueue> completions_;
  KeyedScheduler scheduler_;
  PartitionWindows windows_;
  Backoff key_backoff_;
  Backoff apply_backoff_;
  RetrySchedule no_schedule_;  // attempts of the processor's blocking retries: none here
  std::unordered_map<std::uint64_t, Entry> entries_;
  // Event ids of the callable entries held, with their count: a record admitted while
  // another record of its event id is held reads the marks again before its call (the
  // other one may be applied meanwhile).
  std::unordered_map<Uuid, std::uint32_t> ids_held_;
  std::vector<std::uint64_t> ready_;
  std::size_t calling_ = 0;
  std::uint64_t next_ticket_ = 1;
  std::uint64_t generation_counter_ = 0;
  std::unordered_map<TopicPartition, std::uint64_t, TopicPartitionHash> generation_;
  std::unordered_set<TopicPartition, TopicPartitionHash> touched_;  // admitted by admit()
  std::uint32_t apply_failures_ = 0;
  TimePoint apply_not_before_{};
  // The apply transactions' own connection and processor (null: no second connection;
  // applies then commit inline through deps_.processor).
  std::unique_ptr<Store> apply_store_;
  std::unique_ptr<BatchProcessor> applier_;
  std::optional<Applying> applying_;          // prepared and handed to commit_, not yet settled
  std::unique_ptr<BackgroundCommit> commit_;  // last: its job uses the members above
};

}  // namespace idem::detail
