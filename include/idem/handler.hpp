#pragma once
/// \file
/// What a consumer's handler works with: the record that carried its event (RecordInfo),
/// what it decides (Outcome), the handler and parser types, and the type-erased handler the
/// consumer keeps per topic. Included by idem/consumer.hpp.

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/events/event_codec.hpp"
#include "idem/events/validation.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"

namespace idem {

/// What a handler decided about one event.
enum class Outcome {
  Done,        ///< the effect is in the transaction; commit it with the batch
  Retry,       ///< transient trouble: undo, pause the partition, try again after a backoff
  DeadLetter,  ///< this event can never succeed: undo, unmark, send it to the DLQ
};

/// One Kafka header as the handler sees it. A null header value reads as empty.
struct RecordHeader {
  std::string_view name;
  std::string_view value;
};

/// What a handler sees of the Kafka record that carried its event. Every view is
/// valid only during the handler call.
struct RecordInfo {
  std::string_view topic;
  std::int32_t partition = 0;
  std::int64_t offset = 0;
  std::string_view key;
  std::span<const RecordHeader> headers;  ///< in record order, including `traceparent`
  std::string_view payload;
  std::string_view consumer_group;
  /// Where the consumer collects why a handler returns Outcome::DeadLetter (or Retry);
  /// null when nobody collects it (a handler called outside a Consumer). Use
  /// dead_letter_reason().
  std::string* dead_letter_reason_sink = nullptr;

  /// Says why the handler is about to return Outcome::DeadLetter: the text becomes the
  /// dead letter's `idem.error.message` instead of a generic one. Before Outcome::Retry
  /// with retry topics on, it becomes the retry record's (and its last dead letter's).
  void dead_letter_reason(std::string reason) const {
    if (dead_letter_reason_sink != nullptr) *dead_letter_reason_sink = std::move(reason);
  }

  /// Where the consumer collects the name a parser files the record under; null when
  /// nobody collects it. Use count_as().
  std::string_view* route_sink = nullptr;

  /// Files this record under `route` in the consumer's counts per route
  /// (ConsumerStats::routes: applied, duplicates, dead letters by reason), for parsers
  /// that tell several kinds of events apart on one topic (sinks declared in a file name
  /// the route of the event's type). Called by a RecordParser, also for a record it
  /// refuses once it knows the route. `route` must outlive the consumer's run(); records
  /// never filed are counted only in the consumer's totals.
  void count_as(std::string_view route) const noexcept {
    if (route_sink != nullptr) *route_sink = route;
  }

  /// The value of the first header named `name`, or nullopt.
  [[nodiscard]] std::optional<std::string_view> header(std::string_view name) const noexcept {
    for (const auto& h : headers) {
      if (h.name == name) return h.value;
    }
    return std::nullopt;
  }
};

/// A typed handler: gets the validated event, its record, and the batch's transaction.
/// It adds its effects through `tx` only; it must not commit or roll back. Effects whose
/// result it does not need should go through `tx.execute_deferred` (one round trip per
/// batch on PostgreSQL instead of one per statement).
/// A handler may be called more than once for one delivery: a batch runs first without
/// a savepoint per event, and if any handler does not return Done, throws, or has a
/// deferred statement fail, the whole transaction is rolled back and the batch runs
/// again with each event in its own savepoint. Only the effects of the final run commit;
/// side effects outside `tx` must tolerate the repeat (as they must for retries).
template <class Event>
using Handler = std::function<Outcome(const Event&, const RecordInfo&, Transaction&)>;

/// A parser with state, for events whose format is known only at run time (sinks declared
/// in a configuration file, CloudEvents whose id travels in a header): it reads the whole
/// record (payload and headers) where EventCodec<Event>::parse reads the payload alone.
/// Same contract as EventCodec<Event>::parse: never throws, rejects a non-v7 id, and
/// every way a record can be wrong is a ValidationError. The views in `record` are valid
/// during the call only. Called on the run() thread. EventCodec<Event>::event_id still
/// gives the dedup key of a parsed event.
template <class Event>
using RecordParser = std::function<Validated<Event>(const RecordInfo& record, const ParseLimits&)>;

/// Brackets the calls of one topic handler in one pass over a batch, on the run() thread:
/// `enter` before its first call, `leave` after its last (also when a call throws). A
/// binding to a language with a global interpreter lock (Python's GIL) takes the lock once
/// per batch here instead of once per event. A batch whose optimistic pass gave up runs
/// its handlers again (see Handler), so a batch may enter and leave twice. Either
/// function may be empty.
struct HandlerScope {
  std::function<void()> enter;
  std::function<void()> leave;
};

/// Thrown by a handler (or an effect's apply phase) to stop the consumer at once: the
/// batch's transaction rolls back, so nothing of the batch in progress commits; the
/// offsets of the batches committed before it are committed, the consumer leaves its
/// group, and run() rethrows this exception. Deliberately not a std::exception, so that
/// nothing which turns a handler's errors into retries or dead letters takes it for one.
/// (The Python binding throws it for a KeyboardInterrupt raised in a handler.)
struct StopConsumer {
  std::string reason;
};

namespace detail {

/// A topic's handler, type-erased: a reusable buffer of parsed events plus the handler.
/// Parsed events live in slots reused from batch to batch, so routing a record costs
/// no heap allocation beyond what the event type itself allocates.
class TopicHandler {
 public:
  TopicHandler() = default;
  TopicHandler(const TopicHandler&) = delete;
  TopicHandler& operator=(const TopicHandler&) = delete;
  virtual ~TopicHandler() = default;

  /// Makes slots 0..n-1 available (keeps capacity).
  virtual void reset(std::size_t n) = 0;
  /// Validates the record into slot `slot`; returns its event id or why it is invalid.
  [[nodiscard]] virtual Validated<Uuid> parse(std::size_t slot, const RecordInfo& record,
                                              const ParseLimits& limits) = 0;
  /// Runs the handler on slot `slot` (which parse() filled).
  virtual Outcome invoke(std::size_t slot, const RecordInfo& record, Transaction& tx) = 0;
  /// What brackets the handler's calls of one pass, or null.
  [[nodiscard]] virtual const HandlerScope* scope() const noexcept { return nullptr; }
};

/// EventCodec<Event>::parse, or `parser` when one is given.
template <class Event>
Validated<Event> parse_record(const RecordParser<Event>& parser, const RecordInfo& record,
                              const ParseLimits& limits) {
  if (parser) return parser(record, limits);
  if constexpr (requires { EventCodec<Event>::parse(record.payload, limits); }) {
    return EventCodec<Event>::parse(record.payload, limits);
  } else {
    return ValidationError{{}, ValidationReason::InvalidJson, "no parser for this topic"};
  }
}

/// The parsed events of one batch, in slots reused from batch to batch, so routing a
/// record costs no heap allocation beyond what the event type itself allocates. Filled
/// by the topic's parser (EventCodec<Event>::parse when none is given).
template <class Event>
class EventSlots {
 public:
  explicit EventSlots(RecordParser<Event> parser) : parser_(std::move(parser)) {}

  /// Makes slots 0..n-1 available (keeps capacity).
  void reset(std::size_t n) {
    for (auto& s : slots_) s.reset();
    if (slots_.size() < n) slots_.resize(n);
  }
  /// Parses the record into slot `slot`; returns its event id or why it is invalid.
  Validated<Uuid> parse(std::size_t slot, const RecordInfo& record, const ParseLimits& limits) {
    Validated<Event> parsed = parse_record(parser_, record, limits);
    if (!parsed.ok()) return parsed.error();
    return EventCodec<Event>::event_id(slots_[slot].emplace(std::move(parsed).value()));
  }
  /// The event parse() put in slot `slot`.
  [[nodiscard]] const Event& operator[](std::size_t slot) const { return *slots_[slot]; }

 private:
  RecordParser<Event> parser_;
  std::vector<std::optional<Event>> slots_;
};

template <class Event>
class TypedTopicHandler final : public TopicHandler {
 public:
  explicit TypedTopicHandler(Handler<Event> handler, RecordParser<Event> parser = {},
                             HandlerScope scope = {})
      : handler_(std::move(handler)), events_(std::move(parser)), scope_(std::move(scope)) {}

  void reset(std::size_t n) override { events_.reset(n); }
  Validated<Uuid> parse(std::size_t slot, const RecordInfo& record,
                        const ParseLimits& limits) override {
    return events_.parse(slot, record, limits);
  }
  Outcome invoke(std::size_t slot, const RecordInfo& record, Transaction& tx) override {
    return handler_(events_[slot], record, tx);
  }
  [[nodiscard]] const HandlerScope* scope() const noexcept override {
    return scope_.enter || scope_.leave ? &scope_ : nullptr;
  }

 private:
  Handler<Event> handler_;
  EventSlots<Event> events_;
  HandlerScope scope_;
};

}  // namespace detail

}  // namespace idem
