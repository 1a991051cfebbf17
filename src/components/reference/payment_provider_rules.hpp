#pragma once
// The payment provider's request rules, free of HTTP and of the store: what a charge
// request is, how its Idempotency-Key is read, when two requests are "the same", which
// orders are declined, which fault settings are valid, and the JSON bodies of its answers
// (errors as RFC 9457 problem details).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "idem/amount.hpp"
#include "idem/reference/payment_provider.hpp"

namespace idem::http::detail {

inline constexpr int kCharged = 200;
inline constexpr int kDeclined = 402;

/// The media type of every error answer (RFC 9457).
inline constexpr std::string_view kProblemContentType = "application/problem+json";

/// The provider's problem types. The Idempotency-Key draft registers no type URIs, so
/// these are the provider's own, stable ones (docs/reference-system.md lists them).
enum class Problem {
  KeyMissing,       ///< 400: no Idempotency-Key
  KeyMalformed,     ///< 400: an Idempotency-Key that is not a valid key
  InvalidRequest,   ///< 400: the body (or a query parameter) is invalid
  KeyInFlight,      ///< 409: a request with this key is still being processed
  KeyReused,        ///< 422: the key was used for a different request
  CardDeclined,     ///< 402: the order was declined; nothing charged
  Unavailable,      ///< 503
  TooManyRequests,  ///< 429
  NotFound,         ///< 404: no such route
  Internal,         ///< 500
};

struct ProblemType {
  int status = 0;
  std::string_view type;   ///< stable URI, e.g. urn:idem:problem:idempotency-key-reused
  std::string_view title;  ///< short, the same for every occurrence of the type
};

[[nodiscard]] const ProblemType& problem_type(Problem problem);

/// `{"type", "title", "status", "detail"}` plus the members of `extensions` (an object).
[[nodiscard]] std::string problem_body(Problem problem, std::string_view detail,
                                       const nlohmann::json& extensions = nlohmann::json::object());

/// The key an `Idempotency-Key` field value carries, in either form: the draft's
/// sf-string (`"8e03..."`, `\"` and `\\` escaped, printable ASCII only) or the bare form
/// most APIs read (`8e03...`, any text without control characters). Both forms of one
/// key are the same key. nullopt, and in `why` what is wrong, for an empty key, an
/// unterminated or badly escaped string, text after its closing quote, a control
/// character, or a key longer than kMaxIdempotencyKeyLength.
[[nodiscard]] std::optional<std::string> parse_idempotency_key(std::string_view field_value,
                                                               std::string& why);

struct ChargeRequest {
  std::int64_t order_id = 0;
  Amount amount;
  /// Canonical form of what was asked: "12.3" and "12.30" are the same request.
  [[nodiscard]] std::string fingerprint() const;
};

/// The client a request comes from, for scoping its key: a SHA-256 digest (hex) of the
/// client identity header's value, so the provider's database never holds a credential;
/// empty (the anonymous client) for an empty value.
[[nodiscard]] std::string client_identity(std::string_view header_value);

/// \throws Error(InvalidArgument, Config) when `name` is not an HTTP header name (empty is
///   allowed: no client identity, every request is the anonymous client).
void validate_client_header(std::string_view name);

/// GET /payments/idempotency-policy: how long keys are kept, how they are scoped and read.
[[nodiscard]] nlohmann::json idempotency_policy_json(const ProviderConfig& config);

/// nullopt and a message in `why` when `body` is not
/// {"order_id": positive integer, "amount": "decimal with at most 2 places"}. The order
/// of the fields and the whitespace between them do not matter. order_id must be a JSON
/// integer: `7.0`, `7e0` and `"7"` are refused, not read as 7. amount must be a string:
/// money never passes through a binary floating-point number, so `12.3` is refused.
[[nodiscard]] std::optional<ChargeRequest> parse_charge(std::string_view body, std::string& why);

/// \throws Error(InvalidArgument, Config) for a probability outside [0, 1] or a negative latency.
void validate_faults(const ProviderFaults& faults);

/// Whether `order_id` is declined at `decline_share` for `seed`: a fixed hash, so the
/// same orders are declined in every process and after a restart.
[[nodiscard]] bool is_declined(std::int64_t order_id, double decline_share, std::uint64_t seed);

/// `faults` changed by a POST /admin/faults body; nullopt and a message in `why` for an
/// unknown field, a wrong type or an invalid value.
[[nodiscard]] std::optional<ProviderFaults> apply_fault_changes(const ProviderFaults& faults,
                                                                std::string_view body,
                                                                std::string& why);

[[nodiscard]] nlohmann::json faults_to_json(const ProviderFaults& faults);
[[nodiscard]] nlohmann::json charge_to_json(const Charge& charge);
[[nodiscard]] nlohmann::json summary_to_json(const ProviderSummary& summary);
/// The stored first answer of a charge: {"payment_id", "order_id", "amount", "status"}.
[[nodiscard]] std::string charged_body(std::string_view payment_id, std::int64_t order_id,
                                       std::string_view amount);
/// The 402 answer: a card-declined problem naming the order.
[[nodiscard]] std::string declined_body(std::int64_t order_id);

}  // namespace idem::http::detail
