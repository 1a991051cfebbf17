#pragma once
/// \file
/// EventCodec<Event>: how the consumer turns a Kafka payload into a typed, validated
/// event and finds its dedup key (IDEM-1, EVT-4). Specialize it for each event type a
/// handler is registered for (Consumer::on<Event>).

#include <string_view>

#include "idem/events/validation.hpp"
#include "idem/uuid.hpp"

namespace idem {

/// Primary template: deliberately undefined, so using an event type without a codec
/// is a compile error at the Consumer::on<Event> call. A specialization provides:
///
///     static Validated<Event> parse(std::string_view payload, const ParseLimits& limits);
///     static const Uuid& event_id(const Event& event);
///
/// parse() must not throw: every way a payload can be wrong is a ValidationError (it
/// goes to the DLQ with that reason). event_id() returns the UUIDv7 born with the event
/// (never a Kafka offset: IDEM-X2); parse() must already have rejected a non-v7 id.
template <class Event>
struct EventCodec;

}  // namespace idem
