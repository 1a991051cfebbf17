#pragma once
// The payment provider as a child process (`idem provider`), and a small JSON-over-HTTP
// helper for reading its audit endpoints (cpp-httplib's client).
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/process.hpp"

namespace idem::test {

/// `idem provider --db DB --listen LISTEN ARGS...`. The destructor SIGKILLs it.
class ProviderProcess {
 public:
  /// Starts it and reads its `listening http://...` line. Throws std::runtime_error
  /// when that line does not come within 30 s. `listen` names a fixed port where a test
  /// restarts the provider after an outage (tests/support/ports.hpp); by default any.
  ProviderProcess(const std::string& cli_path, const std::string& db_url,
                  const std::vector<std::string>& extra_args = {},
                  const std::string& listen = "127.0.0.1:0");
  [[nodiscard]] const std::string& url() const noexcept { return url_; }
  [[nodiscard]] pid_t pid() const noexcept { return process_.pid(); }
  /// SIGTERM, then waits; returns the exit status (0 for a clean stop).
  int stop();
  /// SIGKILL, then waits: a crash.
  void crash();

 private:
  ChildProcess process_;
  std::string url_;
};

/// An HTTP answer: status and body parsed as JSON (null when it is not JSON).
struct JsonAnswer {
  int status = 0;  ///< 0: no answer (connection failed or broke off)
  nlohmann::json body;
  std::vector<std::pair<std::string, std::string>> headers;  ///< as received
  /// The first header named `name` (ASCII case-insensitive); "" when there is none.
  [[nodiscard]] std::string header(std::string_view name) const;
};

/// GET `base_url` + `path`.
[[nodiscard]] JsonAnswer http_get(const std::string& base_url, const std::string& path);
/// POST `body` to `base_url` + `path` with the given headers (no retries).
[[nodiscard]] JsonAnswer http_post(
    const std::string& base_url, const std::string& path, const std::string& body,
    const std::vector<std::pair<std::string, std::string>>& headers = {});

/// One charge the provider made, as its store holds it.
struct ProviderCharge {
  std::string payment_id;
  std::int64_t order_id = 0;
  std::string idempotency_key;
  /// When the provider accepted the request that made this charge (it claimed the key:
  /// the first arrival of the key that got past the 503 fault) and when the charge
  /// committed; milliseconds of the provider's clock.
  std::int64_t claimed_at_ms = 0;
  std::int64_t charged_at_ms = 0;
};

/// Every charge in the provider's store at `provider_db_url`, in the order the provider
/// made them: payment ids are pay_<UUIDv7>, made on its one store thread. Read from the
/// store directly (the provider may be running: a read-only transaction).
[[nodiscard]] std::vector<ProviderCharge> provider_charges(const std::string& provider_db_url);

}  // namespace idem::test
