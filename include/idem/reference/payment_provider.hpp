#pragma once
/// \file
/// The payment provider of the reference system (docs/reference-system.md; IDEM-4): a real HTTP/1.1
/// server (Boost.Beast on one event loop, keep-alive) that charges orders and
/// deduplicates on `Idempotency-Key`. It holds thousands of requests open at once on two
/// threads: the event loop, and a store thread that commits every waiting charge in one
/// transaction (group commit) before any of them is answered.
///
/// `POST /payments/charge` with `{"order_id": N, "amount": "12.30"}`, following the IETF
/// Idempotency-Key draft (docs/reference-system.md):
/// - the key may come as the draft's sf-string (`Idempotency-Key: "k"`) or bare
///   (`Idempotency-Key: k`): both are the key `k`;
/// - a stored key is scoped: its identity is (client, method, path, key), the client being
///   a digest of the header ProviderConfig::client_header names (none: the anonymous
///   client), so one client can never replay, block or meet another's stored answer;
/// - no `Idempotency-Key` (400 idempotency-key-missing), an invalid one (400
///   idempotency-key-malformed) or an invalid body (400 invalid-request);
/// - a new key: the key is claimed (in flight), the charge and the stored answer are
///   committed in ONE transaction (with the claim itself when there is no latency), the
///   answer, sent only after that commit, is 200 `{"payment_id", "order_id", "amount",
///   "status": "charged"}`; a declined order is 402 card-declined, not stored, and its key
///   released, so the same key charges once the cause is fixed;
/// - the same key and the same request (order_id and amount): the stored first answer
///   is replayed with `Idempotent-Replayed: true`, and nothing is charged;
/// - the same key and a different request: 422 idempotency-key-reused; the same key while
///   the first request is still in flight: 409 idempotency-key-in-flight.
/// Every error is `application/problem+json` (RFC 9457) with a stable `type` URI. Every
/// answer of the charge route carries `Idempotency-Key-Expires-After: <seconds>`, and `GET
/// /payments/idempotency-policy` publishes the key policy (retention, scope, key forms).
/// Keys and charges live in the store (a SQLite file or PostgreSQL), so they survive a
/// restart; keys expire after `key_retention`.
///
/// Audit: `GET /payments[?order_id=N]` (the charges, oldest first), `GET
/// /payments/summary`, `GET /healthz`. Faults (ProviderFaults) are set at start or by
/// `POST /admin/faults`.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idem/clock.hpp"
#include "idem/config_keys.hpp"
#include "idem/store.hpp"

namespace idem::http {

/// The header every answer of the charge route carries: how long the provider keeps an
/// Idempotency-Key, in whole seconds (the draft asks for a published expiry policy).
inline constexpr std::string_view kKeyExpiresAfterHeader = "Idempotency-Key-Expires-After";
/// Where the provider publishes its key policy as JSON.
inline constexpr std::string_view kIdempotencyPolicyPath = "/payments/idempotency-policy";

/// Injected faults. Probabilities are in [0, 1].
struct ProviderFaults {
  /// Share of new charges that are committed and then answered with a broken-off
  /// response (headers, then the connection closes before the body): "the provider
  /// charged, and the answer was lost" of the design documents.
  double reset_after_commit = 0.0;
  /// Share of charge requests answered 503 before anything is stored.
  double unavailable = 0.0;
  /// `Retry-After` of those 503 answers; 0: none is sent.
  std::chrono::seconds unavailable_retry_after{0};
  /// Share of charge requests answered 429 before anything is stored, with `Retry-After:
  /// retry_after`: a provider that asks its client to slow down.
  double too_many_requests = 0.0;
  std::chrono::seconds retry_after{1};
  /// Share of charge requests answered 422 idempotency-key-reused before anything is
  /// stored, as if the key stood for another request: lets a test force that answer.
  double key_reused = 0.0;
  /// Share of charge requests answered 409 before anything is stored, as when a request
  /// with the same key is still in flight (what a duplicate racing through another
  /// consumer meets): the client must retry with the same key.
  double in_progress = 0.0;
  /// How long a new charge takes before it is charged, from the request's arrival; its
  /// key is claimed (and committed) meanwhile, so the key is in flight for that long
  /// (409 to a concurrent duplicate). The answer follows the charge's own durable commit.
  /// A timer: a request waiting out its latency holds no thread.
  std::chrono::milliseconds latency{0};
  /// Share of orders declined with 402 card-declined and not charged.
  /// Decided by a hash of order_id and the seed, so the same orders are declined on
  /// every attempt and after a restart.
  double decline = 0.0;
};

struct ProviderConfig {
  /// Covers the consumer's default dedup retention (7 d) plus a day: a redelivery the
  /// consumer still executes must find its key, or it is charged twice (IDEM-4).
  std::chrono::milliseconds key_retention = std::chrono::hours(24 * 8);
  ProviderFaults faults;
  /// The request header that identifies the client: stored keys are scoped by it. Its
  /// value is kept only as a SHA-256 digest; a request without it is the anonymous client.
  std::string client_header = "Authorization";
  std::uint64_t seed = 42;                        ///< fault draws and the decline hash
  const Clock* clock = &SystemClock::instance();  ///< key age and charge times
  /// TEST ONLY: runs after a new key was claimed and before the charge, so a test can
  /// hold a request in flight without timing assumptions. It runs on a thread of its
  /// own (one, for all requests), so blocking in it holds up no other request.
  std::function<void(std::string_view idempotency_key)> after_claim;
};

/// One charge, as `GET /payments` lists it.
struct Charge {
  std::string payment_id;
  std::int64_t order_id = 0;
  std::string amount;           ///< exact decimal text
  std::string idempotency_key;  ///< the key of the request that made it
  std::string traceparent;      ///< as received; empty when none was sent
  std::string created_at;       ///< RFC 3339
};

/// `GET /payments/summary`. Charge figures come from the store (they survive restarts);
/// the counters count this process's answers.
struct ProviderSummary {
  std::int64_t charges = 0;
  std::int64_t orders = 0;  ///< distinct orders with at least one charge
  std::vector<std::int64_t> orders_charged_more_than_once;
  std::int64_t replays = 0;              ///< stored answers replayed
  std::int64_t conflicts = 0;            ///< 409 (in flight) and 422 (different request, or forced)
  std::int64_t resets_after_commit = 0;  ///< charges whose answer was broken off
  std::int64_t unavailable = 0;          ///< 503 answers
  std::int64_t too_many_requests = 0;    ///< 429 answers of the too_many_requests fault
  std::int64_t in_progress = 0;          ///< 409 answers of the in_progress fault
  std::int64_t declined = 0;             ///< new 402 answers (replays not counted)
};

/// How the provider works right now: the group commit's effect, and the load it holds.
struct ProviderStats {
  std::int64_t transactions = 0;          ///< write transactions committed (one per group)
  std::int64_t charges_committed = 0;     ///< charges committed by this process
  std::int64_t largest_batch = 0;         ///< most requests committed by one transaction
  std::int64_t queued = 0;                ///< store jobs waiting for the store thread
  std::int64_t requests_in_progress = 0;  ///< requests received and not yet answered
  std::int64_t peak_requests_in_progress = 0;
};

/// The provider. Usable in-process (tests) and by `idem provider`.
class PaymentProvider {
 public:
  /// Applies the provider's migrations to `store` (set "payment_provider", which also
  /// upgrades the unversioned tables of an earlier release), and forgets the claims of
  /// requests a previous process left in flight (none of them charged: a charge and
  /// its answer commit together).
  /// \throws Error(InvalidArgument, Config) for a bad config; Error from the store.
  explicit PaymentProvider(std::unique_ptr<Store> store, ProviderConfig config = {});
  ~PaymentProvider();  ///< stops serving
  PaymentProvider(const PaymentProvider&) = delete;
  PaymentProvider& operator=(const PaymentProvider&) = delete;

  /// Binds `host:port` (port 0: any free port), then serves on a background thread.
  /// Returns the bound port. Connections are accepted as soon as it returns. Once only.
  /// \throws Error(Connection, Http) when the address cannot be bound.
  int start(const std::string& host, int port);
  /// Stops serving and waits for the server thread. Idempotent. Requests being
  /// committed are answered first; requests waiting out their latency are released
  /// (nothing charged) and answered 503. The audit calls below keep working.
  void stop();
  /// `http://host:port` once started.
  [[nodiscard]] std::string base_url() const;

  void set_faults(const ProviderFaults& faults);
  [[nodiscard]] ProviderFaults faults() const;
  [[nodiscard]] ProviderSummary summary() const;
  /// Charges of `order_id` (all when nullopt), oldest first.
  [[nodiscard]] std::vector<Charge> charges(std::optional<std::int64_t> order_id = {}) const;
  [[nodiscard]] ProviderStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// `provider.*`: what `idem provider` serves on, and its ProviderConfig.
struct ProviderSettings {
  std::string listen = "127.0.0.1:0";  ///< host:port; port 0 picks a free port
  ProviderConfig provider;
};

/// Declares the `provider.*` keys (ConfigSchema::add<ProviderSettings>).
void declare_provider_keys(SectionKeys<ProviderSettings>& keys);

}  // namespace idem::http
