#pragma once
// Small payment endpoints for the conformance probe's tests (`idem http-check`): one that
// follows the Idempotency-Key draft in every case the probe checks, and deliberately
// broken ones (no dedup, no payload comparison, keys shared by every client), so that the
// probe's pass path is tested apart from idem's own provider and each of its failures
// against a server that really behaves that way. cpp-httplib on a free loopback port.
#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

namespace idem::test {

/// What the endpoint does; the defaults follow the draft.
struct EndpointBehaviour {
  /// false: every request creates a new payment, whatever its key.
  bool deduplicates = true;
  /// false: a request reusing a key with another body gets the first answer (200), not 422.
  bool compares_payload = true;
  /// false: keys are one namespace for every client (the Authorization header is ignored),
  /// so a second client with the same key gets the first client's stored answer.
  bool scopes_keys_by_client = true;
  /// true: a request meeting its key in flight waits for the first to finish and gets its
  /// answer replayed, instead of 409 (the draft's SHOULD): nothing is charged twice, but
  /// no 409 can be observed.
  bool queues_requests_in_flight = false;
};

/// `POST /payments` with a JSON body: 201 `{"payment_id": "pay_N", "body": ...}`; 400 for
/// a missing or malformed key (sf-string `"k"` or bare `k`, the same key), 409 while the
/// key's first request is in flight, 422 for a reused key with another body, a replay
/// with `Idempotent-Replayed: true`, 503 (nothing stored) when the request carries
/// `X-Fail: 503`. Errors are application/problem+json.
class PaymentEndpoint {
 public:
  explicit PaymentEndpoint(EndpointBehaviour behaviour = {});
  ~PaymentEndpoint();
  PaymentEndpoint(const PaymentEndpoint&) = delete;
  PaymentEndpoint& operator=(const PaymentEndpoint&) = delete;

  /// `http://127.0.0.1:PORT/payments`.
  [[nodiscard]] std::string url() const;
  /// The first request carrying exactly this key header value is held (in flight, its key
  /// claimed) until another request with the same key has arrived, so "a request while
  /// the first is in flight" happens without any timing assumption. A minute at most,
  /// so a broken test fails instead of hanging.
  void hold_until_duplicate_arrives(const std::string& key_header_value);
  /// Payments created so far.
  [[nodiscard]] std::size_t payments_created() const;

 private:
  struct StoredAnswer {
    bool in_flight = true;
    std::string body_fingerprint{};
    int status = 0;
    std::string body{};
  };

  void serve(const httplib::Request& req, httplib::Response& res);
  void create(const std::string& body, httplib::Response& res);

  EndpointBehaviour behaviour_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  std::size_t created_ = 0;
  // (client, key) -> the key's first request and its answer.
  std::map<std::pair<std::string, std::string>, StoredAnswer> keys_;
  std::set<std::string> held_;               // raw header values to hold
  std::set<std::string> duplicate_arrived_;  // raw header values of known keys seen again
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

/// The key a header value names: an RFC 8941 sf-string (`"k"`, printable ASCII, only `\"`
/// and `\\` escapes) or a bare token of visible ASCII; nullopt for anything else.
[[nodiscard]] std::optional<std::string> parse_key_field(std::string_view value);

}  // namespace idem::test
