#pragma once
// The console's JSON API behind the pages, one function per endpoint. Parameters are
// validated here (every value that reaches Kafka or the store is checked first) and
// problems are thrown as ApiError with the HTTP status to answer.
#include <map>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "console/kafka_view.hpp"
#include "console/store_access.hpp"
#include "idem/console/console.hpp"

namespace idem::console {

struct ApiError : std::runtime_error {
  ApiError(int status_code, const std::string& message)
      : std::runtime_error(message), status(status_code) {}
  int status;
};

/// Query parameters of a GET, or the members of a POSTed JSON object, as text.
using Params = std::map<std::string, std::string>;

struct ApiContext {
  const ConsoleOptions& options;
  StoreAccess& store;
  KafkaView& kafka;
};

/// The DLQ topics (names ending with the DLQ suffix) and whether replays are on.
[[nodiscard]] nlohmann::json dlq_topics(const ApiContext& ctx);
/// Dead letters of `topic` matching the filters (reason, original_partition, since_ms,
/// until_ms, q: text in the error message, limit).
[[nodiscard]] nlohmann::json list_dead_letters(const ApiContext& ctx, const Params& params);
/// One dead letter (topic, partition, offset): headers and payload (bounded).
[[nodiscard]] nlohmann::json show_dead_letter(const ApiContext& ctx, const Params& params);

/// Who asks for a replay.
struct Requester {
  std::string operator_name;
  std::string remote_addr;
};
/// A dry run (what would be re-sent) or, with dry_run false, the replay itself, recorded
/// in the audit table before it sends anything and updated with its outcome.
[[nodiscard]] nlohmann::json replay(const ApiContext& ctx, const nlohmann::json& body,
                                    const Requester& who, bool dry_run);
/// The most recent replays.
[[nodiscard]] nlohmann::json audit(const ApiContext& ctx);
/// The dedup store: rows per group, horizon, retention declarations, what maintenance
/// dropped, partitions, the outbox backlog and the relay's lag.
[[nodiscard]] nlohmann::json dedup_health(const ApiContext& ctx);

/// Validation, exposed for the unit tests.
[[nodiscard]] bool valid_topic_name(std::string_view name) noexcept;
[[nodiscard]] bool valid_operator_name(std::string_view name) noexcept;

}  // namespace idem::console
