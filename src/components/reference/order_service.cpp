#include "idem/reference/order_service.hpp"

#include "idem/error.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/timestamp.hpp"

namespace idem {

namespace {
Timestamp now_of(const Clock& clock) {
  return std::chrono::time_point_cast<std::chrono::microseconds>(clock.now());
}
}  // namespace

void OrderService::create(Transaction& tx, std::int64_t order_id, std::int64_t customer_id,
                          Amount total) {
  if (order_id <= 0 || customer_id <= 0) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Internal,
                "orders: order_id and customer_id must be positive");
  }
  tx.execute(
      "INSERT INTO orders (id, customer_id, total_amount, status, created_at) "
      "VALUES ($1, $2, $3, 'created', $4)",
      order_id, customer_id, total, now_of(*config_.clock));
}

std::optional<Confirmation> OrderService::confirm(Transaction& tx, std::int64_t order_id) {
  const Timestamp now = now_of(*config_.clock);
  // The UPDATE comes first: it locks the order's row, so two confirmations of one
  // order serialize here and the second finds status already 'confirmed'. It also
  // makes the outbox id order follow the commit order for this key.
  const Rows rows = tx.execute(
      "UPDATE orders SET status = 'confirmed', confirmed_at = $2 "
      "WHERE id = $1 AND status = 'created' RETURNING customer_id, total_amount",
      order_id, now);
  if (rows.empty()) return std::nullopt;
  OrderConfirmed event;
  event.occurred_at = now;
  event.order_id = order_id;
  event.customer_id = rows[0].int64(0);
  event.total_amount = rows[0].amount(1);
  const Uuid id = outbox_.enqueue(tx, [&](const Uuid& event_id) {
    event.event_id = event_id;  // the one id: in the payload and in the row
    OutboxMessage m;
    m.aggregate_type = "order";
    m.aggregate_id = std::to_string(order_id);
    m.topic = config_.topic;
    m.payload = to_json(event);
    return m;
  });
  return Confirmation{order_id, id};
}

std::optional<Confirmation> OrderService::confirm(Store& store, std::int64_t order_id) {
  for (int attempt = 1;; ++attempt) {
    try {
      auto tx = store.begin();
      auto result = confirm(*tx, order_id);
      tx->commit();
      return result;
    } catch (const Error& e) {
      if (e.code() == ErrorCode::InDoubt || !e.transient() || attempt >= 5) throw;
    }
  }
}

std::int64_t OrderService::next_order_id(Transaction& tx) {
  return tx.execute("SELECT coalesce(max(id), 0) + 1 FROM orders")[0].int64(0);
}

std::vector<OrderService::ConfirmedOrder> OrderService::confirmed_orders(Transaction& tx) {
  const Rows rows = tx.execute(
      "SELECT customer_id, CAST(total_amount AS TEXT) FROM orders WHERE status = 'confirmed'");
  std::vector<ConfirmedOrder> out;
  out.reserve(rows.size());
  for (const RowView r : rows) out.push_back({r.int64(0), Amount::parse(r.text(1))});
  return out;
}

}  // namespace idem
