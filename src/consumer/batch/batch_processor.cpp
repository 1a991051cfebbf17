#include "consumer/batch/batch_processor.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "consumer/positions/partition_positions.hpp"
#include "idem/error.hpp"
#include "idem/kafka/kafka_handle.hpp"
#include "stores/store_errors.hpp"

namespace idem::detail {

namespace {

std::string_view as_view(const void* p, std::size_t n) {
  return p == nullptr ? std::string_view() : std::string_view(static_cast<const char*>(p), n);
}

// Nothing a pass decided counts: no letter, no count, no row, every partition decided up
// to its first record only; with `retry_all`, every partition retries from there.
void forget_outcomes(BatchResult& result, bool retry_all) {
  result.dead_letters.clear();
  result.processed = 0;
  result.duplicates = 0;
  result.rows.reset();
  result.rows_written = false;
  for (auto& p : result.partitions) {
    p.decided_end = p.first_offset;
    p.retry_at = retry_all ? std::optional<std::int64_t>(p.first_offset) : std::nullopt;
    p.done_on_commit.clear();
  }
}

}  // namespace

void call_hook(const ConsumerHooks& hooks, HookPoint point) {
  if (!hooks.at) return;
  try {
    hooks.at(point);
  } catch (...) {
    throw HookAbort{std::current_exception()};
  }
}

BatchProcessor::BatchProcessor(const ConsumerContext& context, Store& store)
    : context_(context), config_(context.config), store_(store) {
  if (context_.positions != nullptr) context_.positions->watch(store_);
}

BatchProcessor::~BatchProcessor() {
  rollback();
  if (context_.positions != nullptr) context_.positions->unwatch(store_);
}

void BatchProcessor::admit() {
  // Partition order: group by (topic, partition); a stable sort keeps each partition's
  // records in the order given (offset order).
  std::stable_sort(inputs_.begin(), inputs_.end(), [](const Input& a, const Input& b) {
    const rd_kafka_message_t& x = *a.msg;
    const rd_kafka_message_t& y = *b.msg;
    if (x.rkt != y.rkt) {
      const int c = std::strcmp(rd_kafka_topic_name(x.rkt), rd_kafka_topic_name(y.rkt));
      if (c != 0) return c < 0;
    }
    return x.partition < y.partition;
  });

  for (auto& [topic, handler] : context_.handlers.batch) handler->reset(inputs_.size());
  items_.resize(inputs_.size());
  groups_.clear();
  for (std::size_t i = 0; i < inputs_.size(); ++i) {
    const rd_kafka_message_t& m = *inputs_[i].msg;
    const char* topic = rd_kafka_topic_name(m.rkt);
    Item& item = items_[i];
    if (groups_.empty() || groups_.back().tp.partition != m.partition ||
        groups_.back().tp.topic != topic) {
      const auto it = context_.handlers.batch.find(std::string_view(topic));
      groups_.push_back({{topic, m.partition}, i, i});
      item.handler = it == context_.handlers.batch.end() ? nullptr : it->second.get();
    } else {
      item.handler = items_[i - 1].handler;
    }
    ++groups_.back().end;
    const TopicPartition& tp = groups_.back().tp;
    item.msg = &m;
    item.slot = i;
    item.fresh = false;
    item.staged = inputs_[i].staged;
    if (item.staged != nullptr) {
      // Admitted when it was polled, and its call (if any) made on the event parsed
      // then. Only its letter is looked at again: a record held back behind a retry in
      // its partition comes here again after its letter may have been acknowledged.
      static_cast<Admission&>(item) = *item.staged->admission;
      if (letter_acknowledged(context_, tp, m.offset)) {
        item.valid = false;
        item.skip = true;
        continue;
      }
    } else {
      static_cast<Admission&>(item) =
          admit_record(context_, tp, m, item.handler != nullptr, [&](std::string_view* sink) {
            RecordInfo info = record_info(m);
            info.route_sink = sink;
            return item.handler->parse(i, info, config_.limits);
          });
    }
    if (!item.valid) continue;
    // An effect topic's record had its verdict decided once, when its call was to start
    // (its call, if made, was made on it): that verdict stands whatever the clock says now.
    const StagedCall* call = item.staged != nullptr ? item.staged->call : nullptr;
    if (call != nullptr && call->horizon) {
      judge_horizon(item, *call->horizon, std::string(call->reason));
    } else {
      std::string why;
      const HorizonVerdict verdict = context_.horizon_guard.check(item.event_id, why);
      judge_horizon(item, verdict, std::move(why));
    }
  }
}

BatchResult BatchProcessor::prepare(std::span<const KafkaMessage> batch,
                                    const RetrySchedule& schedule, bool rows_now) {
  inputs_.clear();
  for (const auto& m : batch) inputs_.push_back({m.get(), nullptr});
  return prepare_inputs(schedule, rows_now);
}

BatchResult BatchProcessor::prepare(std::span<const StagedRecord> batch,
                                    const RetrySchedule& schedule, bool rows_now) {
  inputs_.clear();
  for (const StagedRecord& r : batch) inputs_.push_back({r.message, &r});
  return prepare_inputs(schedule, rows_now);
}

void BatchProcessor::before_commit() {
  try {
    call_hook(context_.hooks, HookPoint::BeforeDbCommit);
  } catch (const HookAbort&) {
    rollback();  // as if the process had died before COMMIT
    throw;
  }
}

BatchResult BatchProcessor::prepare_inputs(const RetrySchedule& schedule, bool rows_now) {
  rollback();
  rows_now_ = rows_now && context_.positions != nullptr;
  BatchResult result;
  admit();
  result.partitions.reserve(groups_.size());
  for (const auto& g : groups_) {
    const std::int64_t first = items_[g.begin].msg->offset;
    result.partitions.push_back({g.tp, first, first, std::nullopt, {}});
  }
  run_transaction(result, schedule);
  return result;
}

void BatchProcessor::commit(BatchResult& result) {
  if (!tx_) return;
  const std::unique_ptr<Transaction> tx = std::move(tx_);
  if (context_.positions != nullptr && context_.positions->replaced(store_)) {
    // The connection was replaced since the stored offsets were last read (a failover may
    // have taken back transactions this consumer counts as done): written now, these
    // positions would cover records whose effects are gone. Nothing of the batch commits;
    // the consumer reads the stored offsets again and goes back where the store is behind.
    tx->rollback();
    context_.positions->unverified();
    const Error replaced(ErrorCode::Connection, ErrorSource::Internal,
                         "the store connection was replaced: reading the stored offsets again");
    fail_all(result, replaced);
    return;
  }
  try {
    if (result.rows && !result.rows_written) context_.positions->write(*tx, *result.rows);
    tx->commit();
    result.committed = true;
  } catch (const std::exception& e) {
    fail_all(result, e);
  }
}

void BatchProcessor::rollback() noexcept {
  if (tx_) tx_->rollback();
  tx_.reset();
}

void BatchProcessor::run_transaction(BatchResult& result, const RetrySchedule& schedule) {
  ids_.clear();
  for (const auto& item : items_) {
    if (item.valid) ids_.push_back(item.event_id);
  }
  if (!run_pass(Pass::Optimistic, result, schedule)) {
    forget_outcomes(result, /*retry_all=*/false);
    (void)run_pass(Pass::Isolated, result, schedule);
  }
  if (result.failure.empty()) tally_routes(result);
}

void BatchProcessor::tally_routes(BatchResult& result) const {
  for (const Item& item : items_) {
    if (item.filed_as.empty() || item.fate == Item::Fate::Open) continue;
    auto tally = std::find_if(result.routes.begin(), result.routes.end(),
                              [&](const RouteTally& t) { return t.route == item.filed_as; });
    if (tally == result.routes.end()) {
      result.routes.push_back({item.filed_as});
      tally = result.routes.end() - 1;
    }
    ++(item.fate == Item::Fate::Applied ? tally->applied : tally->duplicates);
  }
}

BatchProcessor::EnteredScopes::EnteredScopes(std::span<const Item> items,
                                             std::span<const Group> groups) {
  // One look per partition, not per record: a partition's records share their topic's
  // handler.
  for (const Group& g : groups) {
    const Item& first = items[g.begin];
    const HandlerScope* scope = first.staged != nullptr    ? first.staged->handler->scope()
                                : first.handler != nullptr ? first.handler->scope()
                                                           : nullptr;
    if (scope == nullptr || std::find(entered_.begin(), entered_.end(), scope) != entered_.end())
      continue;
    if (scope->enter) scope->enter();
    entered_.push_back(scope);
  }
}

BatchProcessor::EnteredScopes::~EnteredScopes() {
  for (auto it = entered_.rbegin(); it != entered_.rend(); ++it) {
    if ((*it)->leave) (*it)->leave();
  }
}

void add_route_counts(const BatchResult& result, ConsumerStats& delta) {
  for (const RouteTally& t : result.routes) {
    RouteStats& counts = delta.route(t.route);
    counts.applied += t.applied;
    counts.duplicates += t.duplicates;
  }
}

bool BatchProcessor::run_pass(Pass pass, BatchResult& result, const RetrySchedule& schedule) {
  const EnteredScopes scopes(items_, groups_);
  try {
    if (!ids_.empty()) {
      tx_ = store_.begin();
      const std::vector<bool> fresh = tx_->mark_processed_batch(ids_, config_.group_id);
      std::size_t k = 0;
      for (auto& item : items_) {
        if (item.valid) item.fresh = fresh.at(k++);
      }
    }
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
      if (!process_group(pass, groups_[gi], tx_.get(), result, schedule, result.partitions[gi])) {
        rollback();
        return false;
      }
    }
    if (tx_ && rows_now_) {
      // Deferred with the handlers' statements: the sync below (or, after the isolated
      // pass, the commit) sends them in the same round trip.
      result.rows = context_.positions->rows_after(result.partitions);
      if (result.rows) context_.positions->write(*tx_, *result.rows);
      result.rows_written = result.rows.has_value();
    }
    if (tx_ && pass == Pass::Optimistic) {
      // The handlers' deferred statements run here; a failure among them belongs to
      // some event of the batch, which only the isolated pass can single out.
      try {
        tx_->sync();
      } catch (const std::exception&) {
        rollback();
        return false;
      }
    }
  } catch (const HookAbort&) {
    rollback();  // as if the process had died here
    throw;
  } catch (const std::exception& e) {
    rollback();
    fail_all(result, e);
  }
  return true;
}

void BatchProcessor::fail_all(BatchResult& result, const std::exception& e) {
  // Only idem's own statements fail here (begin, the marks, savepoints, unmarks, the
  // commit): a handler's errors were caught in process_group, as its event's. One the
  // store refuses for good (a missing table, a missing privilege) fails every later
  // batch alike, so the consumer stops and says why instead of retrying forever; the
  // transaction is rolled back and no offset of this batch is committed.
  stop_if_refused_for_good("idem consumer", e);
  // The transaction is gone (rolled back, or in doubt: redelivery plus the dedup
  // rows decide, never a guess). Nothing of this batch counts; every partition in it
  // pauses and retries from its first record.
  result.failure = e.what();
  result.routes.clear();
  forget_outcomes(result, /*retry_all=*/true);
}

bool BatchProcessor::process_group(Pass pass, const Group& g, Transaction* tx, BatchResult& result,
                                   const RetrySchedule& schedule, PartitionOutcome& out) {
  // tx is only used for valid items, and a transaction exists whenever there is one.
  bool blocked = false;
  bool lettered = false;  // a letter was decided: the stored position stops there
  const auto done = [&](std::int64_t offset) {
    if (!lettered) out.done_on_commit.push_back(offset);
  };
  for (std::size_t i = g.begin; i < g.end; ++i) {
    Item& item = items_[i];
    item.fate = Item::Fate::Open;
    const std::int64_t offset = item.msg->offset;
    if (blocked) {
      // The partition never skips ahead of an unprocessed event: later records wait
      // for the retry, and their marks must not survive this transaction.
      if (item.valid && item.fresh) unmark(*tx, item.event_id);
      continue;
    }
    if (!item.valid) {
      if (item.skip) {
        done(offset);
      } else {
        result.dead_letters.push_back({.original = item.msg,
                                       .error_class = item.error_class,
                                       .message = item.error_message,
                                       .route = item.filed_as});
        lettered = true;
      }
      out.decided_end = offset + 1;
      continue;
    }
    if (!item.fresh) {
      ++result.duplicates;
      item.fate = Item::Fate::Duplicate;
      out.decided_end = offset + 1;
      done(offset);
      continue;
    }

    if (pass == Pass::Optimistic) {
      Outcome outcome = Outcome::Done;
      try {
        outcome = invoke(item, record_info(*item.msg), *tx);
      } catch (const HookAbort&) {
        throw;
      } catch (...) {
        return false;  // the isolated pass classifies the exception
      }
      if (outcome != Outcome::Done) return false;
      ++result.processed;
      item.fate = Item::Fate::Applied;
      out.decided_end = offset + 1;
      done(offset);
      call_hook(context_.hooks, HookPoint::AfterHandler);
      continue;
    }

    Outcome outcome = Outcome::Done;
    std::string error_class;
    std::string error_message;
    bool database_error = false;  // the store failing: blocking retry even with retry topics
    Savepoint sp(*tx);
    try {
      std::string reason;
      RecordInfo info = record_info(*item.msg);
      info.dead_letter_reason_sink = &reason;
      outcome = invoke(item, info, *tx);
      // This event's deferred statements run now, so their failure is this event's.
      if (outcome == Outcome::Done) tx->sync();
      if (outcome == Outcome::DeadLetter) {
        error_class = "handler.dead_letter";
        error_message =
            reason.empty() ? "the handler returned Outcome::DeadLetter" : std::move(reason);
      } else if (outcome == Outcome::Retry && !reason.empty()) {
        error_class = "handler.retry";
        error_message = std::move(reason);
      }
    } catch (const HookAbort&) {
      throw;
    } catch (const Error& e) {
      // A statement no event could make work (a missing table, a revoked privilege) would
      // dead-letter every event after this one: stop instead (fail_all says why).
      const StoreErrorOutcome decided = effect_error_outcome(e);
      if (decided == StoreErrorOutcome::Stop) throw;
      outcome = decided == StoreErrorOutcome::Retry ? Outcome::Retry : Outcome::DeadLetter;
      database_error = e.source() == ErrorSource::Postgres || e.source() == ErrorSource::Sqlite;
      error_class = "handler.exception";
      error_message =
          fmt::format("{} ({}/{})", e.what(), to_string(e.source()), to_string(e.code()));
    } catch (const std::exception& e) {
      outcome = Outcome::DeadLetter;
      error_class = "handler.exception";
      error_message = e.what();
    } catch (...) {
      outcome = Outcome::DeadLetter;
      error_class = "handler.exception";
      error_message = "unknown exception";
    }

    switch (outcome) {
      case Outcome::Done:
        sp.release();
        ++result.processed;
        item.fate = Item::Fate::Applied;
        out.decided_end = offset + 1;
        done(offset);
        break;
      case Outcome::DeadLetter:
        sp.rollback();
        unmark(*tx, item.event_id);
        result.dead_letters.push_back(
            {.original = item.msg,
             .error_class = std::move(error_class),
             .message = std::move(error_message),
             .attempts = context_.retry_topics.previous_attempts(*item.msg) +
                         schedule.attempts(g.tp, offset) + 1,
             .route = item.filed_as});
        out.decided_end = offset + 1;
        lettered = true;
        break;
      case Outcome::Retry:
        sp.rollback();
        unmark(*tx, item.event_id);
        if (config_.retry_topics.enabled() && !database_error) {
          // Non-blocking: the record goes to its next retry topic (or the DLQ) and the
          // partition moves on; the caller pulls it back if the broker does not ack.
          if (error_class.empty()) {
            error_class = "handler.retry";
            error_message = "the handler returned Outcome::Retry";
          }
          const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                  config_.clock->now().time_since_epoch())
                                  .count();
          result.dead_letters.push_back(context_.retry_topics.retry_letter(
              *item.msg, std::move(error_class), std::move(error_message), now_ms));
          result.dead_letters.back().route = item.filed_as;
          out.decided_end = offset + 1;
          lettered = true;
          break;
        }
        out.retry_at = offset;
        blocked = true;
        break;
    }
    call_hook(context_.hooks, HookPoint::AfterHandler);
  }
  return true;
}

Outcome BatchProcessor::invoke(const Item& item, const RecordInfo& info, Transaction& tx) {
  try {
    return invoke_unguarded(item, info, tx);
  } catch (const StopConsumer&) {
    // The handler stops the consumer: as if the process had died in it (nothing of the
    // batch commits), then an orderly close, and run() rethrows it.
    throw HookAbort{std::current_exception()};
  }
}

Outcome BatchProcessor::invoke_unguarded(const Item& item, const RecordInfo& info,
                                         Transaction& tx) {
  if (item.staged == nullptr) return item.handler->invoke(item.slot, info, tx);
  // An effect topic's record: its call decided, the apply phase writes the call's result.
  // A call that asked for a retry, or none finished (the mark found the event new although
  // the read before the call found it marked), retries: the call runs first.
  const StagedCall& call = *item.staged->call;
  if (call.outcome != Outcome::Done) {
    info.dead_letter_reason(std::string(call.reason));
    return call.outcome;
  }
  return item.staged->handler->apply(call.event, call.result, info, tx);
}

void BatchProcessor::unmark(Transaction& tx, const Uuid& event_id) {
  // Inside the batch transaction: an event that the handler dead-lettered (or that must
  // be retried) is then processed, not skipped as a duplicate, when it comes back.
  tx.unmark_processed(event_id, config_.group_id);
}

RecordInfo BatchProcessor::record_info(const rd_kafka_message_t& m) {
  headers_.clear();
  for_each_header(m, [&](const char* name, std::string_view value) {
    headers_.push_back({name, value});
  });
  RecordInfo info;
  info.topic = rd_kafka_topic_name(m.rkt);
  info.partition = m.partition;
  info.offset = m.offset;
  info.key = as_view(m.key, m.key_len);
  info.headers = headers_;
  info.payload = as_view(m.payload, m.len);
  info.consumer_group = config_.group_id;
  return info;
}

}  // namespace idem::detail
