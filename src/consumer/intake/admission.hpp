#pragma once
// What the consumer decides about a record before any transaction, for the handlers'
// batch path and the effect path alike: one set of checks, one parse per delivery. The
// batch path admits a record when it prepares its batch; the effect path admits it when
// it is polled (its call is made on the event parsed then) and hands the admission to
// the processor that applies it, which parses nothing again.
#include <optional>
#include <string>
#include <string_view>

#include "consumer/consumer_context.hpp"
#include "consumer/topic_partition.hpp"
#include "idem/consumer.hpp"
#include "idem/kafka/kafka_handle.hpp"

namespace idem::detail {

/// What admission decided about one record.
struct Admission {
  bool valid = false;  ///< parsed; event_id is its dedup key
  /// Neither run nor dead-lettered: its letter was acknowledged already, or it is past the
  /// dedup horizon under HorizonPolicy::Skip.
  bool skip = false;
  Uuid event_id;
  std::string error_class;    ///< why it is refused (dead-lettered), when neither valid nor skip
  std::string error_message;  ///< also why a stale event is quarantined
  /// The route the parser filed the record under (RecordInfo::count_as), or empty.
  std::string_view filed_as;
};

/// Whether the letter of the record at `offset` was acknowledged already (by this process,
/// or before a restart as the store says): sent again, it would reach the DLQ (or its retry
/// topic) twice, so the record is skipped.
[[nodiscard]] bool letter_acknowledged(const ConsumerContext& context, const TopicPartition& tp,
                                       std::int64_t offset);

/// Admits the record `m` of partition `tp`: its letter acknowledged already (skipped), no
/// route for its topic (`routed` false), too many headers, retry headers idem never
/// writes, then `parse(route_sink)`, the route's parser (which files the record under a
/// route through `route_sink`, RecordInfo::route_sink). The dedup horizon is judged
/// apart (judge_horizon): the effect path judges it when the call is to start.
template <class Parse>
[[nodiscard]] Admission admit_record(const ConsumerContext& context, const TopicPartition& tp,
                                     const rd_kafka_message_t& m, bool routed, Parse&& parse);

/// The refusal of `m` before its route parses it, or nullopt. Part of admit_record().
[[nodiscard]] std::optional<Admission> refusal_before_parse(const ConsumerContext& context,
                                                            const TopicPartition& tp,
                                                            const rd_kafka_message_t& m,
                                                            bool routed);

/// What the route's parser said: the event id, or why the record is refused. Part of
/// admit_record().
void take_parse(Admission& admission, const Validated<Uuid>& parsed);

/// Applies the dedup-horizon verdict to a valid admission (`reason`: why it is stale).
void judge_horizon(Admission& admission, HorizonVerdict verdict, std::string reason);

template <class Parse>
Admission admit_record(const ConsumerContext& context, const TopicPartition& tp,
                       const rd_kafka_message_t& m, bool routed, Parse&& parse) {
  if (auto refused = refusal_before_parse(context, tp, m, routed)) return std::move(*refused);
  Admission admitted;
  take_parse(admitted, parse(&admitted.filed_as));
  return admitted;
}

}  // namespace idem::detail
