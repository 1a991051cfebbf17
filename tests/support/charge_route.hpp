#pragma once
// The HTTP route of the tests whose endpoint is their own loopback server: one call per
// order (POST /charge, header X-Order = the event's order_id), and in the mark's
// transaction a charge_log row with the payment id of the answer.
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace idem::test {

/// The route `charge` on `topic` calling http://127.0.0.1:`port`/charge.
inline std::string charge_route_toml(std::string_view topic, int port) {
  return fmt::format(R"toml(
[routes.charge]
topic = "{}"
type = "order.confirmed.v1"
sql = ["INSERT INTO charge_log (order_id, payment_id) VALUES ($order_id, $payment_id)"]
[routes.charge.params]
order_id = {{ from = "/order_id", type = "integer" }}
payment_id = {{ from = "response:/payment_id", type = "text" }}
[routes.charge.http]
url = "http://127.0.0.1:{}/charge"
headers = {{ X-Order = "{{order_id}}" }}
)toml",
                     topic, port);
}

}  // namespace idem::test
