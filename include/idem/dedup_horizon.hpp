#pragma once
/// \file
/// The dedup horizon (IDEM-2 TTL in docs/rules.md; docs/retention.md): dedup rows are kept for a
/// retention measured in *event time* (the UUIDv7 timestamp of the event_id), so an
/// event born before `now - retention` may have lost its row and can no longer be
/// deduplicated. The horizon keeps a safety margin inside the retention: events
/// older than `now - (retention - safety_margin)` are treated as stale, which
/// covers clock skew between the maintenance task and the consumer and the time a
/// batch spends in flight.

#include <chrono>
#include <cstdint>

#include "idem/uuid.hpp"

namespace idem {

/// Dedup retention and the horizon derived from it. Plain data.
struct DedupHorizon {
  /// How long dedup rows are kept, in event time. Default 7 days (IDEM-2 TTL).
  std::chrono::hours retention{24 * 7};
  /// Subtracted from the retention for the stale check. Must be below `retention`.
  std::chrono::hours safety_margin{1};

  /// The age (event time) from which an event counts as stale.
  [[nodiscard]] std::chrono::milliseconds stale_age() const noexcept {
    return retention - safety_margin;
  }
  /// Events born before this instant are stale at `now`.
  [[nodiscard]] std::chrono::system_clock::time_point stale_before(
      std::chrono::system_clock::time_point now) const noexcept {
    return now - stale_age();
  }
  /// True when `event_id` (a UUIDv7) was born before stale_before(now).
  [[nodiscard]] bool is_stale(const Uuid& event_id,
                              std::chrono::system_clock::time_point now) const noexcept {
    return event_id.timestamp() < stale_before(now);
  }
  /// How old the event is at `now` (negative for an id from a clock ahead of ours).
  [[nodiscard]] static std::chrono::milliseconds event_age(
      const Uuid& event_id, std::chrono::system_clock::time_point now) noexcept {
    return std::chrono::duration_cast<std::chrono::milliseconds>(now - event_id.timestamp());
  }
};

namespace detail {

/// What the dedup-horizon guard decided about an event (DedupHorizonGuard::check).
enum class HorizonVerdict : std::uint8_t {
  Fresh,       ///< process normally (also: stale under StaleEventPolicy::Process)
  Quarantine,  ///< dead-letter with error class `stale`; do not execute
  Skip,        ///< do not execute, do not dead-letter; the offset advances
};

}  // namespace detail

}  // namespace idem
