// The billing and analytics handlers of the reference system, called the way the
// consumer calls them (inside the event's transaction), against a real payment
// provider on loopback and a real SQLite store.
#include <chrono>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/reference/analytics.hpp"
#include "idem/reference/billing.hpp"
#include "idem/reference/payment_provider.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "idem/tracing.hpp"
#include "idem/uuid.hpp"
#include "support/store_backends.hpp"

namespace idem {
namespace billing_test {

using namespace std::chrono_literals;

http::ProviderFaults declining_all() {
  http::ProviderFaults f;
  f.decline = 1.0;
  return f;
}
http::ProviderFaults unavailable() {
  http::ProviderFaults f;
  f.unavailable = 1.0;
  return f;
}

std::int64_t scalar(Store& store, std::string_view sql) {
  auto tx = store.begin();
  const Rows rows = tx->execute(sql);
  tx->rollback();
  return rows.empty() || rows[0].is_null(0) ? 0 : rows[0].int64(0);
}

/// On every backend: the consumer's database and the provider's key store.
template <class Backend>
class BillingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string db = Backend::fresh_url();
    const std::string provider_db = Backend::fresh_url();
    if (this->IsSkipped() || this->HasFatalFailure()) return;
    store_ = open_store(db);
    idem::migrate_reference_system(*store_);
    provider_ = std::make_unique<http::PaymentProvider>(open_store(provider_db));
    provider_->start("127.0.0.1", 0);
    auto tx = store_->begin();
    for (std::int64_t id = 1; id <= 3; ++id) {
      tx->execute(
          "INSERT INTO orders(id, customer_id, total_amount, status, created_at) "
          "VALUES ($1, $2, $3, 'confirmed', '2026-11-30T00:00:00Z')",
          id, 100 + id % 2, "10.50");
    }
    tx->commit();
  }

  Handler<OrderConfirmed> billing(int max_attempts = 3) {
    BillingConfig config;
    config.provider_url = provider_->base_url() + "/";  // a trailing slash is tolerated
    config.client.max_attempts = max_attempts;
    config.client.retry.initial_backoff = 1ms;
    config.client.retry.max_backoff = 2ms;
    return billing_handler(config);
  }

  static OrderConfirmed event(std::int64_t order_id) {
    return OrderConfirmed{.event_id = new_uuid_v7(),
                          .occurred_at = {},
                          .order_id = order_id,
                          .customer_id = 100 + order_id % 2,
                          .total_amount = *Amount::parse("10.50")};
  }

  /// Runs `handler` on `e` in a transaction that commits when `commit` (the consumer
  /// would also have marked the event processed in it); returns the outcome and the
  /// dead-letter reason the handler gave.
  std::pair<Outcome, std::string> run(const Handler<OrderConfirmed>& handler,
                                      const OrderConfirmed& e, bool commit = true,
                                      std::string traceparent = {}) {
    std::string reason;
    std::vector<RecordHeader> headers;
    if (!traceparent.empty()) headers.push_back({"traceparent", traceparent});
    RecordInfo info;
    info.topic = "order-service.order.confirmed";
    info.headers = headers;
    info.consumer_group = kBillingGroup;
    info.dead_letter_reason_sink = &reason;
    auto tx = store_->begin();
    const Outcome outcome = handler(e, info, *tx);
    if (commit && outcome == Outcome::Done) tx->commit();
    return {outcome, reason};
  }

  std::unique_ptr<Store> store_;
  std::unique_ptr<http::PaymentProvider> provider_;
};

TYPED_TEST_SUITE(BillingTest, test::AllBackends, test::BackendName);

TYPED_TEST(BillingTest, ChargesOnceAndRecordsLedgerAndPaymentStatus) {
  const auto handler = this->billing();
  const OrderConfirmed e = this->event(1);
  const auto [outcome, reason] =
      this->run(handler, e, true, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_EQ(outcome, Outcome::Done) << reason;

  const auto charges = this->provider_->charges(1);
  ASSERT_EQ(charges.size(), 1u);
  EXPECT_EQ(charges[0].idempotency_key, e.event_id.to_string())
      << "IDEM-4: the key is the event id";
  EXPECT_EQ(charges[0].amount, "10.50");
  // The call is a child span of the record's context: same trace, a span of its own.
  const auto forwarded = parse_traceparent(charges[0].traceparent);
  ASSERT_TRUE(forwarded) << charges[0].traceparent;
  EXPECT_EQ(forwarded->trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_NE(charges[0].traceparent.substr(36, 16), "00f067aa0ba902b7");

  auto tx = this->store_->begin();
  const Rows ledger =
      tx->execute("SELECT order_id, event_id, amount, provider_payment_id FROM billing_ledger");
  ASSERT_EQ(ledger.size(), 1u);
  EXPECT_EQ(ledger[0].int64(0), 1);
  EXPECT_EQ(ledger[0].uuid(1), e.event_id);
  EXPECT_EQ(ledger[0].amount(2).to_string(), "10.50");
  EXPECT_EQ(ledger[0].text(3), charges[0].payment_id);
  EXPECT_EQ(tx->execute("SELECT payment_status FROM orders WHERE id = 1")[0].text(0), "charged");
  EXPECT_EQ(tx->execute("SELECT payment_status FROM orders WHERE id = 2")[0].text(0), "unpaid");
}

// IDEM-4's scenario inside the consumer: the provider charged, then our transaction
// rolled back (a crash, a DB error). The redelivered event charges with the same key.
TYPED_TEST(BillingTest, RedeliveryAfterRollbackDoesNotChargeAgain) {
  const auto handler = this->billing();
  const OrderConfirmed e = this->event(2);
  ASSERT_EQ(this->run(handler, e, /*commit=*/false).first, Outcome::Done);
  EXPECT_EQ(scalar(*this->store_, "SELECT count(*) FROM billing_ledger"), 0) << "rolled back";
  ASSERT_EQ(this->run(handler, e).first, Outcome::Done);
  EXPECT_EQ(this->provider_->charges(2).size(), 1u);
  EXPECT_EQ(this->provider_->summary().replays, 1);
  EXPECT_EQ(scalar(*this->store_, "SELECT count(*) FROM billing_ledger WHERE order_id = 2"), 1);
}

TYPED_TEST(BillingTest, DeclinedIsADeadLetterWithTheProvidersAnswer) {
  this->provider_->set_faults(declining_all());
  const auto [outcome, reason] = this->run(this->billing(), this->event(3));
  EXPECT_EQ(outcome, Outcome::DeadLetter);
  EXPECT_NE(reason.find("402"), std::string::npos) << reason;
  EXPECT_NE(reason.find("urn:idem:problem:card-declined"), std::string::npos) << reason;
  EXPECT_EQ(scalar(*this->store_, "SELECT count(*) FROM billing_ledger"), 0);
  EXPECT_TRUE(this->provider_->charges(3).empty());
}

TYPED_TEST(BillingTest, ProviderDownOutlastingTheRetriesIsARetry) {
  this->provider_->set_faults(unavailable());
  const OrderConfirmed e = this->event(1);
  EXPECT_EQ(this->run(this->billing(2), e).first, Outcome::Retry);
  EXPECT_EQ(this->provider_->summary().unavailable, 2);
  this->provider_->set_faults({});
  EXPECT_EQ(this->run(this->billing(2), e).first, Outcome::Done);
  EXPECT_EQ(this->provider_->summary().charges, 1);
}

TYPED_TEST(BillingTest, AnalyticsSumsRevenueAndOrdersPerCustomer) {
  const auto handler = analytics_handler();
  for (std::int64_t order = 1; order <= 3; ++order) {
    ASSERT_EQ(this->run(handler, this->event(order)).first, Outcome::Done);
  }
  auto tx = this->store_->begin();
  const auto odd = customer_revenue(*tx, 101);   // orders 1 and 3
  const auto even = customer_revenue(*tx, 100);  // order 2
  ASSERT_TRUE(odd && even);
  EXPECT_EQ(odd->revenue.to_string(), "21.00");
  EXPECT_EQ(odd->order_count, 2);
  EXPECT_EQ(even->revenue.to_string(), "10.50");
  EXPECT_EQ(even->order_count, 1);
  EXPECT_FALSE(customer_revenue(*tx, 999));
}

}  // namespace billing_test
}  // namespace idem
