// The payment provider's rules (docs/reference-system.md; IDEM-4), over real HTTP on loopback:
// a key is required, a replay charges nothing, a different request under the same key
// is 422, a request in flight is 409 (two real concurrent requests), keys expire after
// the retention, faults do what they say, and keys survive a restart of a real
// `idem provider` process. It holds 2,000 concurrent requests on a few threads, and
// commits concurrent charges together (group commit).
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <latch>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "idem/http/idempotent_client.hpp"
#include "idem/reference/payment_provider.hpp"
#include "idem/store.hpp"
#include "support/consumer_scenario.hpp"
#include "support/manual_clock.hpp"
#include "support/provider_process.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem::http {
namespace provider_test {

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

/// Threads of this process now.
int thread_count() {
  int n = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task"))
    ++n;
  return n;
}

/// Sends `count` charges at once, each on its own connection (so the provider holds them
/// all concurrently), from one Asio event loop on the calling thread: key
/// `<prefix>-<i>` for order i + 1. Returns each one's HTTP status (0: no answer).
/// `on_event` runs after every connect and every answer.
std::vector<int> charge_all_at_once(
    int port, int count, const std::string& prefix, const std::function<void()>& on_event = [] {}) {
  namespace asio = boost::asio;
  namespace beast = boost::beast;
  struct Call {
    explicit Call(asio::io_context& io) : stream(io) {}
    beast::tcp_stream stream;
    beast::http::request<beast::http::string_body> request;
    beast::flat_buffer buffer;
    beast::http::response<beast::http::string_body> response;
  };
  asio::io_context io;
  const asio::ip::tcp::endpoint provider(asio::ip::make_address("127.0.0.1"),
                                         static_cast<unsigned short>(port));
  std::vector<int> statuses(static_cast<std::size_t>(count), 0);
  for (int i = 0; i < count; ++i) {
    auto call = std::make_shared<Call>(io);
    call->request = {beast::http::verb::post, "/payments/charge", 11};
    call->request.set(beast::http::field::host, "127.0.0.1");
    call->request.set(beast::http::field::content_type, "application/json");
    call->request.set("Idempotency-Key", fmt::format("{}-{}", prefix, i));
    call->request.body() = charge_body(i + 1, "1.00");
    call->request.prepare_payload();
    // A guard against a hung provider, far above any answer time; not a timing assertion.
    call->stream.expires_after(std::chrono::minutes(2));
    call->stream.async_connect(provider, [call, i, &statuses, &on_event](beast::error_code ec) {
      on_event();
      if (ec) return;
      beast::http::async_write(
          call->stream, call->request,
          [call, i, &statuses, &on_event](beast::error_code wec, std::size_t) {
            if (wec) return;
            beast::http::async_read(
                call->stream, call->buffer, call->response,
                [call, i, &statuses, &on_event](beast::error_code rec, std::size_t) {
                  on_event();
                  if (!rec) statuses[static_cast<std::size_t>(i)] = call->response.result_int();
                });
          });
    });
  }
  io.run();
  return statuses;
}

class ProviderTest : public ::testing::Test {
 protected:
  void start(ProviderConfig config = {}, const StoreOptions& options = {}) {
    config.clock = &clock_;
    provider_ = std::make_unique<PaymentProvider>(open_store(db_url_, options), std::move(config));
    port_ = provider_->start("127.0.0.1", 0);
  }
  [[nodiscard]] std::string charge_url() const {
    return provider_->base_url() + "/payments/charge";
  }
  CallResult charge(std::string_view key, std::int64_t order_id, std::string_view amount,
                    const Headers& headers = {}) {
    IdempotentClient client(one_attempt());
    return client.post_json(charge_url(), charge_body(order_id, amount), key, headers);
  }

  std::string db_url_ = test::fresh_sqlite_url();
  test::ManualClock clock_;
  std::unique_ptr<PaymentProvider> provider_;
  int port_ = 0;
};

TEST_F(ProviderTest, RequiresAValidIdempotencyKeyAndBody) {
  start();
  const auto no_key = http_post(provider_->base_url(), "/payments/charge", charge_body(1, "5.00"));
  EXPECT_EQ(no_key.status, 400);
  EXPECT_EQ(no_key.body.value("type", ""), "urn:idem:problem:idempotency-key-missing");
  const auto long_key = http_post(provider_->base_url(), "/payments/charge", charge_body(1, "5.00"),
                                  {{"Idempotency-Key", std::string(256, 'k')}});
  EXPECT_EQ(long_key.status, 400);
  EXPECT_EQ(long_key.body.value("type", ""), "urn:idem:problem:idempotency-key-malformed");
  for (const std::string body :
       {"not json", R"({"order_id":1})", R"({"order_id":0,"amount":"1"})",
        R"({"order_id":1,"amount":1.5})", R"({"order_id":1,"amount":"1.234"})"}) {
    const auto bad =
        http_post(provider_->base_url(), "/payments/charge", body, {{"Idempotency-Key", "k"}});
    EXPECT_EQ(bad.status, 400) << body;
    EXPECT_EQ(bad.body.value("type", ""), "urn:idem:problem:invalid-request") << body;
  }
  EXPECT_EQ(provider_->summary().charges, 0);
}

TEST_F(ProviderTest, SameKeySameRequestReplaysTheFirstAnswer) {
  start();
  const CallResult first =
      charge("key-1", 7, "12.3",
             {{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}});
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
      EXPECT_NE(r.body.find("urn:idem:problem:card-declined"), std::string::npos);
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
  const auto set =
      http_post(provider_->base_url(), "/admin/faults", R"({"unavailable":1,"latency_ms":5})");
  ASSERT_EQ(set.status, 200);
  EXPECT_EQ(provider_->faults().unavailable, 1.0);
  EXPECT_EQ(provider_->faults().latency, 5ms);
  EXPECT_EQ(charge("key-1", 1, "1.00").http_status, 503);
  EXPECT_EQ(http_post(provider_->base_url(), "/admin/faults", R"({"unavailable":2})").status, 400);
  EXPECT_EQ(http_post(provider_->base_url(), "/admin/faults", R"({"nonsense":1})").status, 400);
  EXPECT_EQ(provider_->faults().unavailable, 1.0) << "a rejected change changes nothing";
}

// 2,000 requests held open at once by a 200 ms latency: every one is answered and
// charged once, and the provider does it on its two threads (event loop, store thread),
// not a thread per request. The threads are counted while the requests are open.
TEST_F(ProviderTest, HoldsTwoThousandConcurrentRequestsOnAFewThreads) {
  constexpr int kRequests = 2000;
  const int threads_before = thread_count();
  ProviderConfig config;
  config.faults.latency = 200ms;
  start(config);
  int most_threads = thread_count();
  const std::vector<int> statuses = charge_all_at_once(
      port_, kRequests, "many", [&] { most_threads = std::max(most_threads, thread_count()); });
  EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 200), kRequests);
  EXPECT_LE(most_threads - threads_before, 2) << "the event loop and the store thread";
  const ProviderSummary s = provider_->summary();
  EXPECT_EQ(s.charges, kRequests);
  EXPECT_EQ(s.orders, kRequests);
  EXPECT_TRUE(s.orders_charged_more_than_once.empty());
  const ProviderStats stats = provider_->stats();
  EXPECT_EQ(stats.charges_committed, kRequests);
  EXPECT_EQ(stats.requests_in_progress, 0);
  RecordProperty("peak_requests_in_progress", static_cast<int>(stats.peak_requests_in_progress));
  RecordProperty("transactions", static_cast<int>(stats.transactions));
}

// Group commit: while the database's write lock is held elsewhere, N charges arrive and
// queue up behind the store thread; once the lock is gone they commit in at most two
// transactions (the one that was waiting for the lock, and everything queued behind
// it), and each is stored once. Sending them again replays every answer.
TEST_F(ProviderTest, ConcurrentChargesCommitTogether) {
  constexpr int kRequests = 300;
  StoreOptions patient;
  patient.busy_timeout = 120s;  // the provider's BEGIN waits for the test's lock
  start({}, patient);
  const std::int64_t transactions_before = provider_->stats().transactions;

  auto blocker = open_store(db_url_);
  auto write_lock = blocker->begin();  // BEGIN IMMEDIATE: SQLite's write lock
  auto answers =
      std::async(std::launch::async, [&] { return charge_all_at_once(port_, kRequests, "group"); });
  ASSERT_TRUE(
      test::eventually([&] { return provider_->stats().requests_in_progress == kRequests; }, 60s))
      << "in progress: " << provider_->stats().requests_in_progress;
  write_lock->rollback();
  const std::vector<int> statuses = answers.get();
  EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 200), kRequests);

  const ProviderStats stats = provider_->stats();
  EXPECT_LE(stats.transactions - transactions_before, 2) << "fewer commits than charges";
  EXPECT_LT(stats.transactions - transactions_before, kRequests);
  EXPECT_GE(stats.largest_batch, kRequests / 2);
  const std::vector<Charge> charges = provider_->charges();
  ASSERT_EQ(charges.size(), static_cast<std::size_t>(kRequests));
  std::set<std::string> keys;
  for (const Charge& c : charges) keys.insert(c.idempotency_key);
  EXPECT_EQ(keys.size(), static_cast<std::size_t>(kRequests)) << "each charge stored once";
  EXPECT_TRUE(provider_->summary().orders_charged_more_than_once.empty());

  const std::vector<int> again = charge_all_at_once(port_, kRequests, "group");
  EXPECT_EQ(std::count(again.begin(), again.end(), 200), kRequests);
  EXPECT_EQ(provider_->summary().replays, kRequests);
  EXPECT_EQ(provider_->summary().charges, kRequests);
}

// stop() while a request waits out its latency: the request is answered 503 and its key
// released (nothing was charged), so its retry charges once.
TEST_F(ProviderTest, StopReleasesARequestWaitingOutItsLatency) {
  ProviderConfig config;
  config.faults.latency = 1h;
  start(config);
  auto waiting = std::async(std::launch::async, [&] { return charge("key-1", 7, "1.00"); });
  ASSERT_TRUE(test::eventually([&] { return provider_->stats().transactions == 1; }, 30s))
      << "the claim commits before the latency";
  provider_->stop();
  EXPECT_EQ(waiting.get().http_status, 503);
  EXPECT_EQ(provider_->summary().charges, 0);
  provider_.reset();
  start();  // the same database: the key must be free
  EXPECT_TRUE(charge("key-1", 7, "1.00").ok());
  EXPECT_EQ(provider_->summary().charges, 1);
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
    const CallResult r =
        client.post_json(provider.url() + "/payments/charge", charge_body(3, "9.99"), "key-r");
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
  const auto count = [&](const std::string& sql) {
    return test::SqliteBackend::read_scalar(*store, sql);
  };
  {
    // The latency holds every new charge in flight after its claim committed.
    test::ProviderProcess provider(IDEM_CLI_PATH, db, {"--latency", "600000ms"});
    ClientConfig config = one_attempt();
    config.total_timeout = 300ms;
    IdempotentClient client(config);
    const CallResult r =
        client.post_json(provider.url() + "/payments/charge", charge_body(5, "3.00"), "key-k");
    EXPECT_EQ(r.http_status, 0) << "no answer while in flight";
    ASSERT_TRUE(test::eventually(
        [&] {
          return count("SELECT count(*) FROM provider_idempotency_key WHERE state = 'in_flight'") ==
                 1;
        },
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

}  // namespace provider_test
}  // namespace idem::http
