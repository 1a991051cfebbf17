#pragma once
// The payment provider's operator endpoints, as the demo uses them: switch faults on
// and off at run time (POST /admin/faults) and read the audit (GET /payments/summary).
#include <cstdint>
#include <string>
#include <vector>

namespace idem::cli::demo {

struct ProviderFaults {
  double reset_after_commit = 0;  // charge stored, then the connection is reset
  double unavailable = 0;         // 503 before anything is stored
  double decline = 0;             // a permanent decline (-> the billing consumer's DLQ)
  int latency_ms = 0;             // added to every new charge
};

struct ProviderSummary {
  std::int64_t charges = 0;  // charges the provider made
  std::int64_t orders = 0;   // distinct orders charged
  std::vector<std::int64_t> orders_charged_more_than_once;
  std::int64_t replays = 0;  // requests answered from the stored first response
  std::int64_t conflicts = 0;
  std::int64_t resets_after_commit = 0;
  std::int64_t unavailable = 0;
  std::int64_t declined = 0;
};

/// `base_url` is what `idem provider` printed ("http://127.0.0.1:PORT"). Both throw
/// std::runtime_error naming the endpoint and the answer when the call fails.
void set_provider_faults(const std::string& base_url, const ProviderFaults& faults);
[[nodiscard]] ProviderSummary provider_summary(const std::string& base_url);

}  // namespace idem::cli::demo
