#pragma once
/// \file
/// The one configuration loader of idem. Every command and every service takes its
/// settings from load_config(); no other code reads the environment or parses config.
///
/// The keys are those of a ConfigSchema: the core's, plus the sections that components
/// and commands declare (idem/config_keys.hpp), each key in the part that owns it.
///
/// Layers, each overriding the one before, key by key:
///   1. defaults (the members' own, in each section's settings struct)
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
/// A renamed key (its unit left the name: `relay.retention_hours` is `relay.retention`)
/// is still read under its old names (KeySpec::renamed_from) in every layer: the file,
/// `IDEM_<OLD_KEY>`, `--set old.key=...`, and a command's old flag (FlagSetting::new_flag).
/// Each old name used gives one warning (Config::renamed_warnings) naming the old and the
/// new name and where the value came from; an old and a new name of one key set together,
/// in any layers, is an error naming both.
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
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <typeindex>
#include <typeinfo>
#include <utility>
#include <vector>

#include "idem/config_keys.hpp"
#include "idem/consumer.hpp"
#include "idem/dedup_horizon.hpp"
#include "idem/error.hpp"
#include "idem/logging.hpp"
#include "idem/relay.hpp"
#include "idem/retention.hpp"
#include "idem/store.hpp"

namespace idem {

/// The one duration syntax of idem (configuration keys, flags, the DLQ's age filters):
/// a non-negative decimal number and a unit, `ms`, `s`, `m`, `h` or `d`, e.g. `250ms`,
/// `90s`, `1.5h`, `7d`. A bare number is accepted only when `unit_of_bare_number` names
/// the unit it means (keys and flags whose old names carried a unit, `_ms` or `-hours`,
/// predate units and keep that unit for a bare number).
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
  /// Set when `flag` is an older name kept for compatibility (`--retention-hours`): the
  /// flag's name now (`--retention`). The loader warns, and refuses both given together.
  std::string new_flag{};
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

/// `dedup.*`: how long dedup rows are kept and how the table is partitioned. Shared by
/// consume (the stale guard), maintain (what to delete), migrate (the partitions) and
/// `dlq replay` (what it refuses), so they cannot disagree.
struct DedupSettings {
  DedupHorizon horizon;       ///< `dedup.retention`, `dedup.safety_margin`
  MigrateOptions partitions;  ///< PostgreSQL: RANGE partitions of processed_event (migrate)
};

/// `maintenance.*`: the retention pass (`idem maintain`, `idem consume` in the background).
struct MaintenanceSettings {
  std::chrono::milliseconds interval{0};  ///< consume: background pass this often; 0 = off
  /// `idem maintain`: a pass cut short by a lost connection (a failover, say) starts
  /// again on a new connection until this long after the first start; 0 = never.
  std::chrono::milliseconds retry_for{60'000};
  /// Outbox retention and batching; its dedup and partition fields come from `dedup.*`
  /// (retention_policy()).
  RetentionPolicy policy;
};

/// `dlq.*`: `idem dlq list|show|replay`.
struct DlqSettings {
  std::string topic;                          ///< the dead-letter topic
  std::chrono::milliseconds timeout{30'000};  ///< deadline of each broker step
  double replay_rate = 0;                     ///< records per second; 0 = no limit
};

/// `tracing.*`
struct TracingSettings {
  bool enabled = true;  ///< create/forward W3C traceparent headers and log trace ids
};

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

class ConfigSchema;
class ConfigDocument;

namespace detail {
/// One key's value as the layers left it, and where it came from.
struct Setting {
  std::string value;
  ConfigOrigin origin;
};
using Settings = std::map<std::string, Setting, std::less<>>;
class Problems;
}  // namespace detail

/// The validated, typed configuration: the core's settings as members, and the sections
/// the schema added (components' and commands') through get().
struct Config {
  /// The store to open: `store.url`, with `postgres.*` (and so PG*) applied to a
  /// PostgreSQL URL as libpq key/value parameters. Contains the password if one was
  /// given: show it only through redact_store_url().
  std::string store_url;
  StoreOptions store_options;
  std::string bootstrap_servers;  ///< `kafka.bootstrap.servers`
  /// Every other `kafka.*` key, without the prefix, in key order.
  std::vector<std::pair<std::string, std::string>> kafka;
  /// `consumer.*`. Its bootstrap servers, librdkafka properties and dedup horizon are
  /// filled in by consumer_config().
  ConsumerConfig consumer;
  /// `relay.*`. Its store, producer and client id are filled in by relay_config().
  RelayConfig relay;
  LogSettings log;
  TracingSettings tracing;
  DedupSettings dedup;
  MaintenanceSettings maintenance;
  DlqSettings dlq;
  /// The TOML file read (empty: none).
  std::string file;
  /// That file as parsed (null: none), for a part that reads a table of it itself
  /// (ConfigSchema::reserve_table): the file is parsed once.
  std::shared_ptr<const ConfigDocument> document;
  /// The environment the loader read (ConfigSources::environment), for a part that reads
  /// variables of its own (a route's `{env.NAME}`): the environment is read once.
  std::vector<std::pair<std::string, std::string>> environment;
  /// Every key (unset ones with an empty value; pass-through `kafka.*` ones when set),
  /// sorted by key.
  std::vector<ConfigEntry> entries;
  /// Settings that are valid one by one but together can cost an effect (a provider
  /// keeping keys shorter than the dedup retention); `idem config check` prints them.
  std::vector<std::string> warnings;
  /// One warning per old name of a renamed key or flag that was used, naming the old and
  /// the new name and where the value came from. Every command prints them.
  std::vector<std::string> renamed_warnings;

  /// A section the schema added (ConfigSchema::add<S>).
  /// \throws Error(InvalidArgument, Config) when the schema had no such section.
  template <class S>
  [[nodiscard]] const S& get() const {
    return *static_cast<const S*>(section(typeid(S)));
  }

  /// A ConsumerConfig from these settings. Does not check `consumer.group`/`topics`
  /// (commands that need them use require()).
  [[nodiscard]] ConsumerConfig consumer_config() const;
  /// A RelayConfig from these settings (client id `idem-relay`).
  [[nodiscard]] RelayConfig relay_config() const;
  /// A RetentionPolicy from `dedup.*` and `maintenance.*`.
  [[nodiscard]] RetentionPolicy retention_policy() const;
  /// MigrateOptions from `dedup.*`.
  [[nodiscard]] const MigrateOptions& migrate_options() const noexcept { return dedup.partitions; }

  /// The entry of `key`, or nullptr when the schema has no such key.
  [[nodiscard]] const ConfigEntry* entry(std::string_view key) const;

  /// Throws ConfigError listing each of `keys` that has no non-empty value, e.g. a
  /// command's required settings: require({"store.url", "consumer.group"}).
  void require(std::initializer_list<std::string_view> keys) const;

  /// The effective configuration as `key = value  # origin` lines, secrets redacted;
  /// every key, an unset one as `key =  # default (unset)`.
  [[nodiscard]] std::string describe() const;

 private:
  friend class ConfigSchema;
  [[nodiscard]] const void* section(const std::type_info& type) const;
  std::map<std::type_index, std::shared_ptr<void>> sections_;
};

/// The keys one loader knows: the core's (store, postgres, kafka, consumer, relay, log,
/// tracing, dedup, maintenance, dlq), plus the sections that components and commands
/// add. A key is declared once, in the part that owns it; unknown keys are reported.
class ConfigSchema {
 public:
  /// The core's keys.
  ConfigSchema();
  ~ConfigSchema();
  ConfigSchema(const ConfigSchema&);
  ConfigSchema& operator=(const ConfigSchema&);

  /// Adds the keys `declare` binds to members of `S`; Config::get<S>() then returns them.
  /// \throws Error(InvalidArgument, Config) for a key declared twice or a section added twice.
  template <class S>
  ConfigSchema& add(void (*declare)(SectionKeys<S>&)) {
    detail::SectionDeclaration declaration;
    SectionKeys<S> keys(declaration);
    declare(keys);
    add_section(
        typeid(S), [] { return std::make_shared<S>(); }, std::move(declaration));
    return *this;
  }

  /// A warning over the whole loaded configuration: settings that are valid one by one
  /// but together can cost an effect. Runs after every section was loaded.
  ConfigSchema& warn(std::function<void(const Config&, std::vector<std::string>&)> check);

  /// A top-level table of the TOML file that its owner reads itself (from Config::file):
  /// the loader neither reads its content nor reports it as unknown keys.
  ConfigSchema& reserve_table(std::string name);

  /// Every declared key, sorted by name (the pass-through `kafka.*` ones aside).
  [[nodiscard]] std::vector<KeySpec> keys() const;
  /// The spec of `name`, or nullptr.
  [[nodiscard]] const KeySpec* find(std::string_view name) const;
  /// The spec of the key `old_name` is an older name of (KeySpec::renamed_from), or nullptr.
  [[nodiscard]] const KeySpec* renamed_to(std::string_view old_name) const;
  [[nodiscard]] bool is_reserved_table(std::string_view name) const;

 private:
  friend Config load_config(const ConfigSources& sources, const ConfigSchema& schema);
  /// Applies `settings` to a fresh Config; every problem goes to `problems`.
  Config build(const detail::Settings& settings, detail::Problems& problems) const;
  void add_section(const std::type_info& type, std::function<std::shared_ptr<void>()> make,
                   detail::SectionDeclaration declaration);
  struct Parts;
  std::unique_ptr<Parts> parts_;
};

/// Applies the layers over the keys of `schema`, validates once and returns the result.
/// \throws ConfigError with every problem: unreadable or malformed file, unknown key
///   (in the file, as IDEM_* variable or as flag), a value of the wrong type or out of
///   range, a librdkafka property librdkafka rejects or idem owns, and inconsistent
///   combinations.
[[nodiscard]] Config load_config(const ConfigSources& sources,
                                 const ConfigSchema& schema = ConfigSchema());

/// True for `host:port` with a port from 0 to 65535 (port 0: any free port), the form of
/// every `*.listen` key.
[[nodiscard]] bool is_host_port(std::string_view text) noexcept;

/// True for keys whose values are secrets (passwords, SASL credentials, private keys,
/// tokens). Matching is on the key name, so it covers librdkafka properties too.
[[nodiscard]] bool is_secret_key(std::string_view key) noexcept;

/// `url` with any password replaced by `<redacted>`: the user-info password of a URI
/// (`postgresql://u:secret@h/db`), a `password=` key/value parameter, a `password=`
/// query parameter.
[[nodiscard]] std::string redact_store_url(std::string_view url);

}  // namespace idem
