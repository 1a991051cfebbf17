// The payment provider against the IETF Idempotency-Key draft, on every store backend:
// errors are RFC 9457 problem details with stable types, the key is read in both forms
// (sf-string and bare), stored keys are scoped by client, method and path, the expiry
// policy is published (a header on every answer, and an endpoint), the fingerprint
// ignores field order and whitespace and refuses ambiguous numbers, and a test can force
// each answer a client must handle (422, 429 with Retry-After, 503). Also: a store whose
// key table an earlier release created upgrades and still replays its keys.
#include <algorithm>
#include <chrono>
#include <future>
#include <latch>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <nlohmann/json.hpp>

#include "idem/reference/payment_provider.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "support/manual_clock.hpp"
#include "support/provider_process.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"

namespace idem::http {
namespace provider_conformance_test {

using namespace std::chrono_literals;
using test::http_get;
using test::JsonAnswer;
using Headers = std::vector<std::pair<std::string, std::string>>;

std::string charge_body(std::int64_t order_id, std::string_view amount) {
  return fmt::format(R"({{"order_id":{},"amount":"{}"}})", order_id, amount);
}

/// Sends `head` (request line and headers, each ending in CRLF, without the blank line)
/// and `body` as bytes, unchecked: how a test sends a header value an HTTP library
/// would refuse to write (a control character, an empty value).
JsonAnswer raw_post(int port, const std::string& head, const std::string& body) {
  namespace asio = boost::asio;
  namespace beast = boost::beast;
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  socket.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  const std::string request = fmt::format(
      "{}Host: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: "
      "{}\r\nConnection: close\r\n\r\n{}",
      head, body.size(), body);
  asio::write(socket, asio::buffer(request));
  beast::flat_buffer buffer;
  beast::http::response<beast::http::string_body> response;
  beast::http::read(socket, buffer, response);
  JsonAnswer answer;
  answer.status = response.result_int();
  for (const auto& field : response) {
    answer.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  answer.body = nlohmann::json::parse(response.body(), nullptr, /*allow_exceptions=*/false);
  if (answer.body.is_discarded()) answer.body = nullptr;
  return answer;
}

/// A problem document (RFC 9457) of `type` and `status`, or what is wrong with `answer`.
::testing::AssertionResult is_problem(const JsonAnswer& answer, int status, std::string_view type) {
  const std::string content_type = answer.header("Content-Type");
  if (answer.status != status) {
    return ::testing::AssertionFailure()
           << "status " << answer.status << ", expected " << status << ": " << answer.body;
  }
  if (!content_type.starts_with("application/problem+json")) {
    return ::testing::AssertionFailure() << "Content-Type " << content_type;
  }
  const nlohmann::json& b = answer.body;
  if (!b.is_object() || b.value("type", "") != type || b.value("status", 0) != status ||
      b.value("title", "").empty() || b.value("detail", "").empty()) {
    return ::testing::AssertionFailure() << "body " << b << ", expected type " << type;
  }
  return ::testing::AssertionSuccess();
}

template <class Backend>
class ProviderConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    db_url_ = Backend::fresh_url();
    if (this->IsSkipped() || this->HasFatalFailure()) return;
  }
  void start(ProviderConfig config = {}) {
    config.clock = &clock_;
    provider_ = std::make_unique<PaymentProvider>(open_store(db_url_), std::move(config));
    port_ = provider_->start("127.0.0.1", 0);
  }
  JsonAnswer post(const std::string& body, const Headers& headers) {
    return test::http_post(provider_->base_url(), "/payments/charge", body, headers);
  }
  JsonAnswer charge(const std::string& key, std::int64_t order_id, std::string_view amount,
                    Headers headers = {}) {
    headers.emplace_back("Idempotency-Key", key);
    return post(charge_body(order_id, amount), headers);
  }

  std::string db_url_;
  test::ManualClock clock_;
  std::unique_ptr<PaymentProvider> provider_;
  int port_ = 0;
};

TYPED_TEST_SUITE(ProviderConformance, test::AllBackends, test::BackendName);

TYPED_TEST(ProviderConformance, EveryErrorIsAProblemDocument) {
  std::latch first_claimed(1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  ProviderConfig config;
  config.after_claim = [&](std::string_view key) {
    if (key != "held") return;
    first_claimed.count_down();
    released.wait();  // "held" stays in flight until the test lets it go
  };
  this->start(config);

  EXPECT_TRUE(is_problem(this->post(charge_body(1, "1.00"), {}), 400,
                         "urn:idem:problem:idempotency-key-missing"));
  EXPECT_TRUE(is_problem(this->charge("k", 1, "1.234"), 400, "urn:idem:problem:invalid-request"));
  EXPECT_TRUE(is_problem(this->post("not json", {{"Idempotency-Key", "k"}}), 400,
                         "urn:idem:problem:invalid-request"));
  EXPECT_TRUE(is_problem(test::http_get(this->provider_->base_url(), "/nowhere"), 404,
                         "urn:idem:problem:not-found"));

  ASSERT_EQ(this->charge("k", 1, "1.00").status, 200);
  EXPECT_TRUE(
      is_problem(this->charge("k", 1, "2.00"), 422, "urn:idem:problem:idempotency-key-reused"));

  auto held = std::async(std::launch::async, [&] { return this->charge("held", 2, "1.00"); });
  first_claimed.wait();
  EXPECT_TRUE(is_problem(this->charge("held", 2, "1.00"), 409,
                         "urn:idem:problem:idempotency-key-in-flight"));
  release.set_value();
  EXPECT_EQ(held.get().status, 200);

  ProviderFaults declining;
  declining.decline = 1.0;
  this->provider_->set_faults(declining);
  const JsonAnswer declined = this->charge("d", 3, "1.00");
  EXPECT_TRUE(is_problem(declined, 402, "urn:idem:problem:card-declined"));
  EXPECT_EQ(declined.body.value("order_id", 0), 3) << "an extension member names the order";
  // A decline is not stored: it is decided again, and the same key charges once the
  // cause is fixed (what replaying a declined event from the DLQ relies on).
  EXPECT_TRUE(is_problem(this->charge("d", 3, "1.00"), 402, "urn:idem:problem:card-declined"));
  this->provider_->set_faults({});
  EXPECT_EQ(this->charge("d", 3, "1.00").status, 200);
  EXPECT_EQ(this->provider_->summary().charges, 3);
}

TYPED_TEST(ProviderConformance, MalformedKeysAre400) {
  this->start();
  const std::string body = charge_body(1, "1.00");
  const auto with_key = [&](const std::string& field_value) {
    return raw_post(this->port_,
                    "POST /payments/charge HTTP/1.1\r\nIdempotency-Key: " + field_value + "\r\n",
                    body);
  };
  // (Other control characters never reach the provider: its HTTP parser refuses them.)
  for (const std::string& malformed :
       {std::string(), std::string(R"("")"), std::string(R"("abc)"), std::string(R"("a\b")"),
        std::string(R"("abc"x)"), std::string("\"tab\tinside\""), std::string("tab\tinside"),
        std::string(256, 'k'), "\"" + std::string(256, 'k') + "\""}) {
    EXPECT_TRUE(is_problem(with_key(malformed), 400, "urn:idem:problem:idempotency-key-malformed"))
        << "Idempotency-Key: " << malformed;
  }
  // Two keys in one request name no one key.
  EXPECT_TRUE(is_problem(raw_post(this->port_,
                                  "POST /payments/charge HTTP/1.1\r\nIdempotency-Key: a\r\n"
                                  "Idempotency-Key: b\r\n",
                                  body),
                         400, "urn:idem:problem:idempotency-key-malformed"));
  EXPECT_EQ(with_key(std::string(255, 'k')).status, 200) << "255 characters are allowed";
  EXPECT_EQ(with_key("\"" + std::string(255, 'q') + "\"").status, 200);
  EXPECT_EQ(this->provider_->summary().charges, 2);
}

TYPED_TEST(ProviderConformance, BothKeyFormsAreTheSameKey) {
  this->start();
  const JsonAnswer bare = this->charge("8e03978e-40d5-43e8-bc93-6894a57f9324", 7, "5.00");
  ASSERT_EQ(bare.status, 200) << bare.body;
  EXPECT_EQ(bare.header("Idempotent-Replayed"), "");
  const JsonAnswer quoted = this->charge(R"("8e03978e-40d5-43e8-bc93-6894a57f9324")", 7, "5.00");
  ASSERT_EQ(quoted.status, 200) << quoted.body;
  EXPECT_EQ(quoted.header("Idempotent-Replayed"), "true");
  EXPECT_EQ(quoted.body, bare.body);

  // An escaped quote and backslash in the sf-string are the bare key's characters.
  ASSERT_EQ(this->charge(R"("a\"b\\c")", 8, "5.00").status, 200);
  const JsonAnswer same = this->charge(R"(a"b\c)", 8, "5.00");
  EXPECT_EQ(same.header("Idempotent-Replayed"), "true");
  const std::vector<Charge> charges = this->provider_->charges(8);
  ASSERT_EQ(charges.size(), 1U);
  EXPECT_EQ(charges[0].idempotency_key, R"(a"b\c)") << "the key is the string's content";
  EXPECT_EQ(this->provider_->summary().charges, 2);
}

TYPED_TEST(ProviderConformance, KeysAreScopedByClient) {
  this->start();
  const Headers client_a{{"Authorization", "Bearer client-a"}};
  const Headers client_b{{"Authorization", "Bearer client-b"}};
  const JsonAnswer a = this->charge("shared-key", 7, "10.00", client_a);
  ASSERT_EQ(a.status, 200);
  const JsonAnswer b = this->charge("shared-key", 7, "10.00", client_b);
  ASSERT_EQ(b.status, 200);
  EXPECT_EQ(b.header("Idempotent-Replayed"), "") << "B never gets A's stored answer";
  EXPECT_NE(b.body.value("payment_id", ""), a.body.value("payment_id", ""));
  const JsonAnswer a_again = this->charge("shared-key", 7, "10.00", client_a);
  EXPECT_EQ(a_again.header("Idempotent-Replayed"), "true");
  EXPECT_EQ(a_again.body, a.body);
  // A's key does not block B either: a different request under it is B's own first one.
  EXPECT_EQ(this->charge("other-key", 8, "1.00", client_a).status, 200);
  EXPECT_EQ(this->charge("other-key", 9, "2.00", client_b).status, 200);
  // No Authorization: the anonymous client, a scope of its own.
  const JsonAnswer anonymous = this->charge("shared-key", 7, "10.00");
  EXPECT_EQ(anonymous.header("Idempotent-Replayed"), "");
  EXPECT_EQ(this->provider_->charges(7).size(), 3U);
  EXPECT_EQ(this->provider_->summary().replays, 1);
}

TYPED_TEST(ProviderConformance, TheClientHeaderIsConfigurable) {
  ProviderConfig config;
  config.client_header = "X-Client-Id";
  this->start(config);
  const JsonAnswer first =
      this->charge("k", 7, "1.00", {{"X-Client-Id", "shop-1"}, {"Authorization", "one"}});
  ASSERT_EQ(first.status, 200);
  const JsonAnswer again =
      this->charge("k", 7, "1.00", {{"X-Client-Id", "shop-1"}, {"Authorization", "two"}});
  EXPECT_EQ(again.header("Idempotent-Replayed"), "true") << "Authorization does not scope now";
  EXPECT_EQ(this->charge("k", 7, "1.00", {{"X-Client-Id", "shop-2"}}).header("Idempotent-Replayed"),
            "");
  EXPECT_EQ(http_get(this->provider_->base_url(), std::string(kIdempotencyPolicyPath))
                .body.value("client_header", ""),
            "X-Client-Id");
}

TYPED_TEST(ProviderConformance, TheExpiryPolicyIsPublished) {
  ProviderConfig config;
  config.key_retention = 36h;
  this->start(config);
  const std::string seconds = std::to_string(36 * 3600);
  const JsonAnswer charged = this->charge("k", 7, "1.00");
  EXPECT_EQ(charged.header(kKeyExpiresAfterHeader), seconds);
  EXPECT_EQ(this->charge("k", 7, "1.00").header(kKeyExpiresAfterHeader), seconds) << "replay";
  EXPECT_EQ(this->charge("k", 8, "1.00").header(kKeyExpiresAfterHeader), seconds) << "422";
  EXPECT_EQ(this->post(charge_body(1, "1.00"), {}).header(kKeyExpiresAfterHeader), seconds);

  const JsonAnswer policy =
      http_get(this->provider_->base_url(), std::string(kIdempotencyPolicyPath));
  ASSERT_EQ(policy.status, 200);
  EXPECT_EQ(policy.body.value("expires_after_seconds", 0), 36 * 3600);
  EXPECT_EQ(policy.body["scope"], nlohmann::json::array({"client", "method", "path"}));
  EXPECT_EQ(policy.body.value("client_header", ""), "Authorization");
  EXPECT_EQ(policy.body["key_forms"], nlohmann::json::array({"sf-string", "bare"}));
  EXPECT_EQ(policy.body.value("max_key_length", 0), 255);
}

// What counts as "the same request" under one key: field order and whitespace do not
// matter, "12.3" and "12.30" are one amount; ambiguous numbers are refused outright
// rather than read one way or the other.
TYPED_TEST(ProviderConformance, TheFingerprintIgnoresFormattingAndRefusesAmbiguousNumbers) {
  this->start();
  const JsonAnswer first =
      this->post(R"({"order_id":7,"amount":"12.3"})", {{"Idempotency-Key", "k"}});
  ASSERT_EQ(first.status, 200);
  for (const std::string body :
       {R"({"amount":"12.30","order_id":7})", "{\n  \"order_id\" : 7 ,\n\t\"amount\": \"12.30\"\n}",
        R"( { "order_id":7, "amount":"12.30" } )"}) {
    const JsonAnswer again = this->post(body, {{"Idempotency-Key", "k"}});
    EXPECT_EQ(again.status, 200) << body;
    EXPECT_EQ(again.header("Idempotent-Replayed"), "true") << body;
    EXPECT_EQ(again.body, first.body) << body;
  }
  for (const std::string body :
       {R"({"order_id":7,"amount":12.3})", R"({"order_id":7,"amount":12.30})",
        R"({"order_id":7.0,"amount":"12.30"})", R"({"order_id":7e0,"amount":"12.30"})",
        R"({"order_id":"7","amount":"12.30"})"}) {
    EXPECT_TRUE(is_problem(this->post(body, {{"Idempotency-Key", "k"}}), 400,
                           "urn:idem:problem:invalid-request"))
        << body;
  }
  EXPECT_EQ(this->provider_->summary().charges, 1);
  EXPECT_EQ(this->provider_->summary().replays, 3);
}

TYPED_TEST(ProviderConformance, ATestCanForceEachAnswer) {
  this->start();
  ASSERT_EQ(
      test::http_post(this->provider_->base_url(), "/admin/faults", R"({"key_reused":1})").status,
      200);
  EXPECT_TRUE(
      is_problem(this->charge("k", 7, "1.00"), 422, "urn:idem:problem:idempotency-key-reused"));

  ProviderFaults faults;
  faults.too_many_requests = 1.0;
  faults.retry_after = 3s;
  this->provider_->set_faults(faults);
  const JsonAnswer throttled = this->charge("k", 7, "1.00");
  EXPECT_TRUE(is_problem(throttled, 429, "urn:idem:problem:too-many-requests"));
  EXPECT_EQ(throttled.header("Retry-After"), "3");

  ASSERT_EQ(
      test::http_post(this->provider_->base_url(), "/admin/faults",
                      R"({"too_many_requests":0,"unavailable":1,"unavailable_retry_after_s":2})")
          .status,
      200);
  const JsonAnswer unavailable = this->charge("k", 7, "1.00");
  EXPECT_TRUE(is_problem(unavailable, 503, "urn:idem:problem:unavailable"));
  EXPECT_EQ(unavailable.header("Retry-After"), "2");
  EXPECT_EQ(http_get(this->provider_->base_url(), "/payments/summary")
                .body.value("too_many_requests", -1),
            1);

  // None of them stored anything: the key is new to the provider.
  this->provider_->set_faults({});
  const JsonAnswer charged = this->charge("k", 7, "1.00");
  EXPECT_EQ(charged.status, 200);
  EXPECT_EQ(charged.header("Idempotent-Replayed"), "");
  EXPECT_EQ(
      test::http_post(this->provider_->base_url(), "/admin/faults", R"({"key_reused":1.5})").status,
      400);
}

// A store whose provider tables an earlier release created (no migration recorded, the
// key alone as primary key) upgrades when the provider starts: its keys become the
// anonymous client's on POST /payments/charge and are still replayed.
TYPED_TEST(ProviderConformance, AnEarlierReleasesKeyTableUpgradesAndStillReplays) {
  const std::int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(this->clock_.now().time_since_epoch())
          .count();
  const std::string stored_body =
      R"({"amount":"12.30","order_id":7,"payment_id":"pay_from_before","status":"charged"})";
  {
    auto store = open_store(this->db_url_);
    auto tx = store->begin();
    // The tables exactly as the earlier provider created them.
    tx->execute(
        "CREATE TABLE provider_idempotency_key (idempotency_key text PRIMARY KEY, fingerprint "
        "text NOT NULL, state text NOT NULL, response_status bigint, response_body text, "
        "created_at_ms bigint NOT NULL)");
    tx->execute(
        "CREATE TABLE provider_charge (payment_id text PRIMARY KEY, order_id bigint NOT NULL, "
        "amount text NOT NULL, idempotency_key text NOT NULL, traceparent text, created_at_ms "
        "bigint NOT NULL)");
    tx->execute(
        "INSERT INTO provider_idempotency_key VALUES ('old-key', 'order_id=7;amount=12.30', "
        "'done', 200, $1, $2)",
        stored_body, now_ms);
    tx->execute(
        "INSERT INTO provider_charge VALUES ('pay_from_before', 7, '12.30', 'old-key', NULL, $1)",
        now_ms);
    tx->commit();
  }
  this->start();
  EXPECT_EQ(open_store(this->db_url_)->schema_version("payment_provider"),
            static_cast<int>(payment_provider_migrations().sqlite.size()));

  const JsonAnswer replay = this->charge("old-key", 7, "12.30");
  ASSERT_EQ(replay.status, 200) << replay.body;
  EXPECT_EQ(replay.header("Idempotent-Replayed"), "true");
  EXPECT_EQ(replay.body, nlohmann::json::parse(stored_body));
  EXPECT_TRUE(is_problem(this->charge("old-key", 7, "1.00"), 422,
                         "urn:idem:problem:idempotency-key-reused"));
  // Another client's same key is its own.
  EXPECT_EQ(this->charge("old-key", 7, "12.30", {{"Authorization", "Bearer x"}})
                .header("Idempotent-Replayed"),
            "");
  const std::vector<Charge> charges = this->provider_->charges(7);
  ASSERT_EQ(charges.size(), 2U);
  EXPECT_TRUE(std::any_of(charges.begin(), charges.end(), [](const Charge& c) {
    return c.payment_id == "pay_from_before";
  })) << "the old rows are kept";

  // Starting again on the upgraded store applies nothing and keeps replaying.
  this->provider_.reset();
  this->start();
  EXPECT_EQ(this->charge("old-key", 7, "12.30").header("Idempotent-Replayed"), "true");
}

// The CLI's flags reach the provider: `idem provider --too-many-requests 1 --retry-after 4
// --client-header X-Client`.
TEST(ProviderConformanceProcess, FlagsSetTheNewFaultsAndTheClientHeader) {
  IDEM_REQUIRE_CLI();
  test::ProviderProcess provider(IDEM_CLI_PATH, test::fresh_sqlite_url(),
                                 {"--too-many-requests", "1", "--retry-after", "4",
                                  "--client-header", "X-Client", "--key-retention", "2d"});
  const JsonAnswer throttled = test::http_post(provider.url(), "/payments/charge",
                                               charge_body(1, "1.00"), {{"Idempotency-Key", "k"}});
  EXPECT_TRUE(is_problem(throttled, 429, "urn:idem:problem:too-many-requests"));
  EXPECT_EQ(throttled.header("Retry-After"), "4");
  EXPECT_EQ(throttled.header(kKeyExpiresAfterHeader), "172800");
  const JsonAnswer policy = http_get(provider.url(), std::string(kIdempotencyPolicyPath));
  EXPECT_EQ(policy.body.value("client_header", ""), "X-Client");
  EXPECT_EQ(policy.body.value("expires_after_seconds", 0), 172800);
  EXPECT_EQ(provider.stop(), 0);
}

}  // namespace provider_conformance_test
}  // namespace idem::http
