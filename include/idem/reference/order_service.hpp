#pragma once
/// \file
/// The order service of the reference system (docs/reference-system.md): creates orders and
/// confirms them. A confirmation updates `orders` and enqueues `order.confirmed.v1` in
/// the outbox in ONE transaction (rule OUTBOX), so the order is confirmed if and only
/// if its event will be published.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "idem/amount.hpp"
#include "idem/clock.hpp"
#include "idem/outbox.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"

namespace idem {

/// The topic of the reference system (>= 3 partitions, key = order_id).
inline constexpr std::string_view kOrderConfirmedTopic = "order-service.order.confirmed";

struct OrderServiceConfig {
  std::string topic = std::string(kOrderConfirmedTopic);
  const Clock* clock = &SystemClock::instance();  ///< occurred_at, created_at, confirmed_at
};

/// A confirmed order and the event id its confirmation was born with.
struct Confirmation {
  std::int64_t order_id = 0;
  Uuid event_id;
};

/// Business operations on `orders`. Holds no connection: every call takes the
/// transaction (or the store) to work in. Thread-safe if `outbox` is.
class OrderService {
 public:
  explicit OrderService(Outbox& outbox, OrderServiceConfig config = {})
      : outbox_(outbox), config_(std::move(config)) {}

  /// Inserts order `order_id` with status 'created'.
  /// \throws Error(Constraint) when the id exists; Error(InvalidArgument) for an id
  ///   or customer id <= 0; whatever the transaction throws.
  void create(Transaction& tx, std::int64_t order_id, std::int64_t customer_id, Amount total);

  /// Confirms order `order_id` inside `tx`: UPDATE orders (status, confirmed_at) and
  /// enqueue order.confirmed.v1, whose event_id is born here. Returns nullopt (and
  /// changes nothing) when the order does not exist or is already confirmed. If `tx`
  /// rolls back, neither the confirmation nor the event exists.
  std::optional<Confirmation> confirm(Transaction& tx, std::int64_t order_id);

  /// confirm() in its own transaction on `store`, committed. Redoes the transaction
  /// (up to 5 times) when it fails with a transient error before COMMIT; an InDoubt
  /// COMMIT is rethrown (never guessed at: the caller re-reads the order).
  std::optional<Confirmation> confirm(Store& store, std::int64_t order_id);

  /// The next free order id (max(id) + 1); for demos with a single creator.
  [[nodiscard]] static std::int64_t next_order_id(Transaction& tx);

  /// A confirmed order's customer and total (nullopt: a total the column holds that is
  /// not an amount of hundredths).
  struct ConfirmedOrder {
    std::int64_t customer_id = 0;
    std::optional<Amount> total;
  };
  /// Every confirmed order: what analytics must add up to, per customer.
  [[nodiscard]] static std::vector<ConfirmedOrder> confirmed_orders(Transaction& tx);

 private:
  Outbox& outbox_;
  OrderServiceConfig config_;
};

}  // namespace idem
