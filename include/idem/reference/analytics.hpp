#pragma once
/// \file
/// The analytics consumer of the reference system (docs/reference-system.md): on the same topic
/// as billing but in its own group (`analytics-order-confirmed`, so its own dedup
/// rows), it adds each new order.confirmed.v1 to its customer's revenue and order
/// count (table analytics_customer_revenue, reference migration 0003).

#include <cstdint>
#include <map>
#include <optional>
#include <string_view>

#include "idem/amount.hpp"
#include "idem/consumer.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/store.hpp"

namespace idem {

inline constexpr std::string_view kAnalyticsGroup = "analytics-order-confirmed";

/// One upsert per event: revenue += total_amount, order_count += 1. Exact (integer
/// hundredths) and atomic, so consumers on several partitions never lose an update.
[[nodiscard]] Handler<OrderConfirmed> analytics_handler();

struct CustomerRevenue {
  Amount revenue;
  std::int64_t order_count = 0;
};

/// The analytics row of `customer_id`, read through `tx`; nullopt when it has none.
[[nodiscard]] std::optional<CustomerRevenue> customer_revenue(Transaction& tx,
                                                              std::int64_t customer_id);

/// Every analytics row, by customer id.
[[nodiscard]] std::map<std::int64_t, CustomerRevenue> all_customer_revenue(Transaction& tx);

}  // namespace idem
