#pragma once
// Dead letters written straight to a DLQ topic, as a consumer would have written them
// (the idem.* headers of src/consumer/letters/dead_letter_producer.cpp), for the console tests:
// a letter whose cause is gone, so replaying it lets the consumer apply it. And the
// console the tests read them through.
#include <httplib.h>

#include <cstdint>
#include <memory>
#include <string>

#include "idem/console/console.hpp"

#include "idem/reference/order_confirmed.hpp"
#include "support/kafka_test_producer.hpp"

namespace idem::test {

/// An order.confirmed event (order `order_id`, customer 7, 12.50) with a fresh UUIDv7.
[[nodiscard]] OrderConfirmed console_order(std::int64_t order_id);

/// `event` as a letter of `group` on `dlq_topic`, dead-lettered from `original_topic`
/// partition 0 at `original_offset`, with `error_class` and `error_message`.
[[nodiscard]] TestRecord dead_letter_of(const OrderConfirmed& event, const std::string& dlq_topic,
                                        const std::string& original_topic, const std::string& group,
                                        std::int64_t original_offset,
                                        const std::string& error_class,
                                        const std::string& error_message);

/// A test console's options: 127.0.0.1 on a free port, `token` (empty: replay off), the
/// cluster at `bootstrap` (20 s per step) and the store at `store_url`.
[[nodiscard]] ConsoleOptions console_options(const std::string& bootstrap,
                                             const std::string& store_url,
                                             const std::string& token);

/// An HTTP client of `console` (read timeout 60 s).
[[nodiscard]] std::unique_ptr<httplib::Client> console_client(const Console& console);

}  // namespace idem::test
