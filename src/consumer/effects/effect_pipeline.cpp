#include "consumer/effects/effect_pipeline.hpp"

#include <algorithm>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "stores/store_errors.hpp"

namespace idem::detail {

EffectPipeline::EffectPipeline(Deps deps)
    : deps_(std::move(deps)),
      config_(deps_.context.config),
      completions_(std::make_shared<CompletionQueue>()),
      scheduler_(config_.max_in_flight),
      windows_(deps_.gate, deps_.positions.progress(), config_.max_buffered_per_partition),
      key_backoff_(config_.retry),
      apply_backoff_(config_.retry) {
  completions_->set_wake([&gate = deps_.gate] { gate.wake(); });
  try {
    apply_store_ = deps_.store.connect_again();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::InvalidArgument) throw;
    return;  // a private in-memory database: applies commit inline on the first connection
  }
  applier_ = std::make_unique<BatchProcessor>(deps_.context, *apply_store_);
  commit_ = std::make_unique<BackgroundCommit>([queue = completions_] { queue->poke(); });
}

EffectPipeline::~EffectPipeline() {
  if (commit_) commit_->wait_quietly();  // its connection is in use until then
  if (applier_) applier_->rollback();
  completions_->close();
}

void EffectPipeline::admit(std::vector<KafkaMessage>& batch, ConsumerStats& delta) {
  std::size_t kept = 0;
  std::vector<Entry*> to_read;  // callable, and no other record of its event id is held
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto& handlers = deps_.context.handlers.effects;
    const auto it = handlers.find(std::string_view(rd_kafka_topic_name(batch[i]->rkt)));
    if (it == handlers.end()) {
      if (kept != i) batch[kept] = std::move(batch[i]);
      ++kept;
      continue;
    }
    ++delta.delivered;
    if (Entry* e = admit_one(std::move(batch[i]), *it->second)) to_read.push_back(e);
  }
  batch.resize(kept);
  for (const TopicPartition& tp : touched_) windows_.pause_if_full(tp);
  touched_.clear();
  // One read for the whole polled batch instead of one per turn before its calls. The
  // answer stays true until the call unless something marks the event meanwhile: this
  // pipeline applying another record of the same id (those stay AtCall), or another
  // process applying a copy of the event from another partition, which races with any
  // read before a call (the provider's idempotency key covers that one).
  try {
    read_marks(to_read);
  } catch (const std::exception& ex) {
    stop_if_refused_for_good("idem consumer", ex);
    // They stay AtCall: read again (and retried) before their calls.
  }
}

void EffectPipeline::read_marks(std::span<Entry* const> entries) {
  if (entries.empty()) return;
  std::vector<Uuid> ids;
  ids.reserve(entries.size());
  for (const Entry* e : entries) ids.push_back(e->admission.event_id);
  auto tx = deps_.store.begin_read();
  const std::vector<bool> marked = tx->processed_among(ids, config_.group_id);
  tx->rollback();
  for (std::size_t i = 0; i < entries.size(); ++i)
    entries[i]->mark_check = marked.at(i) ? MarkCheck::Marked : MarkCheck::Fresh;
}

void EffectPipeline::erase_entry(std::unordered_map<std::uint64_t, Entry>::iterator it) {
  if (it->second.scheduled) {
    const auto held = ids_held_.find(it->second.admission.event_id);
    if (held != ids_held_.end() && --held->second == 0) ids_held_.erase(held);
  }
  entries_.erase(it);
}

std::string EffectPipeline::default_key(const EffectRecord& r) const {
  // Kafka orders per partition and a key stays in one partition, so the key is scoped
  // by topic; records without a key keep their partition's order. A retry topic's
  // record is keyed by its source topic: its call never overlaps one of a later event
  // of its key (which may overtake it: the trade-off of retry topics).
  const RetryTopicMap::Level* level = deps_.context.retry_topics.find(r.topic);
  const std::string_view topic = level != nullptr ? std::string_view(level->source) : r.topic;
  if (r.has_key) return fmt::format("{}\n{}", topic, r.key);
  return fmt::format("{}\n\x01{}", r.topic, r.info.partition);
}

EffectPipeline::Entry* EffectPipeline::admit_one(KafkaMessage m, EffectTopicHandler& handler) {
  TopicPartition tp{rd_kafka_topic_name(m->rkt), m->partition};
  // Fetched again after a seek: it comes back in order.
  if (!windows_.admit(tp, m->offset)) return nullptr;
  touched_.insert(tp);
  const std::uint64_t ticket = next_ticket_++;
  Entry e;
  e.record = std::make_shared<EffectRecord>(*m, config_.group_id);
  e.message = std::move(m);
  e.handler = &handler;
  e.generation = generation_[tp];
  e.tp = std::move(tp);
  // One admission, the batch path's, with the parse the call is made on: an invalid
  // record makes no call (the processor dead-letters or skips it as admitted here). Whether an
  // event is past the dedup horizon is decided when its call is to start (judge_horizon),
  // not here: a record that waits behind its key may cross the horizon meanwhile.
  e.admission = admit_record(deps_.context, e.tp, *e.message, true, [&](std::string_view* sink) {
    RecordInfo info = e.record->info;
    info.route_sink = sink;
    EffectTopicHandler::Owned owned = handler.parse_owned(info, config_.limits);
    e.record->event = std::move(owned.event);
    return owned.event_id;
  });
  if (e.admission.valid) {
    try {
      std::optional<std::string> key = handler.ordering_key(e.record->event.get(), e.record->info);
      e.key = key ? std::move(*key) : default_key(*e.record);
      e.scheduled = true;
    } catch (const std::exception& ex) {
      e.reason = fmt::format("ordering_key threw: {}", ex.what());
    }
  }
  if (e.scheduled) {
    scheduler_.push(e.key, ticket);
  } else {
    e.state = State::Ready;
    ready_.push_back(ticket);
  }
  Entry& held = entries_.emplace(ticket, std::move(e)).first->second;
  // Staged after the move: the reason's view must point into the entry in the table.
  if (!held.reason.empty())
    held.staged = {held.record->event.get(), nullptr, Outcome::DeadLetter, held.reason,
                   std::nullopt};
  if (!held.scheduled) return nullptr;
  // Counted down in erase_entry. A copy already held may be applied before this one's
  // call: this one is then read again at its call (AtCall), not now.
  return ids_held_[held.admission.event_id]++ == 0 ? &held : nullptr;
}

void EffectPipeline::turn(ConsumerStats& delta, bool start) {
  const TimePoint now = deps_.context.steady_clock.now();
  take_completions(delta, now);
  if (start) start_calls(delta, now);
  apply_ready(delta, now);
  windows_.resume_drained();
}

void EffectPipeline::settle(ConsumerStats& delta) {
  if (applying_) settle_apply(delta, deps_.context.steady_clock.now());
  windows_.resume_drained();
}

void EffectPipeline::take_completions(ConsumerStats& delta, TimePoint now) {
  for (CallDone& c : completions_->drain()) {
    const auto it = entries_.find(c.ticket);
    if (it == entries_.end() || it->second.state != State::Calling) continue;
    Entry& e = it->second;
    --calling_;
    if (e.generation != generation_[e.tp]) {
      // Its partition was revoked while the call ran: the new owner decides; the call's
      // result is never applied here. The key was kept busy until now so that no other
      // call of it overlapped this one.
      scheduler_.finish(e.key);
      erase_entry(it);
      continue;
    }
    if (c.outcome == Outcome::Retry) {
      ++delta.call_retries;
      if (!config_.retry_topics.enabled()) {
        retry_key(e, now, c.reason.empty() ? "the call phase asked for a retry" : c.reason);
        continue;
      }
      // Applied as a Retry: the processor sends the record to its next retry topic (or
      // the DLQ after the last attempt), and the key moves on.
    }
    // The call is over: its slot goes to the next call; the key stays busy until the
    // result is applied (finish) or retried.
    if (e.scheduled) scheduler_.call_returned(e.key);
    e.state = State::Ready;
    e.result = std::move(c.result);
    e.reason = std::move(c.reason);
    e.staged = {e.record->event.get(), e.result.get(), c.outcome, e.reason, e.horizon};
    ready_.push_back(c.ticket);
  }
}

bool EffectPipeline::judge_horizon(Entry& e) {
  if (!e.horizon) {
    std::string why;
    e.horizon = deps_.context.horizon_guard.check(e.admission.event_id, why);
    if (*e.horizon == HorizonVerdict::Quarantine) e.reason = std::move(why);
  }
  return *e.horizon == HorizonVerdict::Fresh;
}

void EffectPipeline::start_calls(ConsumerStats& delta, TimePoint now) {
  std::vector<std::uint64_t> tickets = scheduler_.take_ready(now);
  if (tickets.empty()) return;
  // Past the horizon at its turn (its dedup mark may be gone): no call; the apply
  // quarantines or skips it as decided here, once.
  std::erase_if(tickets, [&](std::uint64_t t) {
    Entry& e = entries_.at(t);
    if (judge_horizon(e)) return false;
    scheduler_.call_returned(e.key);  // no call: its slot is free at once
    e.state = State::Ready;
    e.staged = {e.record->event.get(), nullptr, Outcome::DeadLetter, e.reason, e.horizon};
    ready_.push_back(t);
    return true;
  });
  // Those whose admission read may be stale are read again, all in one look. The mark
  // in the apply transaction stays the only arbiter; these reads only save the calls.
  std::vector<Entry*> asked;
  for (const auto t : tickets) {
    Entry& e = entries_.at(t);
    if (e.mark_check == MarkCheck::AtCall) asked.push_back(&e);
  }
  try {
    read_marks(asked);
  } catch (const std::exception& ex) {
    // idem's own read: refused for good, it would hold every key back forever.
    stop_if_refused_for_good("idem consumer", ex);
    for (Entry* e : asked) retry_key(*e, now, ex.what());
  }
  for (const auto t : tickets) {
    Entry& e = entries_.at(t);
    if (e.mark_check == MarkCheck::AtCall) continue;  // its read failed: retry_key above
    if (e.mark_check == MarkCheck::Marked) {
      scheduler_.call_returned(e.key);  // no call: its slot is free at once
      e.state = State::Ready;           // the processor's mark finds it and counts a duplicate
      ready_.push_back(t);
      continue;
    }
    ++delta.calls;
    start_call(t, e);
  }
}

void EffectPipeline::start_call(std::uint64_t ticket, Entry& e) {
  e.state = State::Calling;
  ++calling_;
  auto call = std::make_shared<CallTicket>(completions_, ticket, e.record);
  try {
    e.handler->start_call(e.record->event.get(), e.record->info, call);
  } catch (const Error& ex) {
    call->complete(ex.transient() ? Outcome::Retry : Outcome::DeadLetter, nullptr,
                   fmt::format("the call phase threw: {}", ex.what()));
  } catch (const std::exception& ex) {
    call->complete(Outcome::DeadLetter, nullptr,
                   fmt::format("the call phase threw: {}", ex.what()));
  } catch (...) {
    call->complete(Outcome::DeadLetter, nullptr, "the call phase threw an unknown exception");
  }
}

void EffectPipeline::retry_key(Entry& e, TimePoint now, std::string_view why) {
  ++e.attempts;
  const auto delay = key_backoff_.delay(e.attempts);
  scheduler_.retry_at(e.key, now + delay);
  e.state = State::Queued;
  e.mark_check = MarkCheck::AtCall;  // a copy may have been applied meanwhile
  e.staged = {};
  e.result.reset();
  deps_.context.log(
      fmt::format("idem consumer: retrying the call of topic={} partition={} offset={} "
                  "event_id={} (attempt {}) in {} ms: {}",
                  e.tp.topic, e.tp.partition, e.message->offset, e.admission.event_id.to_string(),
                  e.attempts + 1, delay.count(), why));
}

void EffectPipeline::apply_ready(ConsumerStats& delta, TimePoint now) {
  if (applying_) {
    if (!commit_->done().load()) return;  // one apply transaction at a time
    settle_apply(delta, now);
  }
  if (ready_.empty() || now < apply_not_before_) return;
  // The processor keeps each partition's records in the order given: offset order.
  std::sort(ready_.begin(), ready_.end(), [&](std::uint64_t a, std::uint64_t b) {
    const Entry& x = entries_.at(a);
    const Entry& y = entries_.at(b);
    return std::tie(x.tp.topic, x.tp.partition, x.message->offset) <
           std::tie(y.tp.topic, y.tp.partition, y.message->offset);
  });
  // One record of an event per transaction. Two copies of one event (other partitions,
  // other keys) in one transaction are both marked there: the first takes the mark and
  // the second is classed a duplicate before the first's outcome is known, so a first
  // copy whose call said dead letter would be unmarked while the second's successful call
  // was never applied. A later copy waits for the next transaction, where the mark of
  // the first decides (a duplicate if it was applied, applied if it was not).
  std::vector<std::uint64_t> tickets;
  std::vector<std::uint64_t> later;
  std::unordered_set<Uuid> events;
  for (const auto t : ready_) {
    const Entry& e = entries_.at(t);
    const bool twin = e.record->event != nullptr && !events.insert(e.admission.event_id).second;
    (tickets.size() < config_.batch_size && !twin ? tickets : later).push_back(t);
  }
  ready_ = std::move(later);
  std::vector<StagedRecord> records;
  records.reserve(tickets.size());
  for (const auto t : tickets) {
    Entry& e = entries_.at(t);
    e.staged.horizon = e.horizon;
    records.push_back({e.message.get(), e.handler, &e.admission, &e.staged});
  }

  // Without a second connection (applier_ null) the COMMIT runs here, on the first.
  BatchProcessor& processor = applier_ ? *applier_ : deps_.processor;
  Applying a{tickets, {}, deps_.context.steady_clock.now(), {}};
  // The apply before was settled: where this one leaves its partitions is known now.
  a.result = processor.prepare(records, no_schedule_, /*rows_now=*/true);
  if (processor.open()) processor.before_commit();  // HookAbort: nothing is in flight
  applying_ = std::move(a);
  const auto commit = [this, &processor] {
    processor.commit(applying_->result);  // nothing to do when the transaction failed
    applying_->committed = deps_.context.steady_clock.now();
  };
  if (commit_ && processor.open()) return commit_->start(commit);
  commit();
  settle_apply(delta, now);
}

void EffectPipeline::settle_apply(ConsumerStats& delta, TimePoint now) {
  try {
    if (commit_) commit_->wait();
  } catch (...) {
    applying_.reset();  // stopping_error: nothing of it is settled, no offset moves
    throw;
  }
  Applying a = std::move(*applying_);
  applying_.reset();
  if (a.result.committed) call_hook(deps_.context.hooks, HookPoint::AfterDbCommit);
  finish_apply(delta, a, now);
}

void EffectPipeline::finish_apply(ConsumerStats& delta, Applying& a, TimePoint now) {
  BatchResult& r = a.result;
  const std::vector<PartitionOffset> refused = deps_.send_dead_letters(r, delta);
  if (deps_.context.hooks.on_batch)
    deps_.context.hooks.on_batch({a.tickets.size(), r.committed, a.committed - a.started});
  delta.processed += r.processed;
  delta.duplicates += r.duplicates;
  add_route_counts(r, delta);
  if (r.committed) ++delta.transactions;
  if (r.committed && r.rows) deps_.positions.committed(*r.rows);
  if (!r.failure.empty()) {
    // The transaction failed as a whole (the store is down): every result waits, and no
    // call is repeated for it.
    const auto delay = apply_backoff_.delay(++apply_failures_);
    apply_not_before_ = now + delay;
    deps_.context.log(
        fmt::format("idem consumer: applying {} effect(s) failed, retrying in {} ms: {}",
                    a.tickets.size(), delay.count(), r.failure));
    ready_.insert(ready_.end(), a.tickets.begin(), a.tickets.end());
    return;
  }
  apply_failures_ = 0;
  settle_applied(r, refused, a.tickets, now);
}

void EffectPipeline::settle_applied(const BatchResult& r, std::span<const PartitionOffset> refused,
                                    std::span<const std::uint64_t> tickets, TimePoint now) {
  // Where each partition stops: its retry, or a dead letter the broker did not acknowledge
  // (applied again, so a bad message is never lost).
  std::unordered_map<TopicPartition, std::optional<std::int64_t>, TopicPartitionHash> retry_at;
  for (const auto& p : r.partitions) retry_at[p.tp] = p.retry_at;
  for (const auto& letter : refused) {
    auto& stop = retry_at[letter.tp];
    stop = std::min(stop.value_or(letter.offset), letter.offset);
  }
  for (const auto t : tickets) {
    Entry& e = entries_.at(t);
    const std::int64_t offset = e.message->offset;
    const std::optional<std::int64_t> stop = retry_at[e.tp];
    if (!stop || offset < *stop) {
      deps_.positions.progress().done(e.tp, offset);
      finish(t);
      continue;
    }
    if (offset == *stop && e.scheduled && e.staged.outcome != Outcome::DeadLetter) {
      // The apply phase (or a mark that found the event new after the check said marked)
      // asked for a retry: the call runs again after the key's backoff, with the same key.
      retry_key(e, now, "the apply phase asked for a retry");
      continue;
    }
    if (offset == *stop) {  // a dead letter the broker did not acknowledge
      apply_not_before_ = now + apply_backoff_.delay(++apply_failures_);
    }
    ready_.push_back(t);  // held back behind the retry in its partition: applied again
  }
}

void EffectPipeline::finish(std::uint64_t ticket) {
  const auto it = entries_.find(ticket);
  if (it == entries_.end()) return;
  if (it->second.scheduled) scheduler_.finish(it->second.key);
  erase_entry(it);
}

std::optional<EffectPipeline::TimePoint> EffectPipeline::next_work(TimePoint now) const {
  std::optional<TimePoint> at;
  const auto earliest = [&](TimePoint t) { at = at ? std::min(*at, t) : t; };
  if (applying_) {
    if (commit_->done().load()) earliest(now);  // settle it; the next apply may follow
  } else if (!ready_.empty()) {
    earliest(std::max(now, apply_not_before_));
  }
  if (scheduler_.runnable()) earliest(now);
  if (const auto retry = scheduler_.next_retry()) earliest(*retry);
  return at;
}

void EffectPipeline::on_revoked(std::span<const TopicPartition> partitions) {
  const std::unordered_set<TopicPartition, TopicPartitionHash> gone(partitions.begin(),
                                                                    partitions.end());
  for (const auto& tp : partitions) {
    generation_[tp] = ++generation_counter_;
    touched_.erase(tp);
  }
  std::unordered_set<std::uint64_t> queued;
  for (const auto& [ticket, e] : entries_) {
    if (gone.contains(e.tp) && e.state == State::Queued && e.scheduled) queued.insert(ticket);
  }
  scheduler_.remove_queued([&](std::uint64_t t) { return queued.contains(t); });
  // Calls in flight stay (their generation is now stale) until they complete.
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    if (!gone.contains(e.tp) || e.state == State::Calling) {
      ++it;
      continue;
    }
    if (e.state == State::Ready && e.scheduled) scheduler_.finish(e.key);
    erase_entry(it++);
  }
  std::erase_if(ready_, [&](std::uint64_t t) { return !entries_.contains(t); });
  windows_.forget(partitions);
}

}  // namespace idem::detail
