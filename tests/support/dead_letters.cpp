#include "support/dead_letters.hpp"

#include <chrono>

namespace idem::test {

OrderConfirmed console_order(std::int64_t order_id) {
  OrderConfirmed e;
  e.event_id = new_uuid_v7();
  e.occurred_at = std::chrono::time_point_cast<std::chrono::microseconds>(e.event_id.timestamp());
  e.order_id = order_id;
  e.customer_id = 7;
  e.total_amount = Amount::from_hundredths(1250);
  return e;
}

TestRecord dead_letter_of(const OrderConfirmed& event, const std::string& dlq_topic,
                          const std::string& original_topic, const std::string& group,
                          std::int64_t original_offset, const std::string& error_class,
                          const std::string& error_message) {
  return {dlq_topic,
          std::to_string(event.order_id),
          to_json(event),
          {{"event_id", event.event_id.to_string()},
           {"idem.original.topic", original_topic},
           {"idem.original.partition", "0"},
           {"idem.original.offset", std::to_string(original_offset)},
           {"idem.consumer.group", group},
           {"idem.error.class", error_class},
           {"idem.error.message", error_message},
           {"idem.attempts", "3"}},
          0};
}

ConsoleOptions console_options(const std::string& bootstrap, const std::string& store_url,
                               const std::string& token) {
  ConsoleOptions o;
  o.listen = "127.0.0.1:0";
  o.token = token;
  o.kafka = DlqConnection{bootstrap, {}, std::chrono::seconds(20)};
  o.store_url = store_url;
  return o;
}

std::unique_ptr<httplib::Client> console_client(const Console& console) {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", console.port());
  client->set_read_timeout(60, 0);
  return client;
}

}  // namespace idem::test
