#pragma once
/// \file
/// `order.confirmed.v1`, the event of the reference system (docs/reference-system.md).

#include <cstdint>
#include <string>
#include <string_view>

#include "idem/amount.hpp"
#include "idem/events/event_codec.hpp"
#include "idem/events/validation.hpp"
#include "idem/timestamp.hpp"
#include "idem/uuid.hpp"

namespace idem {

inline constexpr std::string_view kOrderConfirmedV1 = "order.confirmed.v1";

/// The largest total_amount the reference system can store: its tables hold amounts as
/// PostgreSQL numeric(18,2) (sql/reference/postgres/), at most 16 integer digits, so
/// 9999999999999999.99. Amount itself goes up to INT64_MAX hundredths, one digit more;
/// an event above this would be charged and then fail its ledger INSERT on every
/// redelivery, so parse_order_confirmed rejects it (OutOfRange) at the boundary.
inline constexpr Amount kMaxOrderAmount = Amount::from_hundredths(999'999'999'999'999'999);

/// A validated order.confirmed.v1 event.
struct OrderConfirmed {
  Uuid event_id;  ///< UUIDv7, born with the event (IDEM-1)
  Timestamp occurred_at;
  std::int64_t order_id = 0;     ///< > 0; also the Kafka message key
  std::int64_t customer_id = 0;  ///< > 0
  Amount total_amount;

  friend bool operator==(const OrderConfirmed&, const OrderConfirmed&) = default;
};

/// Parses and validates a JSON payload. Never throws; every failure is a
/// ValidationError naming the field and the reason. total_amount must be at most
/// kMaxOrderAmount. Unknown extra fields are
/// ignored (forward compatibility); duplicate fields are rejected.
/// Thread-safe (each thread uses its own parser).
[[nodiscard]] Validated<OrderConfirmed> parse_order_confirmed(std::string_view json,
                                                              const ParseLimits& limits = {});

/// Serializes to the canonical JSON form that parse_order_confirmed accepts.
[[nodiscard]] std::string to_json(const OrderConfirmed& event);

/// The codec for the reference system's `order.confirmed.v1`.
template <>
struct EventCodec<OrderConfirmed> {
  [[nodiscard]] static Validated<OrderConfirmed> parse(std::string_view payload,
                                                       const ParseLimits& limits) {
    return parse_order_confirmed(payload, limits);
  }
  [[nodiscard]] static const Uuid& event_id(const OrderConfirmed& event) noexcept {
    return event.event_id;
  }
};

}  // namespace idem
