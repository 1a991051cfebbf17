#pragma once
// One batch, one database transaction (IDEM-3): admit every record at the boundary,
// mark all event ids with ONE statement, run the handler of each new event in
// partition order, commit. It reports, per partition, which records it decided and where
// a retry holds the partition back (PartitionOutcome); what that means for the offsets is
// PartitionProgress's to decide, once the caller has sent the dead letters.
//
// Two passes. The optimistic pass runs the handlers back to back with no savepoints,
// letting their deferred statements (Transaction::execute_deferred) pile up and go to
// the database together. If every handler returns Done and the deferred statements
// succeed, it commits. Otherwise (a handler returns Retry or DeadLetter, throws, or a
// deferred statement fails) the whole transaction is rolled back and the batch runs
// again in the isolated pass: each new event's handler in its own savepoint, its deferred
// statements synced before the savepoint is released, so a failure undoes that event
// only and the rest of the batch commits. Handlers therefore may run twice for one
// delivery; only the committed pass's effects remain.
//
// prepare(), before_commit() and commit() are separate steps, so that a caller may
// commit on another thread while it goes on (BatchPipeline with pipeline_depth 2 prepares
// the next batch on a second processor; the effect pipeline starts calls); the caller
// runs the AfterDbCommit hook once the commit returned.
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "consumer/consumer_context.hpp"
#include "consumer/effects/staged_record.hpp"
#include "consumer/intake/admission.hpp"
#include "consumer/letters/dead_letter_producer.hpp"
#include "consumer/letters/retry_schedule.hpp"
#include "consumer/positions/partition_progress.hpp"
#include "consumer/topic_partition.hpp"
#include "idem/consumer.hpp"
#include "idem/consumer_offsets.hpp"
#include "idem/kafka/kafka_handle.hpp"

namespace idem::detail {

/// Thrown (only) out of a hook call, wrapping what the hook threw. Deliberately not a
/// std::exception, so the processor's database-failure handlers cannot swallow it.
struct HookAbort {
  std::exception_ptr error;
};

/// Calls hooks.at(point); wraps anything it throws in HookAbort.
void call_hook(const ConsumerHooks& hooks, HookPoint point);

/// The records of one route (RecordInfo::count_as) a batch applied or skipped.
struct RouteTally {
  std::string_view route;
  std::uint64_t applied = 0;
  std::uint64_t duplicates = 0;
};

struct BatchResult {
  std::vector<PartitionOutcome> partitions;
  std::vector<DeadLetter> dead_letters;  ///< in partition order; includes retry-topic sends
  std::uint64_t processed = 0;           ///< effects committed
  std::uint64_t duplicates = 0;
  bool committed = false;          ///< a transaction committed
  std::string failure;             ///< why the whole transaction failed (empty if not)
  std::vector<RouteTally> routes;  ///< per route, when records were filed under one
  /// The rows of idem_consumer_offsets the transaction writes
  /// (PartitionPositions::rows_after); nullopt when positions are not kept in the store.
  /// Written by prepare() (`rows_now`) with the handlers' statements, in their round
  /// trip, or else by commit().
  std::optional<std::vector<StoredOffset>> rows;
  bool rows_written = false;
};

/// Adds what `result` applied and skipped to `delta` (its totals stay the caller's), per
/// route; dead letters count per route once acknowledged (DeadLetter::route).
void add_route_counts(const BatchResult& result, ConsumerStats& delta);

class BatchProcessor {
 public:
  /// `context` and `store` must outlive the processor. Two processors may share a
  /// context (a batch handler holds the parsed events of the batch being prepared, which commit()
  /// does not read), not a store.
  BatchProcessor(const ConsumerContext& context, Store& store);
  ~BatchProcessor();
  BatchProcessor(const BatchProcessor&) = delete;
  BatchProcessor& operator=(const BatchProcessor&) = delete;

  /// Prepares `batch` (records of any partitions, each partition's in offset order):
  /// admits, marks and runs the handlers, and leaves the transaction open (decided:
  /// every outcome in the result stands if it commits). `schedule` supplies earlier
  /// failed attempts (for `idem.attempts`). Transient database failures never escape: a
  /// failure of the whole transaction is in the result (`failure`, every partition's
  /// retry_at) and leaves nothing open.
  /// \throws HookAbort when a hook throws (the transaction is rolled back);
  ///   stopping_error (store_errors.hpp) when the store refuses one of idem's own
  ///   statements for good (rolled back too; the caller commits no offset of the batch).
  /// `rows_now`: no batch of the consumer is between its prepare and its settling, so
  /// where its partitions will stand is known now, and the rows go with the handlers'
  /// statements.
  [[nodiscard]] BatchResult prepare(std::span<const KafkaMessage> batch,
                                    const RetrySchedule& schedule, bool rows_now = false);
  /// The same over the effect path's records, admitted when they were polled (parsed
  /// then, never again here) and with their calls ended: each runs its handler's apply
  /// phase on its call's result. They must stay alive until the result's dead letters
  /// are sent.
  [[nodiscard]] BatchResult prepare(std::span<const StagedRecord> batch,
                                    const RetrySchedule& schedule, bool rows_now = false);
  /// True between a prepare() that left a transaction open and commit() or rollback().
  [[nodiscard]] bool open() const noexcept { return tx_ != nullptr; }
  /// The BeforeDbCommit hook, on the caller's thread, before commit(). \throws HookAbort
  /// when the hook throws (the open transaction is rolled back first).
  void before_commit();
  /// Commits what prepare() left open (nothing to do when nothing is), with
  /// `result.rows` written in the same transaction if prepare() did not write them, and
  /// records in `result` whether it did; a failed commit makes it a failure of the whole
  /// batch. On a connection replaced since the stored offsets were read
  /// (PartitionPositions::replaced) nothing commits and the positions are told
  /// (unverified()). Calls no hook, so any thread may call it while the caller's thread
  /// goes on. \throws stopping_error as prepare() does.
  void commit(BatchResult& result);
  /// Rolls back what prepare() left open (the batch before it failed: this one must not
  /// commit ahead of its retry).
  void rollback() noexcept;

 private:
  // A record's admission and its place in the batch.
  struct Item : Admission {
    const rd_kafka_message_t* msg = nullptr;
    TopicHandler* handler = nullptr;       // a handler's record: parsed into `slot`
    const StagedRecord* staged = nullptr;  // an effect topic's record: applies its call
    std::size_t slot = 0;
    bool fresh = false;  // first time this event is marked for the group
    enum class Fate { Open, Applied, Duplicate } fate = Fate::Open;  // in the last pass
  };
  // One record to prepare: a polled record for its handler, or an effect record.
  struct Input {
    const rd_kafka_message_t* msg = nullptr;
    const StagedRecord* staged = nullptr;
  };
  struct Group {  // one partition's records in [begin, end) of items_
    TopicPartition tp;
    std::size_t begin = 0;
    std::size_t end = 0;
  };

  enum class Pass {
    Optimistic,  // no savepoints; any trouble abandons the pass
    Isolated,    // one savepoint per new event
  };

  [[nodiscard]] BatchResult prepare_inputs(const RetrySchedule& schedule, bool rows_now);
  /// Orders inputs_ by partition and admits each record (a handler's is parsed here).
  void admit();
  /// Runs the item's handler, or the apply phase of its call. \throws HookAbort for a
  /// handler's StopConsumer.
  Outcome invoke(const Item& item, const RecordInfo& info, Transaction& tx);
  Outcome invoke_unguarded(const Item& item, const RecordInfo& info, Transaction& tx);
  /// The scopes (HandlerScope) of the handlers of a pass's records, entered for the pass
  /// and left in reverse order when it ends, however it ends.
  class EnteredScopes {
   public:
    EnteredScopes(std::span<const Item> items, std::span<const Group> groups);
    ~EnteredScopes();
    EnteredScopes(const EnteredScopes&) = delete;
    EnteredScopes& operator=(const EnteredScopes&) = delete;

   private:
    std::vector<const HandlerScope*> entered_;
  };
  void run_transaction(BatchResult& result, const RetrySchedule& schedule);
  /// Runs one pass, leaving its transaction in tx_. Returns false when the optimistic
  /// pass gave up (its transaction is rolled back and `result` must be reset); true when
  /// the batch is decided.
  bool run_pass(Pass pass, BatchResult& result, const RetrySchedule& schedule);
  /// The whole transaction failed with `e`: nothing of the batch counts.
  void fail_all(BatchResult& result, const std::exception& e);
  /// Returns false when the optimistic pass must give up.
  bool process_group(Pass pass, const Group& g, Transaction* tx, BatchResult& result,
                     const RetrySchedule& schedule, PartitionOutcome& out);
  void unmark(Transaction& tx, const Uuid& event_id);
  /// result.routes from the items' fates (only when some record was filed under a route).
  void tally_routes(BatchResult& result) const;
  RecordInfo record_info(const rd_kafka_message_t& m);

  const ConsumerContext& context_;
  const ConsumerConfig& config_;  // context_.config
  Store& store_;
  std::unique_ptr<Transaction> tx_;  // left open by prepare()
  bool rows_now_ = false;            // of the prepare() running
  // Reused from batch to batch.
  std::vector<Item> items_;
  std::vector<Group> groups_;
  std::vector<Uuid> ids_;
  std::vector<RecordHeader> headers_;
  std::vector<Input> inputs_;
};

}  // namespace idem::detail
