#pragma once
// The payment provider's request rules, free of HTTP and of the store: what a charge
// request is, when two requests are "the same", which orders are declined, which fault
// settings are valid, and the JSON bodies of its answers.
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

struct ChargeRequest {
  std::int64_t order_id = 0;
  Amount amount;
  /// Canonical form of what was asked: "12.3" and "12.30" are the same request.
  [[nodiscard]] std::string fingerprint() const;
};

/// nullopt and a message in `why` when `body` is not
/// {"order_id": positive integer, "amount": "decimal with at most 2 places"}.
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
[[nodiscard]] std::string declined_body(std::int64_t order_id);
[[nodiscard]] std::string error_body(std::string_view error, std::string_view message);

}  // namespace idem::http::detail
