// The payment provider's rules (SPEC section 2, IDEM-4), over real HTTP on loopback:
// a key is required, a replay charges nothing, a different request under the same key
// is 422, a request in flight is 409 (two real concurrent requests), keys expire after
// the retention, faults do what they say, and keys survive a restart of a real
// `idem provider` process.
#include <signal.h>

#include <chrono>
#include <future>
#include <latch>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/http/idempotent_client.hpp"
#include "idem/reference/payment_provider.hpp"
#include "idem/store.hpp"
#include "support/wait.hpp"
#include "support/test_env.hpp"
#include "support/consumer_scenario.hpp"
#include "support/manual_clock.hpp"
#include "support/provider_process.hpp"
#include "support/store_backends.hpp"

namespace idem::http {
namespace {

using namespace std::chrono_literals;
using test::http_get;
using test::http_post;
using Headers = std::vector<std::pair<std::string, std::string>>;

std::string charge_body(std::int64_t order_id, std::string_view amount) {
  return fmt::format(R"({{"order_id":{},"amount":"{}"}})", order_id, amount);
}

/// A client that tries once, so each call is exactly one request the test can reason about.
ClientConfig one_attempt() {
  ClientConfig c;
  c.max_attempts = 1;
  return c;
}

class ProviderTest : public ::testing::Test {
 protected:
  void start(ProviderConfig config = {}) {
    config.clock = &clock_;
    provider_ = std::make_unique<PaymentProvider>(open_store(db_url_), std::move(config));
    provider_->start("127.0.0.1", 0);
  }
  [[nodiscard]] std::string charge_url() const { return provider_->base_url() + "/payments/charge"; }
  CallResult charge(std::string_view key, std::int64_t order_id, std::string_view amount,
                    const Headers& headers = {}) {
    IdempotentClient client(one_attempt());
    return client.post_json(charge_url(), charge_body(order_id, amount), key, headers);
  }

  std::string db_url_ = test::fresh_sqlite_url();
  test::ManualClock clock_;
  std::unique_ptr<PaymentProvider> provider_;
};

TEST_F(ProviderTest, RequiresAValidIdempotencyKeyAndBody) {
  start();
  const auto no_key = http_post(provider_->base_url(), "/payments/charge", charge_body(1, "5.00"));
  EXPECT_EQ(no_key.status, 400);
  EXPECT_EQ(no_key.body.value("error", ""), "missing_idempotency_key");
  const auto long_key = http_post(provider_->base_url(), "/payments/charge", charge_body(1, "5.00"),
                                  {{"Idempotency-Key", std::string(256, 'k')}});
  EXPECT_EQ(long_key.status, 400);
  EXPECT_EQ(long_key.body.value("error", ""), "invalid_idempotency_key");
  for (const std::string body : {"not json", R"({"order_id":1})", R"({"order_id":0,"amount":"1"})",
                                 R"({"order_id":1,"amount":1.5})", R"({"order_id":1,"amount":"1.234"})"}) {
    const auto bad = http_post(provider_->base_url(), "/payments/charge", body, {{"Idempotency-Key", "k"}});
    EXPECT_EQ(bad.status, 400) << body;
    EXPECT_EQ(bad.body.value("error", ""), "invalid_request") << body;
  }
  EXPECT_EQ(provider_->summary().charges, 0);
}

TEST_F(ProviderTest, SameKeySameRequestReplaysTheFirstAnswer) {
  start();
  const CallResult first = charge("key-1", 7, "12.3", {{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}});
  ASSERT_TRUE(first.ok()) << first.error << first.body;
  // "12.30" is the same amount as "12.3": the same request.
  const CallResult again = charge("key-1", 7, "12.30");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.body, first.body);

  const auto charges = provider_->charges(7);
  ASSERT_EQ(charges.size(), 1u);
  EXPECT_EQ(charges[0].amount, "12.30");
  EXPECT_EQ(charges[0].idempotency_key, "key-1");
  EXPECT_EQ(charges[0].traceparent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  EXPECT_NE(first.body.find(charges[0].payment_id), std::string::npos);
  const ProviderSummary s = provider_->summary();
  EXPECT_EQ(s.charges, 1);
  EXPECT_EQ(s.replays, 1);

  // The audit endpoints say the same over HTTP.
  const auto listed = http_get(provider_->base_url(), "/payments?order_id=7");
  ASSERT_EQ(listed.status, 200);
  ASSERT_EQ(listed.body.size(), 1u);
  EXPECT_EQ(listed.body[0].value("payment_id", ""), charges[0].payment_id);
  EXPECT_EQ(listed.body[0].value("traceparent", ""), charges[0].traceparent);
  const auto summary = http_get(provider_->base_url(), "/payments/summary");
  EXPECT_EQ(summary.body.value("charges", -1), 1);
  EXPECT_EQ(summary.body.value("replays", -1), 1);
  EXPECT_TRUE(summary.body["orders_charged_more_than_once"].empty());
}

TEST_F(ProviderTest, SameKeyDifferentRequestIs422) {
  start();
  ASSERT_TRUE(charge("key-1", 7, "12.30").ok());
  for (const auto& [order, amount] : {std::pair{7, "12.31"}, std::pair{8, "12.30"}}) {
    const CallResult r = charge("key-1", order, amount);
    EXPECT_EQ(r.status, CallStatus::Permanent);
    EXPECT_EQ(r.http_status, 422);
  }
  EXPECT_EQ(provider_->summary().charges, 1);
  EXPECT_EQ(provider_->summary().conflicts, 2);
}

TEST_F(ProviderTest, SameKeyWhileInFlightIs409) {
  std::latch first_claimed(1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  ProviderConfig config;
  config.after_claim = [&](std::string_view) {
    first_claimed.count_down();
    released.wait();  // the first request stays in flight until the test lets it go
  };
  start(config);

  auto first = std::async(std::launch::async, [&] { return charge("key-1", 7, "10.00"); });
  first_claimed.wait();
  // A real second request on its own connection while the first is held in flight.
  const CallResult second = charge("key-1", 7, "10.00");
  EXPECT_EQ(second.http_status, 409);
  EXPECT_EQ(second.status, CallStatus::RetriesExhausted) << "409 is retryable: same key, later";
  release.set_value();
  const CallResult first_result = first.get();
  EXPECT_TRUE(first_result.ok());

  // Once the first finished, the same request is a replay, not a second charge.
  const CallResult third = charge("key-1", 7, "10.00");
  EXPECT_TRUE(third.ok());
  EXPECT_EQ(third.body, first_result.body);
  EXPECT_EQ(provider_->summary().charges, 1);
  EXPECT_EQ(provider_->summary().conflicts, 1);
}

TEST_F(ProviderTest, KeysExpireAfterTheRetention) {
  ProviderConfig config;
  config.key_retention = 1h;
  start(config);
  ASSERT_TRUE(charge("key-1", 7, "1.00").ok());
  clock_.advance(59min);
  ASSERT_TRUE(charge("key-1", 7, "1.00").ok());
  EXPECT_EQ(provider_->summary().charges, 1) << "inside the retention: a replay";
  clock_.advance(2min);
  ASSERT_TRUE(charge("key-1", 7, "1.00").ok());
  EXPECT_EQ(provider_->summary().charges, 2) << "after the retention the key is new again";
  EXPECT_EQ(provider_->summary().orders_charged_more_than_once, std::vector<std::int64_t>{7});
}

TEST_F(ProviderTest, UnavailableStoresNothing) {
  ProviderConfig config;
  config.faults.unavailable = 1.0;
  start(config);
  const CallResult r = charge("key-1", 7, "1.00");
  EXPECT_EQ(r.http_status, 503);
  EXPECT_EQ(r.status, CallStatus::RetriesExhausted);
  provider_->set_faults({});
  EXPECT_TRUE(charge("key-1", 7, "1.00").ok()) << "the 503 left no claim behind";
  EXPECT_EQ(provider_->summary().charges, 1);
  EXPECT_EQ(provider_->summary().unavailable, 1);
}

TEST_F(ProviderTest, ResetAfterCommitChargesAndLosesTheAnswer) {
  ProviderConfig config;
  config.faults.reset_after_commit = 1.0;
  start(config);
  const CallResult lost = charge("key-1", 7, "1.00");
  EXPECT_EQ(lost.status, CallStatus::RetriesExhausted);
  EXPECT_EQ(lost.http_status, 0) << "the answer must not arrive";
  EXPECT_EQ(provider_->summary().charges, 1) << "but the charge was committed";
  // The retry with the same key gets the stored answer (a replay is never reset).
  const CallResult retried = charge("key-1", 7, "1.00");
  EXPECT_TRUE(retried.ok());
  EXPECT_EQ(provider_->summary().charges, 1);
  EXPECT_EQ(provider_->summary().resets_after_commit, 1);
  EXPECT_EQ(provider_->summary().replays, 1);
}

TEST_F(ProviderTest, DeclinesAreDeterministicAndReleaseTheKey) {
  ProviderConfig config;
  config.faults.decline = 0.5;
  config.seed = 7;
  start(config);
  int declined = 0;
  for (std::int64_t order = 1; order <= 40; ++order) {
    const std::string key = fmt::format("key-{}", order);
    const CallResult r = charge(key, order, "2.00");
    const CallResult again = charge(key, order, "2.00");
    EXPECT_EQ(again.http_status, r.http_status) << "a charge is replayed, a decline decided again";
    if (r.http_status == 402) {
      ++declined;
      EXPECT_EQ(r.status, CallStatus::Permanent);
      EXPECT_NE(r.body.find("card_declined"), std::string::npos);
      EXPECT_TRUE(provider_->charges(order).empty());
      // Another key for the same order is declined too: the decision belongs to the order.
      EXPECT_EQ(charge(key + "-b", order, "2.00").http_status, 402);
    } else {
      EXPECT_TRUE(r.ok());
    }
  }
  EXPECT_GT(declined, 0);
  EXPECT_LT(declined, 40);
  EXPECT_EQ(provider_->summary().charges, 40 - declined);

  // The cause is fixed: a declined key was not kept, so the same key now charges once.
  provider_->set_faults({});
  for (std::int64_t order = 1; order <= 40; ++order) {
    const std::string key = fmt::format("key-{}", order);
    EXPECT_TRUE(charge(key, order, "2.00").ok());
    EXPECT_EQ(provider_->charges(order).size(), 1U) << "order " << order;
  }
}

TEST_F(ProviderTest, FaultsChangeAtRuntimeOverHttp) {
  start();
  const auto set = http_post(provider_->base_url(), "/admin/faults", R"({"unavailable":1,"latency_ms":5})");
  ASSERT_EQ(set.status, 200);
  EXPECT_EQ(provider_->faults().unavailable, 1.0);
  EXPECT_EQ(provider_->faults().latency, 5ms);
  EXPECT_EQ(charge("key-1", 1, "1.00").http_status, 503);
  EXPECT_EQ(http_post(provider_->base_url(), "/admin/faults", R"({"unavailable":2})").status, 400);
  EXPECT_EQ(http_post(provider_->base_url(), "/admin/faults", R"({"nonsense":1})").status, 400);
  EXPECT_EQ(provider_->faults().unavailable, 1.0) << "a rejected change changes nothing";
}

// The key store is durable: a real `idem provider` process, stopped and started again
// on the same database file, replays the first answer instead of charging again.
TEST(ProviderProcessTest, ReplaysAfterARestart) {
  IDEM_REQUIRE_CLI();
  const std::string db = test::fresh_sqlite_url();
  ClientConfig config = one_attempt();
  std::string first_body;
  {
    test::ProviderProcess provider(IDEM_CLI_PATH, db);
    IdempotentClient client(config);
    const CallResult r = client.post_json(provider.url() + "/payments/charge", charge_body(3, "9.99"), "key-r");
    ASSERT_TRUE(r.ok()) << r.error;
    first_body = r.body;
    EXPECT_EQ(provider.stop(), 0);
  }
  test::ProviderProcess restarted(IDEM_CLI_PATH, db);
  IdempotentClient client(config);
  const CallResult replay =
      client.post_json(restarted.url() + "/payments/charge", charge_body(3, "9.99"), "key-r");
  ASSERT_TRUE(replay.ok()) << replay.error;
  EXPECT_EQ(replay.body, first_body);
  const CallResult conflict =
      client.post_json(restarted.url() + "/payments/charge", charge_body(3, "1.00"), "key-r");
  EXPECT_EQ(conflict.http_status, 422);
  const auto summary = http_get(restarted.url(), "/payments/summary");
  EXPECT_EQ(summary.body.value("charges", -1), 1);
  EXPECT_EQ(summary.body.value("replays", -1), 1);
  EXPECT_EQ(restarted.stop(), 0);
}

// A provider killed while a charge is in flight leaves only the key's claim (the charge
// and its answer commit together, so nothing was charged). The restarted provider
// forgets the claim: the retry charges once instead of meeting 409 forever.
TEST(ProviderProcessTest, ClaimOfAKilledProviderIsForgottenOnRestart) {
  IDEM_REQUIRE_CLI();
  const std::string db = test::fresh_sqlite_url();
  auto store = open_store(db);  // the test reads the provider's tables through it
  const auto count = [&](const std::string& sql) { return test::SqliteBackend::read_scalar(*store, sql); };
  {
    // The latency holds every new charge in flight after its claim committed.
    test::ProviderProcess provider(IDEM_CLI_PATH, db, {"--latency-ms", "600000"});
    ClientConfig config = one_attempt();
    config.total_timeout = 300ms;
    IdempotentClient client(config);
    const CallResult r =
        client.post_json(provider.url() + "/payments/charge", charge_body(5, "3.00"), "key-k");
    EXPECT_EQ(r.http_status, 0) << "no answer while in flight";
    ASSERT_TRUE(test::eventually(
        [&] { return count("SELECT count(*) FROM provider_idempotency_key WHERE state = 'in_flight'") == 1; },
        30s));
    provider.crash();
  }
  EXPECT_EQ(count("SELECT count(*) FROM provider_charge"), 0);
  test::ProviderProcess restarted(IDEM_CLI_PATH, db);
  IdempotentClient client(one_attempt());
  const CallResult retry =
      client.post_json(restarted.url() + "/payments/charge", charge_body(5, "3.00"), "key-k");
  EXPECT_TRUE(retry.ok()) << retry.http_status << " " << retry.body;
  EXPECT_EQ(count("SELECT count(*) FROM provider_charge WHERE order_id = 5"), 1);
  EXPECT_EQ(restarted.stop(), 0);
}

}  // namespace
}  // namespace idem::http
