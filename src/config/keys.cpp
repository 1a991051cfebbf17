#include "config/keys.hpp"

#include <algorithm>
#include <cctype>

namespace idem::detail {

namespace {

constexpr double kMaxMs = 24.0 * 3600 * 1000;  // a day: no idem duration needs more

// Defaults mirror the library structs' declarations (ConsumerConfig, RelayConfig,
// StoreOptions); tests/unit/config_test.cpp checks they stay equal.
const std::vector<KeySpec>& table() {
  static const std::vector<KeySpec> keys = [] {
    std::vector<KeySpec> k = {
        {"admin.listen", KeyType::String, "", "host:port of /metrics, /healthz, /readyz (empty: off)"},
        {"admin.stuck_after_ms", KeyType::Integer, "60000",
         "/readyz fails when the consumer loop has not turned for this long", 1000, kMaxMs},
        {"consumer.batch_size", KeyType::Integer, "500", "records per transaction", 1, 100000},
        {"consumer.batch_window_ms", KeyType::Integer, "50",
         "wait for more records after a batch's first", 0, 60000},
        {"consumer.dlq_ack_timeout_ms", KeyType::Integer, "30000",
         "wait for the DLQ acknowledgement", 1, kMaxMs},
        {"consumer.dlq_suffix", KeyType::String, ".dlq", "dead letters of T go to T + suffix"},
        {"consumer.group", KeyType::String, "", "consumer group; also the dedup rows' group"},
        {"consumer.max_headers", KeyType::Integer, "64", "records with more headers are refused", 1,
         10000},
        {"consumer.max_in_flight", KeyType::Integer, "256",
         "effect calls in flight at most, one per ordering key", 1, 1000000},
        {"consumer.max_message_bytes", KeyType::Integer, "65536",
         "payloads above go to the DLQ (too_large)", 1, 64.0 * 1024 * 1024},
        {"consumer.retry_initial_ms", KeyType::Integer, "100", "first retry backoff", 1, kMaxMs},
        {"consumer.retry_jitter", KeyType::Number, "0.2", "backoff jitter", 0, 1},
        {"consumer.retry_max_ms", KeyType::Integer, "10000", "backoff cap", 1, kMaxMs},
        {"consumer.retry_multiplier", KeyType::Number, "2", "backoff growth", 1, 1000},
        {"consumer.topics", KeyType::List, "", "topics to consume (comma-separated)"},
        {"log.format", KeyType::Choice, "plain", "plain or json", 0, 0, {"plain", "json"}},
        {"log.level", KeyType::Choice, "info", "least severe level written", 0, 0,
         {"debug", "info", "warn", "error"}},
        {"postgres.dbname", KeyType::String, "", "libpq dbname", 0, 0, {}, {"PGDATABASE"}},
        {"postgres.host", KeyType::String, "", "libpq host", 0, 0, {}, {"PGHOST"}},
        {"postgres.password", KeyType::String, "", "libpq password", 0, 0, {}, {"PGPASSWORD"}},
        {"postgres.port", KeyType::Integer, "", "libpq port", 1, 65535, {}, {"PGPORT"}},
        {"postgres.sslcert", KeyType::String, "", "libpq sslcert", 0, 0, {}, {"PGSSLCERT"}},
        {"postgres.sslkey", KeyType::String, "", "libpq sslkey", 0, 0, {}, {"PGSSLKEY"}},
        {"postgres.sslmode", KeyType::Choice, "", "libpq sslmode", 0, 0,
         {"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}, {"PGSSLMODE"}},
        {"postgres.sslrootcert", KeyType::String, "", "libpq sslrootcert", 0, 0, {},
         {"PGSSLROOTCERT"}},
        {"postgres.user", KeyType::String, "", "libpq user", 0, 0, {}, {"PGUSER"}},
        {"relay.batch_size", KeyType::Integer, "1000", "rows per claim", 1, 100000},
        {"relay.in_flight", KeyType::Integer, "8", "batches produced but not yet marked", 1, 64},
        {"relay.mark_connections", KeyType::Integer, "1",
         "connections marking rows published (0: on the relay's own)", 0, 16},
        {"relay.poll_interval_ms", KeyType::Integer, "500", "idle polling interval", 1, kMaxMs},
        {"relay.progress_interval_ms", KeyType::Integer, "5000", "progress interval (0: none)", 0,
         kMaxMs},
        {"relay.retention_hours", KeyType::Number, "24", "published rows older than this are deleted",
         0, 24.0 * 366},
        {"store.application_name", KeyType::String, "idem", "PostgreSQL application_name"},
        {"store.busy_timeout_ms", KeyType::Integer, "5000", "SQLite lock wait", 0, kMaxMs},
        {"store.connect_timeout_ms", KeyType::Integer, "10000", "PostgreSQL connect deadline", 1000,
         kMaxMs},
        {"store.statement_timeout_ms", KeyType::Integer, "0",
         "PostgreSQL statement_timeout (0: server default)", 0, kMaxMs},
        {"store.url", KeyType::String, "", "postgresql://... or sqlite://..."},
        {"tracing.enabled", KeyType::Boolean, "true", "create and forward W3C traceparent"},
    };
    std::sort(k.begin(), k.end(), [](const KeySpec& a, const KeySpec& b) { return a.name < b.name; });
    return k;
  }();
  return keys;
}

}  // namespace

std::span<const KeySpec> key_specs() { return table(); }

const KeySpec* find_key(std::string_view name) noexcept {
  const auto& keys = table();
  const auto it = std::lower_bound(keys.begin(), keys.end(), name,
                                   [](const KeySpec& k, std::string_view n) { return k.name < n; });
  return it != keys.end() && it->name == name ? &*it : nullptr;
}

std::string env_name_of(std::string_view key) {
  std::string out = "IDEM_";
  for (const char c : key) {
    out.push_back(c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  }
  return out;
}

}  // namespace idem::detail
