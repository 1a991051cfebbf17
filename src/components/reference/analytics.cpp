#include "idem/reference/analytics.hpp"

namespace idem {

Handler<OrderConfirmed> analytics_handler() {
  return [](const OrderConfirmed& event, const RecordInfo&, Transaction& tx) {
    tx.execute(
        "INSERT INTO analytics_customer_revenue(customer_id, revenue_hundredths, order_count) "
        "VALUES ($1, $2, 1) ON CONFLICT (customer_id) DO UPDATE SET "
        "revenue_hundredths = analytics_customer_revenue.revenue_hundredths + "
        "excluded.revenue_hundredths, "
        "order_count = analytics_customer_revenue.order_count + 1",
        event.customer_id, event.total_amount.hundredths());
    return Outcome::Done;
  };
}

std::optional<CustomerRevenue> customer_revenue(Transaction& tx, std::int64_t customer_id) {
  const Rows rows = tx.execute(
      "SELECT revenue_hundredths, order_count FROM analytics_customer_revenue "
      "WHERE customer_id = $1",
      customer_id);
  if (rows.empty()) return std::nullopt;
  return CustomerRevenue{.revenue = Amount::from_hundredths(rows[0].int64(0)),
                         .order_count = rows[0].int64(1)};
}

std::map<std::int64_t, CustomerRevenue> all_customer_revenue(Transaction& tx) {
  const Rows rows = tx.execute(
      "SELECT customer_id, revenue_hundredths, order_count FROM analytics_customer_revenue");
  std::map<std::int64_t, CustomerRevenue> out;
  for (const RowView r : rows)
    out[r.int64(0)] = {.revenue = Amount::from_hundredths(r.int64(1)), .order_count = r.int64(2)};
  return out;
}

}  // namespace idem
