// idem::http::AsyncClient against real loopback servers (cpp-httplib): a thousand
// concurrent slow calls each completing once with its own key, the connection limit and
// connection reuse counted on the server's side, the retry rules, and the destructor
// cancelling what is still running, and each endpoint's circuit breaker.
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "http_test_server.hpp"
#include "idem/error.hpp"
#include "idem/http/async_client.hpp"
#include "support/ports.hpp"

namespace idem::http {
namespace async_client_test {

using namespace std::chrono_literals;
using test::answer;
using test::broken_off;
using test::LoopbackServer;
using test::no_answer;
using test::retry_after;
using test::ScriptedServer;

ClientConfig fast_config() {
  ClientConfig c;
  c.retry.initial_backoff = 1ms;
  c.retry.max_backoff = 5ms;
  c.connect_timeout = 2000ms;
  c.total_timeout = 5000ms;
  return c;
}

/// Collects callbacks: how often each call's ran, and its result.
class Results {
 public:
  explicit Results(std::size_t calls) : runs_(calls, 0), results_(calls) {}
  std::function<void(CallResult)> callback(std::size_t call) {
    return [this, call](CallResult r) {
      std::lock_guard lock(mutex_);
      ++runs_.at(call);
      results_.at(call) = std::move(r);
      ++total_;
      changed_.notify_all();
    };
  }
  /// Blocks until `count` callbacks ran (or a minute passed, to fail, not hang).
  [[nodiscard]] bool wait_for(std::size_t count) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, 1min, [&] { return total_ >= count; });
  }
  [[nodiscard]] std::vector<int> runs() const {
    std::lock_guard lock(mutex_);
    return runs_;
  }
  [[nodiscard]] std::vector<CallResult> results() const {
    std::lock_guard lock(mutex_);
    return results_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<int> runs_;
  std::vector<CallResult> results_;
  std::size_t total_ = 0;
};

CallResult call_once(AsyncClient& client, const std::string& url, const std::string& key,
                     std::vector<std::pair<std::string, std::string>> headers = {}) {
  std::promise<CallResult> answered;
  std::future<CallResult> result = answered.get_future();
  client.start(
      Request{
          .url = url, .body = "{}", .idempotency_key = key, .extra_headers = std::move(headers)},
      [&answered](CallResult r) { answered.set_value(std::move(r)); });
  return result.get();
}

// A provider that holds every answer 50-100 ms (its processing time, not a
// synchronisation), answers 503 to the first attempt of every tenth key (if `flaky`) and
// otherwise 200 with the key as the body, and counts attempts per key.
class SlowProvider {
 public:
  explicit SlowProvider(std::size_t threads, bool flaky = true)
      : flaky_(flaky),
        server_([this](const httplib::Request& req, httplib::Response& res) { serve(req, res); },
                threads) {}

  [[nodiscard]] std::string url() const { return server_.url(); }
  [[nodiscard]] const LoopbackServer& server() const { return server_; }
  [[nodiscard]] std::map<std::string, int> attempts_by_key() const {
    std::lock_guard lock(mutex_);
    return attempts_;
  }
  static bool fails_first(std::size_t call) { return call % 10 == 0; }
  static std::string key(std::size_t call) { return "call-" + std::to_string(call); }

 private:
  void serve(const httplib::Request& req, httplib::Response& res) {
    const std::string key = req.get_header_value("Idempotency-Key");
    const std::size_t call = std::stoul(key.substr(5));
    int attempt = 0;
    {
      std::lock_guard lock(mutex_);
      attempt = ++attempts_[key];
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + call % 51));
    if (flaky_ && attempt == 1 && fails_first(call)) {
      res.status = 503;
      res.set_content("busy", "text/plain");
      return;
    }
    res.set_content(key, "text/plain");
  }

  const bool flaky_;
  mutable std::mutex mutex_;
  std::map<std::string, int> attempts_;
  LoopbackServer server_;  // last: its handlers use the members above
};

TEST(AsyncClientTest, AThousandConcurrentSlowCallsEachCompleteOnceOverFewConnections) {
  constexpr std::size_t kCalls = 1000;
  ClientConfig config = fast_config();
  config.max_host_connections = 64;
  std::mutex retry_mutex;
  std::map<std::string, int> retry_reasons;  // shown when a call took other attempts than planned
  config.on_retry = [&](int, std::chrono::milliseconds, std::string_view why) {
    std::lock_guard lock(retry_mutex);
    ++retry_reasons[std::string(why)];
  };
  // More server threads than allowed connections, so a client exceeding the limit would
  // be served (and counted), not held back by the server.
  SlowProvider provider(256);
  Results results(kCalls);
  {
    AsyncClient client(config);
    for (std::size_t i = 0; i < kCalls; ++i) {
      client.start(Request{.url = provider.url(),
                           .body = R"({"amount":"1.00"})",
                           .idempotency_key = SlowProvider::key(i)},
                   results.callback(i));
    }
    ASSERT_TRUE(results.wait_for(kCalls));
  }
  EXPECT_EQ(results.runs(), std::vector<int>(kCalls, 1)) << "every callback exactly once";
  const auto all = results.results();
  const auto attempts = provider.attempts_by_key();
  ASSERT_EQ(attempts.size(), kCalls) << "every attempt carried one of the callers' keys";
  std::size_t requests = 0;
  for (std::size_t i = 0; i < kCalls; ++i) {
    const int expected_attempts = SlowProvider::fails_first(i) ? 2 : 1;
    ASSERT_TRUE(all[i].ok()) << i << ": " << all[i].error;
    EXPECT_EQ(all[i].body, SlowProvider::key(i)) << "each call got its own answer";
    EXPECT_EQ(all[i].attempts, expected_attempts) << i;
    EXPECT_EQ(attempts.at(SlowProvider::key(i)), expected_attempts) << i;
    requests += static_cast<std::size_t>(expected_attempts);
  }
  EXPECT_LE(provider.server().max_open_connections(), config.max_host_connections);
  // Reuse: the server never closes a connection, so every connection beyond the limit
  // would be a connection the client dropped.
  EXPECT_LE(provider.server().connections_accepted(), config.max_host_connections);
  EXPECT_EQ(requests, kCalls + kCalls / 10);
  std::lock_guard lock(retry_mutex);
  EXPECT_EQ(retry_reasons, (std::map<std::string, int>{{"HTTP 503", int{kCalls / 10}}}));
}

TEST(AsyncClientTest, ConnectionLimitHoldsForASmallLimit) {
  ClientConfig config = fast_config();
  config.max_host_connections = 3;
  SlowProvider provider(32);
  constexpr std::size_t kCalls = 60;
  Results results(kCalls);
  {
    AsyncClient client(config);
    for (std::size_t i = 0; i < kCalls; ++i) {
      client.start(
          Request{.url = provider.url(), .body = "{}", .idempotency_key = SlowProvider::key(i)},
          results.callback(i));
    }
    ASSERT_TRUE(results.wait_for(kCalls));
  }
  EXPECT_EQ(results.runs(), std::vector<int>(kCalls, 1));
  EXPECT_EQ(provider.server().max_open_connections(), 3u) << "the limit, and all of it used";
  EXPECT_LE(provider.server().connections_accepted(), 3u);
}

// The billing consumer's shape: each answer starts the next call, so at times few calls
// are handed to libcurl. Its default connection cache (4 idle connections per transfer
// added at that moment) then closed connections the next calls opened again; the
// client's fixed cache keeps every connection for reuse.
TEST(AsyncClientTest, ClosedLoopCallsReuseTheirConnections) {
  ClientConfig config = fast_config();
  config.max_host_connections = 64;
  LoopbackServer server(
      [](const httplib::Request&, httplib::Response& res) {
        res.set_content(R"({"ok":true})", "application/json");
      },
      config.max_host_connections);
  constexpr std::size_t kCalls = 10'000;
  Results results(kCalls);
  // Declared before the client: its callbacks use them until its destructor joined.
  std::atomic<std::size_t> next{0};
  std::function<void(std::size_t)> start_one;
  {
    AsyncClient client(config);
    start_one = [&](std::size_t call) {
      client.start(
          Request{
              .url = server.url(), .body = "{}", .idempotency_key = "call-" + std::to_string(call)},
          [&, done = results.callback(call)](CallResult r) {
            done(std::move(r));
            if (const std::size_t n = next.fetch_add(1); n < kCalls) start_one(n);
          });
    };
    for (std::size_t i = 0; i < config.max_host_connections; ++i) start_one(next.fetch_add(1));
    ASSERT_TRUE(results.wait_for(kCalls));
  }
  EXPECT_EQ(results.runs(), std::vector<int>(kCalls, 1));
  for (const CallResult& r : results.results()) EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_LE(server.connections_accepted(), config.max_host_connections);
}

TEST(AsyncClientTest, WaitingForAConnectionIsNotPartOfTheAttemptsTimeout) {
  // 80 calls of ~50-100 ms each through one connection queue for several seconds,
  // longer than an attempt may take: none may time out, none is retried.
  ClientConfig config = fast_config();
  config.max_host_connections = 1;
  config.total_timeout = 2000ms;
  config.max_attempts = 1;
  SlowProvider provider(4, /*flaky=*/false);
  constexpr std::size_t kCalls = 80;
  Results results(kCalls);
  {
    AsyncClient client(config);
    for (std::size_t i = 0; i < kCalls; ++i) {
      client.start(
          Request{.url = provider.url(), .body = "{}", .idempotency_key = SlowProvider::key(i)},
          results.callback(i));
    }
    ASSERT_TRUE(results.wait_for(kCalls));
  }
  for (const CallResult& r : results.results()) EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(provider.server().connections_accepted(), 1u);
}

struct RetryCase {
  const char* name;
  std::vector<test::Scripted> script;
  CallStatus status;
  long http_status;
  int attempts;
};

void PrintTo(const RetryCase& c, std::ostream* os) {
  *os << c.name;
}

class AsyncRetryTest : public ::testing::TestWithParam<RetryCase> {};

TEST_P(AsyncRetryTest, SameKeyOnEveryAttempt) {
  const RetryCase& c = GetParam();
  ScriptedServer server(c.script);
  ClientConfig config = fast_config();
  config.max_attempts = 3;
  std::vector<std::chrono::milliseconds> waits;
  config.on_retry = [&](int, std::chrono::milliseconds wait, std::string_view) {
    waits.push_back(wait);
  };
  CallResult r;
  {
    AsyncClient client(config);
    r = call_once(client, server.url(), "key-7", {{"traceparent", "00-trace-01"}});
  }
  EXPECT_EQ(r.status, c.status) << r.error;
  EXPECT_EQ(r.http_status, c.http_status);
  EXPECT_EQ(r.attempts, c.attempts);
  EXPECT_EQ(server.keys(), std::vector<std::string>(static_cast<std::size_t>(c.attempts), "key-7"));
  EXPECT_EQ(server.traceparents(),
            std::vector<std::string>(static_cast<std::size_t>(c.attempts), "00-trace-01"));
  EXPECT_EQ(waits.size(), static_cast<std::size_t>(c.attempts - 1)) << "on_retry before each wait";
}

INSTANTIATE_TEST_SUITE_P(
    Answers, AsyncRetryTest,
    ::testing::Values(
        RetryCase{"Unavailable", {answer(503), answer(200)}, CallStatus::Success, 200, 2},
        RetryCase{"StillInFlight", {answer(409), answer(200)}, CallStatus::Success, 200, 2},
        RetryCase{"ResetAfterTheHeaders", {broken_off(), answer(200)}, CallStatus::Success, 200, 2},
        RetryCase{"ServerErrorsUntilGivingUp", {answer(500)}, CallStatus::RetriesExhausted, 500, 3},
        RetryCase{"BadRequest", {answer(400)}, CallStatus::Permanent, 400, 1},
        RetryCase{"Unprocessable", {answer(422)}, CallStatus::Permanent, 422, 1},
        RetryCase{"NotFound", {answer(404)}, CallStatus::Permanent, 404, 1}),
    [](const ::testing::TestParamInfo<RetryCase>& param) { return std::string(param.param.name); });

TEST(AsyncClientTest, HonoursRetryAfterOf429WithATimerNotASleepingThread) {
  ScriptedServer server{retry_after(429, "1"), answer(200)};
  ScriptedServer other{answer(200, "other")};
  ClientConfig config = fast_config();
  std::vector<std::chrono::milliseconds> waits;
  config.on_retry = [&](int, std::chrono::milliseconds wait, std::string_view why) {
    waits.push_back(wait);
    EXPECT_EQ(why, "HTTP 429");
  };
  AsyncClient client(config);
  std::promise<CallResult> slow;
  std::future<CallResult> slow_result = slow.get_future();
  client.start(Request{.url = server.url(), .body = "{}", .idempotency_key = "k-429"},
               [&slow](CallResult r) { slow.set_value(std::move(r)); });
  // While the first call waits its second, the loop serves another call.
  const CallResult quick = call_once(client, other.url(), "k-other");
  EXPECT_TRUE(quick.ok());
  EXPECT_EQ(quick.body, "other");
  const CallResult r = slow_result.get();
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.attempts, 2);
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_GE(waits[0], 1000ms) << "the backoff alone is at most 5 ms; the server asked for a second";
}

TEST(AsyncClientTest, WithoutKeysEveryAttemptGetsAFreshKey) {
  ScriptedServer server{answer(503), broken_off(), answer(200)};
  ClientConfig config = fast_config();
  config.send_idempotency_key = false;
  AsyncClient client(config);
  EXPECT_TRUE(call_once(client, server.url(), "event-key").ok());
  const auto keys = server.keys();
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_NE(keys[0], "event-key");
  EXPECT_NE(keys[0], keys[1]);
  EXPECT_NE(keys[1], keys[2]);
}

TEST(AsyncClientTest, InvalidRequestsAreRejectedBeforeAnythingIsSent) {
  ScriptedServer server{answer(200)};
  AsyncClient client(fast_config());
  const auto start = [&](std::string url, std::string key,
                         std::vector<std::pair<std::string, std::string>> headers = {}) {
    client.start(Request{.url = std::move(url),
                         .body = "{}",
                         .idempotency_key = std::move(key),
                         .extra_headers = std::move(headers)},
                 [](CallResult) { ADD_FAILURE() << "a rejected call has no callback"; });
  };
  EXPECT_THROW(start(server.url(), ""), Error);
  EXPECT_THROW(start(server.url(), "a\r\nX-Evil: 1"), Error);
  EXPECT_THROW(start(server.url(), "k", {{"traceparent", "x\ny"}}), Error);
  EXPECT_THROW(start(server.url(), "k", {{"Bad Name", "v"}}), Error);
  EXPECT_THROW(start("gopherx://nowhere/", "k"), Error);
  EXPECT_THROW(client.start(Request{.url = server.url(), .body = "{}", .idempotency_key = "k"}, {}),
               Error);
  EXPECT_EQ(client.in_flight(), 0u);
  EXPECT_TRUE(call_once(client, server.url(), "k").ok());
  EXPECT_EQ(server.keys(), std::vector<std::string>{"k"});
}

TEST(AsyncClientTest, DestructorCancelsCallsInFlightEachCallbackOnce) {
  // Calls at every stage: answers held by the server, calls queued inside libcurl for a
  // connection, and calls waiting between attempts.
  ScriptedServer hanging{no_answer()};
  ScriptedServer refusing{retry_after(503, "3600")};
  ClientConfig config = fast_config();
  config.max_host_connections = 2;
  config.policy.max_retry_after = std::chrono::hours(1);
  std::mutex mutex;
  std::condition_variable changed;
  int retries_scheduled = 0;
  config.on_retry = [&](int, std::chrono::milliseconds, std::string_view) {
    std::lock_guard lock(mutex);
    ++retries_scheduled;
    changed.notify_all();
  };
  constexpr std::size_t kHanging = 6;
  constexpr std::size_t kWaiting = 2;
  Results results(kHanging + kWaiting);
  auto client = std::make_unique<AsyncClient>(config);
  for (std::size_t i = 0; i < kHanging; ++i) {
    client->start(
        Request{.url = hanging.url(), .body = "{}", .idempotency_key = "h" + std::to_string(i)},
        results.callback(i));
  }
  for (std::size_t i = 0; i < kWaiting; ++i) {
    client->start(
        Request{.url = refusing.url(), .body = "{}", .idempotency_key = "w" + std::to_string(i)},
        results.callback(kHanging + i));
  }
  ASSERT_TRUE(hanging.wait_for_requests(config.max_host_connections));
  {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(changed.wait_for(lock, 1min, [&] { return retries_scheduled == int{kWaiting}; }));
  }
  EXPECT_EQ(client->in_flight(), kHanging + kWaiting);
  client.reset();
  // No waiting: the destructor returns after the last callback.
  EXPECT_EQ(results.runs(), std::vector<int>(kHanging + kWaiting, 1));
  for (const CallResult& r : results.results()) {
    EXPECT_EQ(r.status, CallStatus::RetriesExhausted);
    EXPECT_EQ(r.error, "cancelled");
  }
  EXPECT_EQ(results.results().front().http_status, 0) << "a held call got no answer";
  EXPECT_EQ(results.results().back().http_status, 503) << "a waiting call keeps its last answer";
  EXPECT_EQ(hanging.keys().size(), config.max_host_connections) << "queued calls were never sent";
}

TEST(AsyncClientTest, CallbacksMayStartFurtherCalls) {
  ScriptedServer server{answer(200)};
  AsyncClient client(fast_config());
  std::promise<CallResult> second;
  std::future<CallResult> second_result = second.get_future();
  client.start(Request{.url = server.url(), .body = "{}", .idempotency_key = "first"},
               [&](CallResult first) {
                 EXPECT_TRUE(first.ok());
                 client.start(
                     Request{.url = server.url(), .body = "{}", .idempotency_key = "second"},
                     [&second](CallResult r) { second.set_value(std::move(r)); });
               });
  EXPECT_TRUE(second_result.get().ok());
  EXPECT_EQ(server.keys(), (std::vector<std::string>{"first", "second"}));
}

TEST(AsyncClientTest, AThrowingCallbackDoesNotStopTheLoop) {
  ScriptedServer server{answer(200)};
  AsyncClient client(fast_config());
  client.start(Request{.url = server.url(), .body = "{}", .idempotency_key = "throws"},
               [](CallResult) { throw std::runtime_error("a handler's bug"); });
  EXPECT_TRUE(call_once(client, server.url(), "after").ok());
}

/// What on_breaker reported, in order.
class BreakerEvents {
 public:
  std::function<void(std::string_view, bool, std::string_view)> observer() {
    return [this](std::string_view endpoint, bool open, std::string_view why) {
      std::lock_guard lock(mutex_);
      events_.push_back(fmt::format("{} {} ({})", open ? "open" : "closed", endpoint, why));
    };
  }
  [[nodiscard]] std::vector<std::string> events() const {
    std::lock_guard lock(mutex_);
    return events_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> events_;
};

// 20 calls to an endpoint that answers 503 to its first 70 requests, then 200: more
// failed attempts than the calls' budgets together (20 x 3). With the breaker every call
// waits the outage out and succeeds; without it every call gives up.
constexpr std::size_t kOutageCalls = 20;
constexpr std::size_t kOutageRequests = 70;

std::vector<test::Scripted> outage_then_up() {
  std::vector<test::Scripted> script(kOutageRequests, answer(503, "down"));
  script.push_back(answer(200));
  return script;
}

ClientConfig outage_config(int failures_to_open) {
  ClientConfig config = fast_config();
  config.max_attempts = 3;
  config.breaker.failures_to_open = failures_to_open;
  config.breaker.probe_interval = 5ms;
  return config;
}

/// Starts `count` calls to `url`, keys `<prefix>-0`, `<prefix>-1`, ..., each completing
/// into `results`.
void start_calls(AsyncClient& client, const std::string& url, const std::string& prefix,
                 std::size_t count, Results& results) {
  for (std::size_t i = 0; i < count; ++i) {
    client.start(
        Request{.url = url, .body = "{}", .idempotency_key = fmt::format("{}-{}", prefix, i)},
        results.callback(i));
  }
}

TEST(AsyncClientBreaker, CallsToAnEndpointThatIsDownWaitForItInsteadOfGivingUp) {
  ScriptedServer server(outage_then_up(), 2 * kOutageCalls);
  ClientConfig config = outage_config(3);
  BreakerEvents breaker;
  config.on_breaker = breaker.observer();
  Results results(kOutageCalls);
  {
    AsyncClient client(config);
    start_calls(client, server.url(), "outage", kOutageCalls, results);
    // Past every call's budget: a call giving up would have run its callback by now.
    ASSERT_TRUE(server.wait_for_requests(kOutageCalls * 3 + 1));
    ASSERT_TRUE(results.wait_for(kOutageCalls));
  }
  EXPECT_EQ(results.runs(), std::vector<int>(kOutageCalls, 1));
  for (const CallResult& r : results.results()) {
    EXPECT_EQ(r.status, CallStatus::Success) << r.error;
    EXPECT_GT(r.attempts, 0);
  }
  const std::string endpoint = endpoint_of(server.url());
  EXPECT_EQ(breaker.events(),
            (std::vector<std::string>{fmt::format("open {} (HTTP 503)", endpoint),
                                      fmt::format("closed {} (it answered HTTP 200)", endpoint)}));
  // While open, one probe at a time: the calls in flight when it opened, the probes, and
  // each call's successful attempt; without the breaker's hold the calls' retries would
  // have spent the 70 failures faster and given up.
  EXPECT_LE(server.keys().size(), kOutageRequests + 2 * kOutageCalls);
}

TEST(AsyncClientBreaker, WithoutABreakerTheSameOutageEndsEveryCall) {
  ScriptedServer server(outage_then_up(), 2 * kOutageCalls);
  ClientConfig config = outage_config(0);
  BreakerEvents breaker;
  config.on_breaker = breaker.observer();
  Results results(kOutageCalls);
  {
    AsyncClient client(config);
    start_calls(client, server.url(), "outage", kOutageCalls, results);
    ASSERT_TRUE(results.wait_for(kOutageCalls));
  }
  for (const CallResult& r : results.results()) {
    EXPECT_EQ(r.status, CallStatus::RetriesExhausted);
    EXPECT_EQ(r.attempts, 3);
  }
  EXPECT_TRUE(breaker.events().empty());
}

TEST(AsyncClientBreaker, AnEndpointThatAnswersIsUpWhateverItAnswers) {
  // 500 is an answer from a server that runs (a bug, not an outage), as 409 and 429 are:
  // the calls spend their attempts and the breaker stays closed.
  ScriptedServer server{answer(500, "bug")};
  ClientConfig config = outage_config(2);
  BreakerEvents breaker;
  config.on_breaker = breaker.observer();
  Results results(4);
  {
    AsyncClient client(config);
    start_calls(client, server.url(), "bug", 4, results);
    ASSERT_TRUE(results.wait_for(4));
  }
  for (const CallResult& r : results.results()) EXPECT_EQ(r.status, CallStatus::RetriesExhausted);
  EXPECT_TRUE(breaker.events().empty());
}

TEST(AsyncClientBreaker, ARefusedConnectionOpensItAndTheDestructorCancelsWhatItHolds) {
  // A port nothing listens on: every attempt is refused. The calls are held (never
  // RetriesExhausted with the failure) until the client is destroyed.
  ClientConfig config = outage_config(3);
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::string> events;
  config.on_breaker = [&](std::string_view endpoint, bool open, std::string_view why) {
    std::lock_guard lock(mutex);
    events.push_back(fmt::format("{} {} {}", open, endpoint, why));
    changed.notify_all();
  };
  const std::string url = fmt::format("http://127.0.0.1:{}/call", idem::test::unused_listen_port());
  Results results(5);
  {
    AsyncClient client(config);
    start_calls(client, url, "refused", 5, results);
    std::unique_lock lock(mutex);
    ASSERT_TRUE(changed.wait_for(lock, 1min, [&] { return !events.empty(); }));
    EXPECT_TRUE(events.front().starts_with(fmt::format("true {} ", endpoint_of(url))))
        << events.front();
    EXPECT_EQ(client.in_flight(), 5u) << "no call ended for the outage";
  }
  for (const CallResult& r : results.results()) {
    EXPECT_EQ(r.status, CallStatus::RetriesExhausted);
    EXPECT_EQ(r.error, "cancelled");
  }
}

}  // namespace async_client_test
}  // namespace idem::http
