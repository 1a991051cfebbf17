#pragma once
/// \file
/// The one configuration loader of idem. Every command and every service takes its
/// settings from load_config(); no other code reads the environment or parses config.
///
/// Layers, each overriding the one before, key by key:
///   1. defaults (written next to each key in src/config/keys.cpp)
///   2. a TOML file (`--config PATH`, else the `IDEM_CONFIG` environment variable)
///   3. the environment: `IDEM_<KEY>` (upper case, dots become `_`; e.g.
///      `IDEM_CONSUMER_BATCH_SIZE` for `consumer.batch_size`), `IDEM_KAFKA_<PROP>` for a
///      librdkafka property (`IDEM_KAFKA_SECURITY_PROTOCOL` -> `kafka.security.protocol`),
///      the conventional `KAFKA_BOOTSTRAP_SERVERS`, and libpq's `PGHOST`, `PGPORT`,
///      `PGDATABASE`, `PGUSER`, `PGPASSWORD`, `PGSSLMODE`, ... (-> `postgres.*`).
///      An `IDEM_*` name is more specific than a conventional one and wins over it.
///   4. command-line flags (each command maps its flags to keys; `--set key=value`
///      reaches any key)
///
/// Keys under `kafka.` are librdkafka properties, passed through unchanged (this is how
/// TLS and SASL are configured); the loader checks each one against librdkafka once.
/// Everything is validated in one pass and every problem is reported together, each
/// naming its key and the layer it came from (ConfigError).
///
/// Secrets (passwords, SASL credentials, private keys, the password inside a store URL)
/// are redacted by every function here that produces text.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/consumer.hpp"
#include "idem/dedup_horizon.hpp"
#include "idem/error.hpp"
#include "idem/relay.hpp"
#include "idem/retention.hpp"
#include "idem/store.hpp"

namespace idem {

/// The one duration syntax of idem (configuration keys, flags, the DLQ's age filters):
/// a non-negative decimal number and a unit, `ms`, `s`, `m`, `h` or `d`, e.g. `250ms`,
/// `90s`, `1.5h`, `7d`. A bare number is accepted only when `unit_of_bare_number` names
/// the unit it means (the `_ms` keys and the `--...-hours` flags predate units).
/// Fractions of a millisecond are rounded down. nullopt for anything else, including a
/// negative or overflowing value. Never throws.
[[nodiscard]] std::optional<std::chrono::milliseconds> parse_duration(
    std::string_view text, std::string_view unit_of_bare_number = {}) noexcept;

/// `d` in the largest unit that writes it exactly: `7d`, `90s`, `1500ms`, `0s`.
[[nodiscard]] std::string format_duration(std::chrono::milliseconds d);

/// Where a configuration value came from.
enum class ConfigLayer { Default, File, Environment, Flag };

[[nodiscard]] std::string_view to_string(ConfigLayer layer) noexcept;

/// The origin of one value, precise enough to find it: `file /etc/idem.toml:12`,
/// `env IDEM_CONSUMER_BATCH_SIZE`, `flag --batch`.
struct ConfigOrigin {
  ConfigLayer layer = ConfigLayer::Default;
  std::string where;  ///< file path and line, variable name or flag; empty for defaults

  [[nodiscard]] std::string describe() const;
};

/// One flag value, already mapped to its key by the command that parsed it.
struct FlagSetting {
  std::string key;    ///< e.g. "consumer.group"
  std::string value;  ///< lists are comma-separated
  std::string flag;   ///< e.g. "--group"; used only to name the origin
};

/// Everything the loader reads. The caller supplies the environment as a snapshot, so
/// tests pass a vector and never call setenv; the CLI passes process_environment().
struct ConfigSources {
  /// TOML file to read. Empty: none (then `IDEM_CONFIG` in `environment`, if set, names it).
  std::string file;
  std::vector<std::pair<std::string, std::string>> environment;
  std::vector<FlagSetting> flags;
};

/// The process environment as name/value pairs. The only place idem reads it.
[[nodiscard]] std::vector<std::pair<std::string, std::string>> process_environment();

/// One problem found while loading.
struct ConfigProblem {
  std::string key;      ///< the key concerned (or the file/variable when there is no key)
  ConfigOrigin origin;  ///< where the offending value came from
  std::string message;  ///< what is wrong; never contains a secret value
};

/// Thrown by load_config(): every problem at once. what() lists them, one per line.
class ConfigError : public Error {
 public:
  explicit ConfigError(std::vector<ConfigProblem> problems);
  [[nodiscard]] const std::vector<ConfigProblem>& problems() const noexcept { return problems_; }

 private:
  std::vector<ConfigProblem> problems_;
};

enum class LogLevel { Debug, Info, Warn, Error };
enum class LogFormat { Plain, Json };

[[nodiscard]] std::string_view to_string(LogLevel level) noexcept;

/// `log.*`
struct LogSettings {
  LogLevel level = LogLevel::Info;
  LogFormat format = LogFormat::Plain;
};

/// `admin.*`: the HTTP port serving /metrics, /healthz and /readyz.
struct AdminSettings {
  std::string listen;  ///< host:port; empty = no admin server (port 0 picks a free port)
  /// /readyz reports "stuck" when the consumer loop has not turned for this long.
  std::chrono::milliseconds stuck_after{60'000};
  bool console = false;  ///< serve the web console on the same port (docs/console.md)
};

/// `tracing.*`
struct TracingSettings {
  bool enabled = true;  ///< create/forward W3C traceparent headers and log trace ids
};

/// The built-in handlers of `idem consume` (`consumer.handler`).
enum class HandlerKind { Count, Billing, Analytics };

/// `consumer.*`
struct ConsumerSettings {
  std::string group;
  std::vector<std::string> topics;
  std::size_t batch_size = 500;
  std::chrono::milliseconds batch_window{50};
  std::size_t max_in_flight =
      256;  ///< effect calls in flight at most (ConsumerConfig::max_in_flight)
  std::size_t pipeline_depth = 1;  ///< ConsumerConfig::pipeline_depth
  std::string dlq_suffix = ".dlq";
  RetryPolicy retry;
  std::size_t max_message_bytes = 64 * 1024;  ///< payloads above go to the DLQ (too_large)
  std::size_t max_headers = 64;               ///< records with more headers are refused
  std::chrono::milliseconds dlq_ack_timeout{30'000};
  RetryTopics retry_topics;  ///< `consumer.retry_topics.delays`; empty = retries block
  StaleEventPolicy stale_events = StaleEventPolicy::Quarantine;
  HandlerKind handler = HandlerKind::Count;
  std::string provider_url;                        ///< billing: the payment provider's base URL
  std::chrono::milliseconds stop_timeout{30'000};  ///< ConsumerConfig::stop_timeout
  std::string instance_id;  ///< ConsumerConfig::instance_id (librdkafka group.instance.id)
};

/// `dedup.*`: how long dedup rows are kept and how the table is partitioned. Shared by
/// consume (the stale guard), maintain (what to delete), migrate (the partitions) and
/// `dlq replay` (what it refuses), so they cannot disagree.
struct DedupSettings {
  DedupHorizon horizon;      ///< `dedup.retention`, `dedup.safety_margin`
  bool partitioned = false;  ///< PostgreSQL: RANGE-partition processed_event (migrate)
  std::chrono::hours partition_period{24};
  int partitions_behind = 7;
  int partitions_ahead = 3;
};

/// `maintenance.*`: the retention pass (`idem maintain`, `idem consume` in the background).
struct MaintenanceSettings {
  std::chrono::milliseconds interval{0};  ///< consume: background pass this often; 0 = off
  std::chrono::milliseconds outbox_retention{std::chrono::hours(24)};
  std::size_t batch_size = 5000;
  std::chrono::milliseconds batch_pause{0};
  std::size_t max_batches = 0;
};

/// `dlq.*`: `idem dlq list|show|replay`.
struct DlqSettings {
  std::string topic;                          ///< the dead-letter topic
  std::chrono::milliseconds timeout{30'000};  ///< deadline of each broker step
  double replay_rate = 0;                     ///< records per second; 0 = no limit
};

/// `console.*`: the operators' web console (`idem console`).
struct ConsoleSettings {
  std::string listen = "127.0.0.1:8480";  ///< host:port; loopback by default
  /// Required (X-Idem-Token header) for replays; empty: the console replays nothing.
  std::string token;
  std::chrono::milliseconds refresh{2000};  ///< sampling period of lag and throughput
  std::vector<std::string> scrape;          ///< admin servers (host:port) read for throughput
  std::vector<std::string> groups;          ///< groups shown besides the store's
};

/// `provider.*`: the reference payment provider (`idem provider`).
struct ProviderSettings {
  std::string listen = "127.0.0.1:0";  ///< host:port; port 0 picks a free port
  /// Longer than the default dedup retention (7 d), so a redelivery the consumer still
  /// executes always finds its key (IDEM-4).
  std::chrono::milliseconds key_retention{std::chrono::hours(24 * 8)};
  double reset_after_commit = 0;
  double unavailable = 0;
  std::chrono::milliseconds latency{0};
  double decline = 0;
  std::uint64_t seed = 42;
};

/// `billing.*`: what the billing consumer knows about the provider it calls.
struct BillingSettings {
  /// The provider's Idempotency-Key retention as its operator states it; nullopt:
  /// unknown (an outside provider's retention is known only when someone states it).
  std::optional<std::chrono::milliseconds> provider_key_retention;
};

/// One topic of `dev_broker.topics`: `NAME` or `NAME:PARTITIONS`.
struct DevBrokerTopic {
  std::string name;
  int partitions = 3;
};

/// `dev_broker.*`: the embedded broker (`idem dev-broker`).
struct DevBrokerSettings {
  int brokers = 1;
  std::vector<DevBrokerTopic> topics;
  bool read_stdin = true;  ///< read control commands from stdin
};

/// `demo.*`: `idem demo` (the store and brokers are `store.url`, `kafka.bootstrap.servers`).
struct DemoSettings {
  int orders = 300;
  int partitions = 6;
  std::size_t batch = 20;
  std::uint64_t seed = 42;
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  std::vector<std::string> faults{"all"};
  int relay_kills = 3;
  int consumer_kills = 2;
  double resend = 0.10;
  double reset_after_commit = 0.05;
  double unavailable = 0.05;
  double decline = 0.20;
  std::chrono::milliseconds provider_latency{20};
  bool keep = false;
};

/// `relay.*`
struct RelaySettings {
  std::size_t batch_size = 1000;
  std::size_t in_flight = 8;
  std::size_t mark_connections = 2;
  std::chrono::milliseconds poll_interval{500};
  std::chrono::milliseconds retention{std::chrono::hours(24)};
  std::chrono::milliseconds progress_interval{5000};
  std::chrono::milliseconds rebalance_interval{2000};
  std::chrono::milliseconds stop_timeout{30'000};
  bool listen = true;  ///< PostgreSQL: LISTEN/NOTIFY besides polling
};

/// Top-level tables of the TOML file that load_config() leaves to the component owning
/// them, which reads its table from the same file (Config::file): `routes`, the sinks
/// declared in the file (idem::sinks, docs/configured-sinks.md).
inline constexpr std::array<std::string_view, 1> kComponentTables{"routes"};

/// One effective key with its value and origin, for `idem config check`.
struct ConfigEntry {
  std::string key;
  std::string value;  ///< as given (lists comma-separated); see `secret`
  bool secret = false;
  ConfigOrigin origin;

  /// The value as it may be shown: `<redacted>` for a secret, a store URL with its
  /// password replaced.
  [[nodiscard]] std::string display_value() const;
};

/// The validated, typed configuration.
struct Config {
  /// The TOML file read (`--config`, else `IDEM_CONFIG`); empty when none. Components read
  /// their own tables (kComponentTables) from it.
  std::string file;
  /// The store to open: `store.url`, with `postgres.*` (and so PG*) applied to a
  /// PostgreSQL URL as libpq key/value parameters. Contains the password if one was
  /// given: show it only through redact_store_url().
  std::string store_url;
  StoreOptions store_options;
  std::string bootstrap_servers;  ///< `kafka.bootstrap.servers`
  /// Every other `kafka.*` key, without the prefix, in key order.
  std::vector<std::pair<std::string, std::string>> kafka;
  ConsumerSettings consumer;
  RelaySettings relay;
  AdminSettings admin;
  LogSettings log;
  TracingSettings tracing;
  DedupSettings dedup;
  MaintenanceSettings maintenance;
  DlqSettings dlq;
  ConsoleSettings console;
  ProviderSettings provider;
  BillingSettings billing;
  DevBrokerSettings dev_broker;
  DemoSettings demo;
  /// Every key (unset ones with an empty value; pass-through `kafka.*` ones when set),
  /// sorted by key.
  std::vector<ConfigEntry> entries;
  /// Settings that are valid one by one but together can cost an effect (a provider
  /// keeping keys shorter than the dedup retention); `idem config check` prints them.
  std::vector<std::string> warnings;

  /// A ConsumerConfig from these settings. Does not check `consumer.group`/`topics`
  /// (commands that need them use require()).
  [[nodiscard]] ConsumerConfig consumer_config() const;
  /// A RelayConfig from these settings (client id `idem-relay`).
  [[nodiscard]] RelayConfig relay_config() const;
  /// A RetentionPolicy from `dedup.*` and `maintenance.*`.
  [[nodiscard]] RetentionPolicy retention_policy() const;

  /// Throws ConfigError listing each of `keys` that has no non-empty value, e.g. a
  /// command's required settings: require({"store.url", "consumer.group"}).
  void require(std::initializer_list<std::string_view> keys) const;

  /// The effective configuration as `key = value  # origin` lines, secrets redacted;
  /// every key, an unset one as `key =  # default (unset)`.
  [[nodiscard]] std::string describe() const;
};

/// Applies the layers, validates once and returns the result.
/// \throws ConfigError with every problem: unreadable or malformed file, unknown key
///   (in the file, as IDEM_* variable or as flag), a value of the wrong type or out of
///   range, a librdkafka property librdkafka rejects or idem owns, and inconsistent
///   combinations.
[[nodiscard]] Config load_config(const ConfigSources& sources);

/// True for keys whose values are secrets (passwords, SASL credentials, private keys,
/// tokens). Matching is on the key name, so it covers librdkafka properties too.
[[nodiscard]] bool is_secret_key(std::string_view key) noexcept;

/// `url` with any password replaced by `<redacted>`: the user-info password of a URI
/// (`postgresql://u:secret@h/db`), a `password=` key/value parameter, a `password=`
/// query parameter.
[[nodiscard]] std::string redact_store_url(std::string_view url);

}  // namespace idem
