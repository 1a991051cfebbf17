#pragma once
// What the effect path hands the processor that applies its records: each record with its
// admission (made when it was polled: the processor parses nothing again) and how its
// call ended. Passed as arguments, so the topic handlers hold no state of the effect path.
#include <optional>
#include <string_view>

#include "consumer/intake/admission.hpp"
#include "idem/consumer.hpp"
#include "idem/kafka/kafka_handle.hpp"

namespace idem::detail {

/// How the call of one record ended, as its apply phase needs it.
struct StagedCall {
  const void* event = nullptr;   ///< the event parse_owned() made; null when invalid
  const void* result = nullptr;  ///< null unless outcome is Done
  /// Retry until a call completed (the apply asks for the call first), DeadLetter when
  /// no call can be made (its reason says why).
  Outcome outcome = Outcome::Retry;
  std::string_view reason;  ///< also why the event is stale, under HorizonVerdict::Quarantine
  /// The horizon verdict decided once, before the call: the apply follows it instead of
  /// judging the age again. nullopt: no call decision was reached, the apply judges.
  std::optional<HorizonVerdict> horizon;
};

/// A record of an effect topic ready to be applied. The pointers stay valid until the
/// processor's result is settled.
struct StagedRecord {
  const rd_kafka_message_t* message = nullptr;
  EffectTopicHandler* handler = nullptr;
  const Admission* admission = nullptr;
  const StagedCall* call = nullptr;
};

}  // namespace idem::detail
