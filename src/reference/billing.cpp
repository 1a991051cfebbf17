#include "idem/reference/billing.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/error.hpp"
#include "idem/tracing.hpp"

namespace idem {

namespace {

// A dead letter's reason carries the provider's answer; a runaway body is cut short.
constexpr std::size_t kMaxReasonBody = 512;

std::string provider_answer(const http::CallResult& r) {
  const std::string_view body(r.body);
  return fmt::format("payment provider answered HTTP {}: {}", r.http_status,
                     body.size() > kMaxReasonBody ? std::string(body.substr(0, kMaxReasonBody)) + "..."
                                                  : std::string(body));
}

}  // namespace

Handler<OrderConfirmed> billing_handler(BillingConfig config) {
  if (config.provider_url.empty()) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "billing: the payment provider URL is required");
  }
  while (!config.provider_url.empty() && config.provider_url.back() == '/') config.provider_url.pop_back();
  // Handler is a std::function and must be copyable; the client (one connection) is shared.
  auto client = std::make_shared<http::IdempotentClient>(config.client);
  const std::string charge_url = config.provider_url + "/payments/charge";

  return [client, charge_url](const OrderConfirmed& event, const RecordInfo& record,
                              Transaction& tx) {
    const std::string event_id = event.event_id.to_string();
    const std::string amount = event.total_amount.to_string();
    const std::string body = fmt::format(R"({{"order_id":{},"amount":"{}"}})", event.order_id, amount);
    // The call is a child span of the record's trace: same trace id, a span id of its own.
    // A record without a valid traceparent sends none (the provider starts its own).
    std::vector<std::pair<std::string, std::string>> headers;
    if (const auto trace = trace_context(record)) {
      headers.emplace_back(std::string(kTraceparentHeader), trace->child().traceparent());
    }

    // IDEM-4: the event id is the key, so every retry of this call, and every
    // redelivery of this event after a rollback, asks for the same single charge.
    const http::CallResult result = client->post_json(charge_url, body, event_id, headers);
    if (result.status == http::CallStatus::RetriesExhausted) return Outcome::Retry;
    if (result.status == http::CallStatus::Permanent) {
      record.dead_letter_reason(provider_answer(result));
      return Outcome::DeadLetter;
    }
    const auto answer = nlohmann::json::parse(result.body, nullptr, /*allow_exceptions=*/false);
    const auto payment_id = answer.is_object() ? answer.find("payment_id") : answer.end();
    if (!answer.is_object() || payment_id == answer.end() || !payment_id->is_string()) {
      record.dead_letter_reason("payment provider answered 2xx without a payment_id: " + result.body);
      return Outcome::DeadLetter;
    }

    tx.execute("UPDATE orders SET payment_status = 'charged' WHERE id = $1", event.order_id);
    tx.execute("INSERT INTO billing_ledger(order_id, event_id, amount, provider_payment_id) "
               "VALUES ($1, $2, $3, $4)",
               event.order_id, event.event_id, event.total_amount,
               payment_id->get<std::string>());
    return Outcome::Done;
  };
}

}  // namespace idem
