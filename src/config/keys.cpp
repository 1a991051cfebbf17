#include "config/keys.hpp"

#include <algorithm>
#include <cctype>

namespace idem::detail {

namespace {

constexpr double kSecond = 1000;
constexpr double kHour = 3600 * kSecond;
constexpr double kDay = 24 * kHour;
constexpr double kMaxMs = kDay;      // the `_ms` keys: none needs more than a day
constexpr double kMaxSeed = 9.0e15;  // exactly representable as a double, so checkable

// A duration key written with its unit, and one of the older `_ms` keys whose bare
// numbers are milliseconds (units are accepted there too: `consumer.batch_window_ms = "1s"`).
KeySpec duration(std::string_view name, std::string_view default_value, std::string_view help,
                 double min, double max) {
  return {name, KeyType::Duration, default_value, help, min, max};
}
KeySpec duration_ms(std::string_view name, std::string_view default_value, std::string_view help,
                    double min, double max) {
  KeySpec k = duration(name, default_value, help, min, max);
  k.unit_of_bare_number = "ms";
  return k;
}

// Defaults mirror the library structs' declarations (ConsumerConfig, RelayConfig,
// StoreOptions, DedupHorizon, RetentionPolicy, ProviderConfig, DevBrokerOptions) and the
// CLI's former flag defaults; tests/unit/config_test.cpp checks they stay equal.
const std::vector<KeySpec>& table() {
  static const std::vector<KeySpec> keys = [] {
    std::vector<KeySpec> k = {
        {"admin.listen", KeyType::String, "",
         "host:port of /metrics, /healthz, /readyz (empty: off)"},
        {"admin.console", KeyType::Boolean, "false",
         "idem consume: serve the web console (docs/console.md) on admin.listen too"},
        duration_ms("admin.stuck_after_ms", "60000",
                    "/readyz fails when the consumer loop has not turned for this long", kSecond,
                    kMaxMs),
        duration("billing.provider_key_retention", "",
                 "how long the payment provider billing calls remembers an Idempotency-Key, "
                 "as its operator states it (empty: unknown); config check warns when it is "
                 "shorter than dedup.retention",
                 kHour, 3650 * kDay),
        {"console.groups", KeyType::List, "",
         "idem console: consumer groups to show besides those the store knows"},
        {"console.listen", KeyType::String, "127.0.0.1:8480",
         "idem console: host:port of the web console (loopback unless you mean it)"},
        duration("console.refresh", "2s", "idem console: how often lag and throughput are sampled",
                 200, 60 * kSecond),
        {"console.scrape", KeyType::List, "",
         "idem console: admin servers (host:port) of consumers whose /metrics give throughput"},
        {"console.token", KeyType::String, "",
         "idem console: token required for replays (header X-Idem-Token; empty: replay off)"},
        {"consumer.batch_size", KeyType::Integer, "500", "records per transaction", 1, 100000},
        duration_ms("consumer.batch_window_ms", "50", "wait for more records after a batch's first",
                    0, 60 * kSecond),
        duration_ms("consumer.dlq_ack_timeout_ms", "30000", "wait for the DLQ acknowledgement", 1,
                    kMaxMs),
        {"consumer.dlq_suffix", KeyType::String, ".dlq", "dead letters of T go to T + suffix"},
        {"consumer.group", KeyType::String, "", "consumer group; also the dedup rows' group"},
        {"consumer.handler",
         KeyType::Choice,
         "count",
         "built-in handler of idem consume: count, billing or analytics",
         0,
         0,
         {"count", "billing", "analytics"}},
        {"consumer.instance_id", KeyType::String, "",
         "static group membership (librdkafka group.instance.id), one per process; empty: "
         "dynamic"},
        {"consumer.max_headers", KeyType::Integer, "64", "records with more headers are refused", 1,
         10000},
        {"consumer.max_in_flight", KeyType::Integer, "256",
         "effect calls in flight at most, one per ordering key", 1, 1000000},
        {"consumer.max_message_bytes", KeyType::Integer, "65536",
         "payloads above go to the DLQ (too_large)", 1, 64.0 * 1024 * 1024},
        {"consumer.pipeline_depth", KeyType::Integer, "1",
         "2: prepare the next batch on a second connection while this one commits", 1, 2},
        {"consumer.provider_url", KeyType::String, "",
         "billing handler: the payment provider's base URL"},
        duration_ms("consumer.retry_initial_ms", "100", "first retry backoff", 1, kMaxMs),
        {"consumer.retry_jitter", KeyType::Number, "0.2", "backoff jitter", 0, 1},
        duration_ms("consumer.retry_max_ms", "10000", "backoff cap", 1, kMaxMs),
        {"consumer.retry_multiplier", KeyType::Number, "2", "backoff growth", 1, 1000},
        {"consumer.retry_topics.delays", KeyType::DurationList, "",
         "non-blocking retry topics, one delay each, e.g. 1s,10s (empty: retries block the "
         "partition, which keeps per-key order)",
         1, 7 * kDay},
        {"consumer.stale_events",
         KeyType::Choice,
         "quarantine",
         "events past the dedup horizon: quarantine (DLQ), process or skip",
         0,
         0,
         {"quarantine", "process", "skip"}},
        duration("consumer.stop_timeout", "30s",
                 "on SIGTERM, finish, commit and leave the group within this long (then exit "
                 "non-zero, saying what was not done)",
                 0, kHour),
        {"consumer.topics", KeyType::List, "", "topics to consume (comma-separated)"},
        {"dedup.partition_period", KeyType::Duration, "24h",
         "partitioned PostgreSQL: period of a processed_event partition (whole hours)", kHour,
         366 * kDay},
        {"dedup.partitioned", KeyType::Boolean, "false",
         "PostgreSQL: migrate RANGE-partitions processed_event on event_id"},
        {"dedup.partitions_ahead", KeyType::Integer, "3",
         "partitioned PostgreSQL: periods after now that must have a partition", 0, 3660},
        {"dedup.partitions_behind", KeyType::Integer, "7",
         "partitioned PostgreSQL: periods before now that migrate creates", 0, 3660},
        duration(
            "dedup.retention", "7d",
            "dedup rows are kept this long in event time; older events are stale (whole hours)",
            kHour, 3650 * kDay),
        duration("dedup.safety_margin", "1h", "dedup horizon = retention - margin (whole hours)", 0,
                 3650 * kDay),
        {"demo.batch", KeyType::Integer, "20", "events per consumer transaction", 1, 100000},
        {"demo.consumer_kills", KeyType::Integer, "2", "consumer SIGKILLs (with restart)", 0, 100},
        {"demo.decline", KeyType::Number, "0.2",
         "provider: share of orders declined in the DLQ phase", 0, 1},
        {"demo.faults",
         KeyType::List,
         "all",
         "fault phases: all, none, or a list of relay-kill, consumer-kill, rebalance, provider, "
         "resend, malformed, dlq-replay, offset-reset",
         0,
         0,
         {"all", "none", "relay-kill", "consumer-kill", "rebalance", "provider", "resend",
          "malformed", "dlq-replay", "offset-reset"}},
        {"demo.keep", KeyType::Boolean, "false",
         "keep the temp dir (child logs, SQLite files) after a successful run"},
        {"demo.orders", KeyType::Integer, "300", "orders to create and confirm", 10, 1'000'000},
        {"demo.partitions", KeyType::Integer, "6", "partitions of the topic on the embedded broker",
         1, 1000},
        duration("demo.provider_latency", "20ms",
                 "provider: added to every new charge, so billing's calls are in flight together",
                 0, 10 * kSecond),
        {"demo.relay_kills", KeyType::Integer, "3", "relay SIGKILLs", 0, 100},
        {"demo.resend", KeyType::Number, "0.1", "share of outbox rows the relay publishes again", 0,
         1},
        {"demo.reset_after_commit", KeyType::Number, "0.05",
         "provider: probability of a connection reset after a stored charge", 0, 0.5},
        {"demo.seed", KeyType::Integer, "42", "random seed (orders, kill points, provider faults)",
         0, kMaxSeed},
        duration("demo.timeout", "120s", "give up after this long", 10 * kSecond, kHour),
        {"demo.unavailable", KeyType::Number, "0.05", "provider: probability of a 503", 0, 0.5},
        {"dev_broker.brokers", KeyType::Integer, "1", "number of brokers", 1, 32},
        {"dev_broker.read_stdin", KeyType::Boolean, "true",
         "read control commands from stdin (create-topic, broker-down, ...)"},
        {"dev_broker.topics", KeyType::List, "",
         "topics to create, NAME or NAME:PARTITIONS (3 partitions by default)"},
        {"dlq.replay_rate", KeyType::Number, "0",
         "replay at most this many records per second (0: no limit)", 0, 1e9},
        duration("dlq.timeout", "30s", "deadline of each broker step", kSecond, kHour),
        {"dlq.topic", KeyType::String, "", "the dead-letter topic, e.g. orders.dlq"},
        {"log.format", KeyType::Choice, "plain", "plain or json", 0, 0, {"plain", "json"}},
        {"log.level",
         KeyType::Choice,
         "info",
         "least severe level written",
         0,
         0,
         {"debug", "info", "warn", "error"}},
        duration("maintenance.batch_pause", "0ms", "pause between two DELETE batches", 0,
                 60 * kSecond),
        {"maintenance.batch_size", KeyType::Integer, "5000", "rows per DELETE (and transaction)", 1,
         1'000'000},
        duration("maintenance.interval", "0s",
                 "idem consume: run a retention pass in the background this often (0: off)", 0,
                 kDay),
        {"maintenance.max_batches", KeyType::Integer, "0",
         "batches per table and pass (0: until done)", 0, 1e9},
        duration("maintenance.outbox_retention", "24h",
                 "published outbox rows older than this are deleted (0: keep)", 0, 3650 * kDay),
        {"postgres.dbname", KeyType::String, "", "libpq dbname", 0, 0, {}, {"PGDATABASE"}},
        {"postgres.host", KeyType::String, "", "libpq host", 0, 0, {}, {"PGHOST"}},
        {"postgres.password", KeyType::String, "", "libpq password", 0, 0, {}, {"PGPASSWORD"}},
        {"postgres.port", KeyType::Integer, "", "libpq port", 1, 65535, {}, {"PGPORT"}},
        {"postgres.sslcert", KeyType::String, "", "libpq sslcert", 0, 0, {}, {"PGSSLCERT"}},
        {"postgres.sslkey", KeyType::String, "", "libpq sslkey", 0, 0, {}, {"PGSSLKEY"}},
        {"postgres.sslmode",
         KeyType::Choice,
         "",
         "libpq sslmode",
         0,
         0,
         {"disable", "allow", "prefer", "require", "verify-ca", "verify-full"},
         {"PGSSLMODE"}},
        {"postgres.sslrootcert",
         KeyType::String,
         "",
         "libpq sslrootcert",
         0,
         0,
         {},
         {"PGSSLROOTCERT"}},
        {"postgres.user", KeyType::String, "", "libpq user", 0, 0, {}, {"PGUSER"}},
        {"provider.decline", KeyType::Number, "0",
         "share of orders declined with 402 card_declined (by hash of order_id and seed)", 0, 1},
        duration("provider.key_retention", "8d",
                 "how long an Idempotency-Key is remembered; covers the 7 d dedup retention "
                 "plus a day",
                 0, 3650 * kDay),
        duration("provider.latency", "0ms", "added to every new charge", 0, 600 * kSecond),
        {"provider.listen", KeyType::String, "127.0.0.1:0",
         "host:port to listen on (port 0: any free port)"},
        {"provider.reset_after_commit", KeyType::Number, "0",
         "share of new charges committed and then answered with a dropped connection", 0, 1},
        {"provider.seed", KeyType::Integer, "42", "seed of the fault draws and the decline hash", 0,
         kMaxSeed},
        {"provider.unavailable", KeyType::Number, "0", "share of charge requests answered 503", 0,
         1},
        {"relay.batch_size", KeyType::Integer, "1000", "rows per claim", 1, 100000},
        {"relay.in_flight", KeyType::Integer, "8", "batches produced but not yet marked", 1, 64},
        {"relay.listen", KeyType::Boolean, "true", "PostgreSQL: LISTEN/NOTIFY besides polling"},
        {"relay.mark_connections", KeyType::Integer, "2",
         "connections marking rows published (0: on the relay's own)", 0, 16},
        duration_ms("relay.poll_interval_ms", "500", "idle polling interval", 1, kMaxMs),
        duration_ms("relay.progress_interval_ms", "5000", "progress interval (0: none)", 0, kMaxMs),
        duration("relay.rebalance_interval", "2s", "shard rebalance interval", 10, 600 * kSecond),
        [] {
          KeySpec hours{"relay.retention_hours",
                        KeyType::Duration,
                        "24",
                        "published rows older than this are deleted (a bare number is hours)",
                        0,
                        366 * kDay};
          hours.unit_of_bare_number = "h";
          return hours;
        }(),
        duration("relay.stop_timeout", "30s",
                 "on SIGTERM, finish the batches in flight and exit within this long (then "
                 "exit non-zero: rows not marked published are sent again by the next relay)",
                 0, kHour),
        {"store.application_name", KeyType::String, "idem", "PostgreSQL application_name"},
        duration_ms("store.busy_timeout_ms", "5000", "SQLite lock wait", 0, kMaxMs),
        duration_ms("store.connect_timeout_ms", "10000", "PostgreSQL connect deadline", kSecond,
                    kMaxMs),
        duration_ms("store.statement_timeout_ms", "0",
                    "PostgreSQL statement_timeout (0: server default)", 0, kMaxMs),
        {"store.url", KeyType::String, "", "postgresql://... or sqlite://..."},
        {"tracing.enabled", KeyType::Boolean, "true", "create and forward W3C traceparent"},
    };
    std::sort(k.begin(), k.end(),
              [](const KeySpec& a, const KeySpec& b) { return a.name < b.name; });
    return k;
  }();
  return keys;
}

}  // namespace

std::span<const KeySpec> key_specs() {
  return table();
}

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
