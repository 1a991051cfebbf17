// The design documents' double-charge scenario (IDEM-4), from both sides, with real
// processes: `idem dev-broker`, `idem orders create`, `idem relay`, `idem provider`
// whose reset-after-commit fault charges and then loses the answer, and `idem consume
// --handler billing`.
//
// With the Idempotency-Key (the event id) the client's retry and any redelivery ask
// for the same charge, and the provider replays it: one charge per order. With the
// test-only --no-idempotency-key (a fresh key per attempt, the documents' "new UUID per
// send attempt" mistake) the same faults charge some orders twice, while the consumer's
// own dedup still writes one ledger row each: the database alone cannot prevent it.
#include <signal.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "idem/reference/order_service.hpp"
#include "idem/store.hpp"
#include "support/consumer_scenario.hpp"
#include "support/mock_group.hpp"
#include "support/provider_process.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem {
namespace billing_double_charge_test {

using namespace std::chrono_literals;

constexpr int kOrders = 20;

// A read that does not wait for the consumer's write transaction, which stays open
// across the provider calls of its batch (see SqliteBackend::read_scalar).
std::int64_t scalar(const std::string& db_url, const std::string& sql) {
  auto store = open_store(db_url);
  return test::SqliteBackend::read_scalar(*store, sql);
}

int run_to_exit(const std::vector<std::string>& args) {
  auto child = test::ChildProcess::spawn(IDEM_CLI_PATH, args);
  return child.wait(120s);
}

struct Outcome {
  nlohmann::json summary;
  std::int64_t ledger_rows = 0;
  std::int64_t max_ledger_rows_per_order = 0;
  std::int64_t charged_orders = 0;
};

/// Confirms kOrders orders, publishes them, and bills them through a provider that
/// drops the answer of half of its new charges after committing them.
Outcome run_billing_through_resets(bool idempotency_key) {
  Outcome out;
  test::DevBrokerProcess broker(IDEM_CLI_PATH);
  broker.create_topic(std::string(kOrderConfirmedTopic), 3);
  const std::string db = test::fresh_sqlite_url();
  EXPECT_EQ(run_to_exit(
                {"orders", "create", "--db", db, "--count", std::to_string(kOrders), "--migrate"}),
            0);
  EXPECT_EQ(run_to_exit({"relay", "--db", db, "--brokers", broker.bootstrap(), "--until-empty",
                         "--timeout-s", "60"}),
            0);

  test::ProviderProcess provider(IDEM_CLI_PATH, test::fresh_sqlite_url(),
                                 {"--reset-after-commit", "0.5", "--seed", "11"});
  std::vector<std::string> args =
      test::with_mock_group({"consume", "--brokers", broker.bootstrap(), "--db", db, "--handler",
                             "billing", "--provider-url", provider.url(), "--batch", "5"});
  if (!idempotency_key) args.emplace_back("--no-idempotency-key");
  auto consumer = test::ChildProcess::spawn(IDEM_CLI_PATH, args);

  const bool all_billed = test::eventually(
      [&] {
        return scalar(db, "SELECT count(*) FROM orders WHERE payment_status = 'charged'") ==
               kOrders;
      },
      90s);
  EXPECT_TRUE(all_billed) << "not every order was billed in time";
  consumer.kill(SIGTERM);
  EXPECT_EQ(consumer.wait(60s), 0);

  out.summary = test::http_get(provider.url(), "/payments/summary").body;
  std::cout << (idempotency_key ? "with" : "without")
            << " Idempotency-Key, provider summary: " << out.summary.dump() << std::endl;
  out.ledger_rows = scalar(db, "SELECT count(*) FROM billing_ledger");
  out.max_ledger_rows_per_order = scalar(db,
                                         "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n "
                                         "FROM billing_ledger GROUP BY order_id) AS t");
  out.charged_orders = scalar(db, "SELECT count(*) FROM orders WHERE payment_status = 'charged'");
  EXPECT_EQ(provider.stop(), 0);
  return out;
}

TEST(BillingDoubleChargeTest, WithTheKeyEveryOrderIsChargedOnce) {
  IDEM_REQUIRE_CLI();
  const Outcome out = run_billing_through_resets(/*idempotency_key=*/true);
  ASSERT_TRUE(out.summary.is_object());
  EXPECT_GT(out.summary.value("resets_after_commit", 0), 0) << "the fault must actually fire";
  EXPECT_EQ(out.summary.value("charges", -1), kOrders) << out.summary.dump();
  EXPECT_EQ(out.summary.value("orders", -1), kOrders);
  EXPECT_TRUE(out.summary["orders_charged_more_than_once"].empty()) << out.summary.dump();
  EXPECT_GE(out.summary.value("replays", 0), out.summary.value("resets_after_commit", 0))
      << "every lost answer was recovered by a replay";
  EXPECT_EQ(out.ledger_rows, kOrders);
  EXPECT_EQ(out.max_ledger_rows_per_order, 1);
  EXPECT_EQ(out.charged_orders, kOrders);
}

TEST(BillingDoubleChargeTest, WithoutTheKeyLostAnswersChargeTwice) {
  IDEM_REQUIRE_CLI();
  const Outcome out = run_billing_through_resets(/*idempotency_key=*/false);
  ASSERT_TRUE(out.summary.is_object());
  EXPECT_GT(out.summary.value("resets_after_commit", 0), 0);
  EXPECT_FALSE(out.summary["orders_charged_more_than_once"].empty())
      << "the documents' scenario: charged, answer lost, charged again. " << out.summary.dump();
  EXPECT_GT(out.summary.value("charges", 0), kOrders);
  EXPECT_EQ(out.summary.value("replays", -1), 0) << "no key, nothing to replay";
  // The consumer's dedup still holds: one ledger row per order. The extra charges are
  // invisible to our database, which is why the provider must deduplicate too.
  EXPECT_EQ(out.ledger_rows, kOrders);
  EXPECT_EQ(out.max_ledger_rows_per_order, 1);
}

}  // namespace billing_double_charge_test
}  // namespace idem
