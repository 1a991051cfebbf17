// idem::http::IdempotentClient against a real HTTP server (cpp-httplib on loopback)
// whose answers each test scripts: the same key on every attempt, what is retried and
// what is permanent, Retry-After, timeouts, key validation and connection reuse. The
// client is AsyncClient waited on (async_client_test.cpp tests concurrency).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "http_test_server.hpp"
#include "idem/error.hpp"
#include "idem/http/idempotent_client.hpp"

namespace idem::http {
namespace http_client_test {

using namespace std::chrono_literals;

using test::answer;
using test::broken_off;
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

TEST(HttpClientTest, RetriesTransientFailuresWithTheSameKey) {
  ScriptedServer server{answer(503), broken_off(), answer(409), answer(500),
                        answer(200, R"({"payment_id":"p1"})")};
  IdempotentClient client(fast_config());
  const CallResult r =
      client.post_json(server.url(), R"({"x":1})", "key-123", {{"traceparent", "00-trace-01"}});
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.http_status, 200);
  EXPECT_EQ(r.body, R"({"payment_id":"p1"})");
  EXPECT_EQ(r.attempts, 5);
  EXPECT_EQ(server.keys(), std::vector<std::string>(5, "key-123"));
  EXPECT_EQ(server.traceparents(), std::vector<std::string>(5, "00-trace-01"));
}

TEST(HttpClientTest, PermanentAnswersAreNotRetried) {
  for (const int status : {400, 402, 404, 422}) {
    ScriptedServer server{answer(status, R"({"error":"no"})")};
    IdempotentClient client(fast_config());
    const CallResult r = client.post_json(server.url(), "{}", "k");
    EXPECT_EQ(r.status, CallStatus::Permanent) << status;
    EXPECT_EQ(r.http_status, status);
    EXPECT_EQ(r.body, R"({"error":"no"})");
    EXPECT_EQ(r.attempts, 1);
    EXPECT_EQ(server.keys().size(), 1u);
  }
}

TEST(HttpClientTest, GivesUpAfterMaxAttemptsWithTheLastFailure) {
  ScriptedServer server{answer(503, "down")};
  ClientConfig config = fast_config();
  config.max_attempts = 3;
  IdempotentClient client(config);
  const CallResult r = client.post_json(server.url(), "{}", "k");
  EXPECT_EQ(r.status, CallStatus::RetriesExhausted);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(r.http_status, 503);
  EXPECT_EQ(r.error, "HTTP 503");
  EXPECT_EQ(server.keys().size(), 3u);
}

TEST(HttpClientTest, HonoursRetryAfterOf429) {
  ScriptedServer server{retry_after(429, "1"), answer(200)};
  ClientConfig config = fast_config();
  std::vector<std::chrono::milliseconds> waits;
  config.on_retry = [&](int, std::chrono::milliseconds wait, std::string_view) {
    waits.push_back(wait);
  };
  IdempotentClient client(config);
  const CallResult r = client.post_json(server.url(), "{}", "k");
  EXPECT_TRUE(r.ok());
  ASSERT_EQ(waits.size(), 1u);
  // The backoff alone would be at most 5 ms; the server asked for a second.
  EXPECT_GE(waits[0], 1000ms);
}

TEST(HttpClientTest, RetryAfterIsCapped) {
  ScriptedServer server{retry_after(503, "3600"), answer(200)};
  ClientConfig config = fast_config();
  config.policy.max_retry_after = 20ms;
  std::vector<std::chrono::milliseconds> waits;
  config.on_retry = [&](int, std::chrono::milliseconds wait, std::string_view) {
    waits.push_back(wait);
  };
  IdempotentClient client(config);
  EXPECT_TRUE(client.post_json(server.url(), "{}", "k").ok());
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_EQ(waits[0], 20ms);
}

TEST(HttpClientTest, TimeoutIsRetriedThenReported) {
  ScriptedServer server{no_answer()};
  ClientConfig config = fast_config();
  config.total_timeout = 200ms;
  config.max_attempts = 2;
  IdempotentClient client(config);
  const CallResult r = client.post_json(server.url(), "{}", "k");
  EXPECT_EQ(r.status, CallStatus::RetriesExhausted);
  EXPECT_EQ(r.http_status, 0);
  EXPECT_NE(r.error.find("imeout"), std::string::npos) << r.error;
}

TEST(HttpClientTest, ConnectionRefusedIsRetried) {
  // A port that was free a moment ago and has no listener: bind without listen, close.
  int port = 0;
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port = ntohs(addr.sin_port);
    ::close(fd);
  }
  ClientConfig config = fast_config();
  config.max_attempts = 2;
  IdempotentClient client(config);
  const CallResult r =
      client.post_json("http://127.0.0.1:" + std::to_string(port) + "/call", "{}", "k");
  EXPECT_EQ(r.status, CallStatus::RetriesExhausted);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.http_status, 0);
  EXPECT_FALSE(r.error.empty());
}

TEST(HttpClientTest, KeysAreValidated) {
  EXPECT_NO_THROW(validate_idempotency_key(std::string(kMaxIdempotencyKeyLength, 'k')));
  for (const std::string& bad : {std::string(), std::string(kMaxIdempotencyKeyLength + 1, 'k'),
                                 std::string("a\r\nX-Evil: 1"), std::string("a\nb"),
                                 std::string("a\rb"), std::string("a\0b", 3)}) {
    try {
      validate_idempotency_key(bad);
      ADD_FAILURE() << "accepted a bad key of length " << bad.size();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("Idempotency-Key"), std::string::npos) << e.what();
    }
  }
  ScriptedServer server{answer(200)};
  IdempotentClient client(fast_config());
  EXPECT_THROW((void)client.post_json(server.url(), "{}", "a\r\nb"), Error);
  EXPECT_THROW((void)client.post_json(server.url(), "{}", "k", {{"traceparent", "x\r\ny"}}), Error);
  EXPECT_TRUE(server.keys().empty()) << "nothing may be sent with a bad header";
}

TEST(HttpClientTest, UnusableUrlIsAnErrorNotARetry) {
  IdempotentClient client(fast_config());
  for (const char* url : {"gopherx://nowhere/", "ftp://127.0.0.1/call", "http://[::1/call", ""}) {
    try {
      (void)client.post_json(url, "{}", "k");
      ADD_FAILURE() << "accepted " << url;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << url;
    }
  }
}

TEST(HttpClientTest, BadHeaderNamesAreRejected) {
  ScriptedServer server{answer(200)};
  IdempotentClient client(fast_config());
  for (const char* name : {"", "X Bad", "X:Bad", "X\r\nEvil"}) {
    EXPECT_THROW((void)client.post_json(server.url(), "{}", "k", {{name, "v"}}), Error) << name;
  }
  EXPECT_TRUE(server.keys().empty());
}

TEST(HttpClientTest, ConsecutiveCallsReuseOneConnection) {
  ScriptedServer server{answer(503), answer(200)};
  IdempotentClient client(fast_config());
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(client.post_json(server.url(), "{}", "key-" + std::to_string(i)).ok());
  }
  EXPECT_EQ(server.keys().size(), 21u);
  EXPECT_EQ(server.connections_accepted(), 1u)
      << "keep-alive: every call and retry on one connection";
}

TEST(HttpClientTest, ConfigurationIsValidated) {
  const auto rejected = [](ClientConfig config) {
    try {
      IdempotentClient client(std::move(config));
      return false;
    } catch (const Error& e) {
      return e.code() == ErrorCode::InvalidArgument;
    }
  };
  ClientConfig c = fast_config();
  c.max_attempts = 0;
  EXPECT_TRUE(rejected(c));
  c = fast_config();
  c.total_timeout = 0ms;
  EXPECT_TRUE(rejected(c));
  c = fast_config();
  c.max_host_connections = 0;
  EXPECT_TRUE(rejected(c));
  c = fast_config();
  c.retry.initial_backoff = 0ms;
  EXPECT_TRUE(rejected(c));
}

TEST(HttpClientTest, WithoutKeysEveryAttemptGetsAFreshKey) {
  ScriptedServer server{broken_off(), broken_off(), answer(200)};
  ClientConfig config = fast_config();
  config.send_idempotency_key = false;
  IdempotentClient client(config);
  EXPECT_TRUE(client.post_json(server.url(), "{}", "event-key").ok());
  const auto keys = server.keys();
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_NE(keys[0], "event-key");
  EXPECT_NE(keys[0], keys[1]);
  EXPECT_NE(keys[1], keys[2]);
}

}  // namespace http_client_test
}  // namespace idem::http
