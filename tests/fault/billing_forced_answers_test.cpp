// Billing from the outside against a provider forced to give each answer the
// Idempotency-Key draft defines, as real processes (`idem dev-broker`, `idem provider` with
// forced-answer shares, `idem consume --handler billing`):
//
//  - 409 (key in flight), 429 with `Retry-After: 1` and 503 problem+json with
//    `Retry-After: 1`, each on a share of the calls: all are retried with the same key, so
//    every order is charged exactly once, with one ledger row naming that charge, and
//    nothing is dead-lettered;
//  - 422 (key reused with another request) on a share of the calls: a request that must
//    change, so its order is dead-lettered and never retried; the letter's reason carries
//    the problem's type and detail. Every other order is charged once; no order is both.
//
// Waits are conditions with deadlines, never sleeps.
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "support/billing_processes.hpp"
#include "support/consumer_scenario.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/mock_group.hpp"
#include "support/process.hpp"
#include "support/provider_process.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem::test {
namespace billing_forced_answers_test {

using namespace std::chrono_literals;

constexpr int kOrders = 300;
constexpr int kKeys = 60;
constexpr int kPartitions = 4;

template <class Backend>
class BillingForcedAnswers : public BillingProcessesTest {
 protected:
  BillingForcedAnswers() : BillingProcessesTest(kPartitions, &Backend::fresh_url) {}

  void SetUp() override {
    BillingProcessesTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    orders_ = produce_keyed_order_events(
        broker_->bootstrap(), topic_, kOrders,
        [](std::int64_t id) { return fmt::format("customer-{}", id % kKeys); });
  }

  /// Runs billing against `provider` until the group has committed every partition,
  /// then stops it (SIGTERM, a clean exit).
  void bill_everything(const ProviderProcess& provider) {
    ChildProcess consumer = ChildProcess::spawn(
        IDEM_CLI_PATH,
        with_mock_group({"consume", "--brokers", broker_->bootstrap(), "--topic", topic_, "--group",
                         group_, "--db", billing_db_, "--handler", "billing", "--provider-url",
                         provider.url(), "--max-in-flight", "64"}));
    ASSERT_TRUE(read_line_starting_with(consumer, "consuming ", 30s));
    const auto end = end_offsets(broker_->bootstrap(), topic_, kPartitions);
    ASSERT_TRUE(eventually(
        [&] { return group_caught_up(broker_->bootstrap(), group_, topic_, end); }, 120s, 100ms))
        << "billing did not commit every partition";
    consumer.kill(SIGTERM);
    EXPECT_EQ(consumer.wait(60s), 0);
  }

  /// The provider's charges by order, failing on an order charged twice or under another
  /// key than its event id.
  std::map<std::int64_t, ProviderCharge> charges_by_order() {
    std::map<std::int64_t, ProviderCharge> by_order;
    for (const ProviderCharge& c : provider_charges(provider_db_)) {
      EXPECT_EQ(c.idempotency_key, orders_.event_ids.at(c.order_id).to_string());
      EXPECT_TRUE(by_order.emplace(c.order_id, c).second)
          << "order " << c.order_id << " charged twice";
    }
    return by_order;
  }

  /// One ledger row per charged order, naming its charge; none for any other order.
  void expect_one_ledger_row_per_charge(const std::map<std::int64_t, ProviderCharge>& charges) {
    auto tx = observer_->begin_read();
    const Rows ledger = tx->execute("SELECT order_id, provider_payment_id FROM billing_ledger");
    tx->commit();
    std::set<std::int64_t> seen;
    for (const RowView row : ledger) {
      const std::int64_t order = row.int64(0);
      EXPECT_TRUE(seen.insert(order).second) << "order " << order << " has two ledger rows";
      const auto charge = charges.find(order);
      ASSERT_NE(charge, charges.end()) << "ledger row of order " << order << " with no charge";
      EXPECT_EQ(charge->second.payment_id, row.text(1));
    }
    EXPECT_EQ(seen.size(), charges.size());
  }

  std::vector<KafkaRecord> dead_letters() {
    const auto count = end_offsets(broker_->bootstrap(), topic_ + ".dlq", 1).at(0);
    return read_topic(broker_->bootstrap(), topic_ + ".dlq", 1, static_cast<std::size_t>(count),
                      30s);
  }

  KeyedOrderEvents orders_;
};

TYPED_TEST_SUITE(BillingForcedAnswers, AllBackends, BackendName);

TYPED_TEST(BillingForcedAnswers, InFlightTooManyRequestsAndUnavailableAreRetriedToOneCharge) {
  if (this->IsSkipped() || this->HasFatalFailure()) return;
  IDEM_REQUIRE_CLI();
  const std::uint64_t seed = std::random_device{}() % 1000;
  SCOPED_TRACE(fmt::format("seed {}", seed));
  ProviderProcess provider(
      IDEM_CLI_PATH, this->provider_db_,
      {"--in-progress", "0.15", "--too-many-requests", "0.15", "--retry-after", "1",
       "--unavailable", "0.15", "--unavailable-retry-after", "1", "--seed", std::to_string(seed)});
  this->bill_everything(provider);

  const JsonAnswer summary = http_get(provider.url(), "/payments/summary");
  ASSERT_EQ(summary.status, 200);
  std::cout << "provider summary: " << summary.body.dump() << std::endl;
  EXPECT_GT(summary.body.value("too_many_requests", 0), 0) << "the 429 answer never fired";
  EXPECT_GT(summary.body.value("unavailable", 0), 0) << "the 503 answer never fired";
  const auto charges = this->charges_by_order();
  EXPECT_EQ(charges.size(), static_cast<std::size_t>(kOrders)) << "orders left uncharged";
  this->expect_one_ledger_row_per_charge(charges);
  EXPECT_TRUE(this->dead_letters().empty()) << "a retryable answer was dead-lettered";
  EXPECT_EQ(provider.stop(), 0);
}

TYPED_TEST(BillingForcedAnswers, KeyReusedIsDeadLetteredWithTheProblemDetails) {
  if (this->IsSkipped() || this->HasFatalFailure()) return;
  IDEM_REQUIRE_CLI();
  const std::uint64_t seed = std::random_device{}() % 1000;
  SCOPED_TRACE(fmt::format("seed {}", seed));
  ProviderProcess provider(IDEM_CLI_PATH, this->provider_db_,
                           {"--key-reused", "0.1", "--seed", std::to_string(seed)});
  this->bill_everything(provider);

  const auto charges = this->charges_by_order();
  this->expect_one_ledger_row_per_charge(charges);
  const std::vector<KafkaRecord> letters = this->dead_letters();
  EXPECT_FALSE(letters.empty()) << "the 422 answer never fired";
  std::set<std::int64_t> lettered;
  for (const KafkaRecord& letter : letters) {
    const auto order = nlohmann::json::parse(letter.payload).at("order_id").get<std::int64_t>();
    EXPECT_TRUE(lettered.insert(order).second) << "order " << order << " dead-lettered twice";
    EXPECT_FALSE(charges.contains(order)) << "order " << order << " charged and dead-lettered";
    const std::string reason = letter.header("idem.error.message").value_or("");
    EXPECT_NE(reason.find("422"), std::string::npos) << reason;
    EXPECT_NE(reason.find("urn:idem:problem:idempotency-key-reused"), std::string::npos) << reason;
    EXPECT_NE(reason.find("injected fault"), std::string::npos)
        << "the problem's detail: " << reason;
  }
  std::cout << fmt::format("{} orders charged, {} dead-lettered with the 422's problem",
                           charges.size(), lettered.size())
            << std::endl;
  EXPECT_EQ(charges.size() + lettered.size(), static_cast<std::size_t>(kOrders))
      << "orders neither charged nor dead-lettered";
  EXPECT_EQ(provider.stop(), 0);
}

}  // namespace billing_forced_answers_test
}  // namespace idem::test
