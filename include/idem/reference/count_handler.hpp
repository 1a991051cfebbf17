#pragma once
/// \file
/// The built-in `count` handler: records each new event as one `effect_log` row
/// (reference migration 0002), so tests and `idem consume --handler count` can count effects.
/// effect_log has no unique constraint on purpose: a double effect shows as two rows.

#include <cstdint>
#include <string_view>

#include "idem/consumer.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"

namespace idem {

/// Inserts one effect_log row (group, event id, topic, partition, offset) through `tx`
/// with Transaction::execute_deferred: on PostgreSQL its error surfaces at the next
/// synchronous call or sync(). \throws Error from the store.
void record_effect(Transaction& tx, const Uuid& event_id, const RecordInfo& record);

/// A handler that records every new event with record_effect and returns Done.
template <class Event>
[[nodiscard]] Handler<Event> count_handler() {
  return [](const Event& event, const RecordInfo& record, Transaction& tx) {
    record_effect(tx, EventCodec<Event>::event_id(event), record);
    return Outcome::Done;
  };
}

/// effect_log rows of `consumer_group` (every event, duplicates included), read in a
/// transaction of its own. \throws Error from the store.
[[nodiscard]] std::int64_t count_effects(Store& store, std::string_view consumer_group);

/// The largest number of effect_log rows any single event of `consumer_group` has:
/// 1 when every event has exactly one effect, 0 when there are none.
/// \throws Error from the store.
[[nodiscard]] std::int64_t max_effects_per_event(Store& store, std::string_view consumer_group);

}  // namespace idem
