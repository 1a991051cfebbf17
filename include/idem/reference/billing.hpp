#pragma once
/// \file
/// The billing consumer of the reference system (docs/reference-system.md; IDEM-4): for each new
/// order.confirmed.v1, inside the event's transaction (where idem::Consumer has already
/// marked the event processed for group `billing-order-confirmed`):
///   1. charge the payment provider: `POST /payments/charge {"order_id", "amount"}`
///      with `Idempotency-Key: <event_id>` (and a child span of the record's `traceparent`),
///      retrying transient failures with the same key;
///   2. `UPDATE orders SET payment_status = 'charged'`;
///   3. append a billing_ledger row (order_id, event_id, amount, provider payment id).
/// If the transaction then rolls back (a crash, a DB error), the redelivered event
/// charges again with the same key and the provider replays its first answer: one
/// charge, one ledger row.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idem/config.hpp"
#include "idem/consumer.hpp"
#include "idem/http/async_client.hpp"
#include "idem/http/idempotent_client.hpp"
#include "idem/http/route_pause.hpp"
#include "idem/reference/order_confirmed.hpp"

namespace idem {

/// The billing consumer's group (its dedup rows).
inline constexpr std::string_view kBillingGroup = "billing-order-confirmed";

struct BillingConfig {
  std::string provider_url;  ///< base URL, e.g. http://127.0.0.1:8080; required
  /// Timeouts, attempts, backoff; `client.send_idempotency_key = false` is the
  /// test-only switch that shows the double charge a keyless client causes. For
  /// billing_effect, `client.max_host_connections` should be at least the consumer's
  /// max_in_flight (`idem consume` sets it so): a connection carries one charge at a
  /// time, and charges beyond the limit wait inside libcurl (at 100 ms per charge, the
  /// default 64 connections cap billing at 640 orders/s whatever max_in_flight is).
  http::ClientConfig client;
  /// billing_effect: called when billing pauses (every charge refused with 401, 403 or
  /// 404 since the first of them was sent: the provider's credentials or URL are wrong)
  /// or resumes (a charge succeeded); http::RoutePause decides. Optional.
  http::RoutePause::Observer on_pause;
};

/// What the provider answered to a successful charge: the apply phase's input.
struct BillingCharge {
  std::string payment_id;
};

/// Billing as an effect (Consumer::on_effect; IDEM-4): the charge is the call phase, run
/// outside any database transaction, and `UPDATE orders` + the ledger row are the apply
/// phase, in the batch transaction with the dedup mark. Charges go through one
/// http::AsyncClient (one event-loop thread, libcurl multi): many in flight at once, up to
/// ConsumerConfig::max_in_flight across orders and one per order, and no transaction (no
/// SQLite write lock) is held while they are. Outcomes as billing_handler's. The ordering
/// key is the Kafka key (order_id).
/// \throws Error(InvalidArgument, Config) for an empty provider_url or a bad client config.
[[nodiscard]] EffectHandler<OrderConfirmed, BillingCharge> billing_effect(BillingConfig config);

/// Turns the provider's answer to a charge into the call's completion: 2xx with a
/// payment_id -> done; 401, 403, 404 -> retry with the route paused, when `pause` says the
/// route is refused rather than this charge (http::RoutePause; `started`: as the charge
/// was sent); any other permanent answer -> dead_letter with the answer as reason; retries
/// exhausted -> retry (the key waits; the same Idempotency-Key is sent again).
void complete_charge(const http::CallResult& result, const CallCompletion<BillingCharge>& done,
                     http::RoutePause& pause, http::RoutePause::Start started);

/// The charge request of `event`: URL, body, Idempotency-Key = event_id, and a child
/// span of the record's traceparent.
[[nodiscard]] http::Request charge_request(const std::string& charge_url,
                                           const OrderConfirmed& event, const RecordInfo& record);

/// The apply phase of billing: marks the order charged and appends its ledger row.
Outcome apply_charge(const OrderConfirmed& event, const BillingCharge& charge, Transaction& tx);

/// The billing handler, all in the transaction: the HTTP call runs while the batch
/// transaction is open (and, on SQLite, while it holds the write lock). Kept for
/// comparison and for callers of the Handler shape; prefer billing_effect. A 2xx answer applies the
/// effects and returns Done; a permanent answer (402 declined, 422, other 4xx) returns DeadLetter
/// with the provider's status and body as the dead letter's reason; failures that outlast the
/// client's retries return Retry (the partition pauses and the event comes again).
/// The handler owns one HTTP client; a Consumer calls it from one thread only.
/// \throws Error(InvalidArgument, Config) for an empty provider_url or a bad client config.
[[nodiscard]] Handler<OrderConfirmed> billing_handler(BillingConfig config);

/// What `idem consume --handler billing` is told about the provider it calls:
/// `consumer.provider_url` and `billing.provider_key_retention`.
struct BillingSettings {
  std::string provider_url;  ///< the payment provider's base URL
  /// The provider's Idempotency-Key retention as its operator states it; nullopt:
  /// unknown (an outside provider's retention is known only when someone states it).
  std::optional<std::chrono::milliseconds> provider_key_retention;
};

/// Declares the billing keys (ConfigSchema::add<BillingSettings>).
void declare_billing_keys(SectionKeys<BillingSettings>& keys);

/// IDEM-4: the provider deduplicates a charge only while it remembers the key, so it must
/// remember it for as long as the consumer may still execute a redelivery. Warns when what
/// the provider keeps (billing.provider_key_retention, or provider.key_retention when the
/// configuration runs the reference provider) is shorter than dedup.retention, and, when
/// `runs_billing`, when nothing says what it keeps though dedup.retention was changed.
/// Needs a schema with BillingSettings and http::ProviderSettings.
void warn_provider_key_retention(const Config& config, bool runs_billing,
                                 std::vector<std::string>& warnings);

/// What billing left for one order: its payment_status and its rows in billing_ledger
/// (charged exactly once: 'charged' and one row).
struct OrderBilling {
  std::int64_t order_id = 0;
  std::string payment_status;
  std::int64_t ledger_rows = 0;
};

/// The billing of the orders with ids in [first_order, end_order), in id order.
[[nodiscard]] std::vector<OrderBilling> billing_of_orders(Transaction& tx, std::int64_t first_order,
                                                          std::int64_t end_order);

}  // namespace idem
