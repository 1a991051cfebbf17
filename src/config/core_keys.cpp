// The core's configuration keys, each bound to the member of the library struct it sets
// (ConsumerConfig, RelayConfig, StoreOptions, DedupHorizon, MigrateOptions,
// RetentionPolicy, ...), so a default is the struct's own; the checks that span keys;
// the composition of store.url with postgres.*; the librdkafka pass-through.
#include <librdkafka/rdkafka.h>

#include <array>
#include <cctype>
#include <charconv>
#include <map>
#include <set>

#include <fmt/format.h>

#include "config/problems.hpp"
#include "stores/postgres/pg_conninfo.hpp"

namespace idem::detail {

namespace {

// The keys that once carried `_ms` in their names: none needs more than a day.
constexpr double kMaxMs = kConfigDay;

// librdkafka properties idem sets itself; the message says what to do instead.
struct OwnedProperty {
  std::string_view name;
  std::string_view why;
};
constexpr std::array<OwnedProperty, 5> kOwnedKafkaProperties = {{
    {"enable.auto.commit",
     "owned by idem (always false: offsets are committed only after the "
     "database transaction)"},
    {"enable.auto.offset.store", "owned by idem (always false)"},
    {"group.id", "set the consumer group with consumer.group"},
    {"enable.idempotence", "owned by idem (always true for the relay's producer)"},
    {"acks", "owned by idem (always all for the relay's producer)"},
}};

bool is_postgres_url(std::string_view url) {
  return url.starts_with("postgresql:") || url.starts_with("postgres:");
}

// libpq key/value quoting: single quotes, backslash escapes for ' and \.
std::string conninfo_value(std::string_view v) {
  std::string out = "'";
  for (const char c : v) {
    if (c == '\'' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

// store.url with the postgres.* keys applied on top of it, as a libpq key/value string
// (`postgresql:` + parameters), so a URI and PG* variables combine key by key.
void compose_store_url(Config& c, SectionProblems& problems) {
  const std::string url = c.store_url;
  if (!url.empty() && !is_postgres_url(url) && !url.starts_with("sqlite://")) {
    problems.fail("store.url", "expected a postgresql://, postgres:// or sqlite:// URL");
    return;
  }
  // SQLite: postgres.* (e.g. a PGHOST in the environment) do not apply.
  if (!url.empty() && !is_postgres_url(url)) return;
  const auto& overrides = c.get<PostgresParams>().values;
  std::map<std::string, std::string> params;
  if (!url.empty()) {
    std::string conninfo(url);
    if (conninfo.starts_with("postgresql:") && !conninfo.starts_with("postgresql://"))
      conninfo.erase(0, 11);
    auto parsed = pg::parse_conninfo(conninfo);
    if (!parsed) {
      // libpq's message may quote the string; only say that it is malformed.
      problems.fail("store.url", "not a valid libpq connection string or URI");
      return;
    }
    params = std::move(*parsed);
  }
  if (overrides.empty()) return;
  for (const auto& [k, value] : overrides) params[k] = value;
  std::string out = "postgresql:";
  for (const auto& [k, value] : params) {
    if (out.size() > 11) out.push_back(' ');
    out += k + "=" + conninfo_value(value);
  }
  c.store_url = std::move(out);
}

void check_consumer(Config& c, SectionProblems& problems) {
  const ConsumerConfig& cs = c.consumer;
  if (cs.dlq_suffix.empty())
    problems.fail("consumer.dlq_suffix",
                  "must not be empty (dead letters would loop into their own topic)");
  if (cs.retry.max_backoff < cs.retry.initial_backoff) {
    problems.fail("consumer.retry_max", fmt::format("must be at least consumer.retry_initial ({})",
                                                    format_duration(cs.retry.initial_backoff)));
  }
  std::set<std::string, std::less<>> seen;
  for (const auto& t : cs.topics) {
    if (!seen.insert(t).second)
      problems.fail("consumer.topics", fmt::format("topic '{}' is listed twice", t));
  }
  for (const auto& t : cs.topics) {
    if (seen.contains(t + cs.dlq_suffix))
      problems.fail("consumer.topics",
                    fmt::format("topic '{}{}' is also the DLQ of '{}'", t, cs.dlq_suffix, t));
  }
}

void check_relay(Config& c, SectionProblems& problems) {
  const RelayConfig& r = c.relay;
  if (r.publish_after == PublishAfter::Replicated && c.store_url.starts_with("sqlite://")) {
    problems.fail("relay.publish_after",
                  "replicated needs a PostgreSQL store: a SQLite store has no standbys to wait "
                  "for");
  }
  if (!r.standbys.empty() && r.standby_quorum > r.standbys.size()) {
    problems.fail(
        "relay.standby_quorum",
        fmt::format("must be at most the number of relay.standbys ({})", r.standbys.size()));
  }
}

void declare_store_keys(SectionKeys<Config>& k) {
  k.text("store.url", &Config::store_url, "postgresql://... or sqlite://...")
      .text(
          "store.application_name",
          [](Config & c) -> auto& { return c.store_options.application_name; },
          "PostgreSQL application_name")
      .duration(
          "store.busy_timeout", [](Config & c) -> auto& { return c.store_options.busy_timeout; },
          "SQLite lock wait (a bare number is milliseconds)", 0, kMaxMs, "ms")
      .renamed_from("store.busy_timeout_ms")
      .duration(
          "store.connect_timeout",
          [](Config & c) -> auto& { return c.store_options.connect_timeout; },
          "PostgreSQL connect deadline (a bare number is milliseconds)", kConfigSecond, kMaxMs,
          "ms")
      .renamed_from("store.connect_timeout_ms")
      .duration(
          "store.statement_timeout",
          [](Config & c) -> auto& { return c.store_options.statement_timeout; },
          "PostgreSQL statement_timeout (0: server default; a bare number is milliseconds)", 0,
          kMaxMs, "ms")
      .renamed_from("store.statement_timeout_ms")
      .check(compose_store_url);
}

void declare_consumer_keys(SectionKeys<Config>& k) {
  const auto consumer = [](auto member) {
    return [member](Config & c) -> auto& {
      return std::invoke(member, c.consumer);
    };
  };
  const auto retry = [](auto member) {
    return [member](Config & c) -> auto& {
      return std::invoke(member, c.consumer.retry);
    };
  };
  k.integer("consumer.batch_size", consumer(&ConsumerConfig::batch_size), "records per transaction",
            1, 100000)
      .duration("consumer.batch_window", consumer(&ConsumerConfig::batch_window),
                "wait for more records after a batch's first (a bare number is milliseconds)", 0,
                60 * kConfigSecond, "ms")
      .renamed_from("consumer.batch_window_ms")
      .duration("consumer.dlq_ack_timeout", consumer(&ConsumerConfig::dlq_ack_timeout),
                "wait for the DLQ acknowledgement (a bare number is milliseconds)", 1, kMaxMs, "ms")
      .renamed_from("consumer.dlq_ack_timeout_ms")
      .text("consumer.dlq_suffix", consumer(&ConsumerConfig::dlq_suffix),
            "dead letters of T go to T + suffix")
      .text("consumer.group", consumer(&ConsumerConfig::group_id),
            "consumer group; also the dedup rows' group")
      .duration("consumer.idle_store_check", consumer(&ConsumerConfig::idle_store_check),
                "with offsets in the store, an idle consumer looks at its store connections "
                "this often and, when one was replaced (a failover), goes back to the stored "
                "offsets (0: off, the next transaction notices)",
                0, kConfigHour)
      .text("consumer.instance_id", consumer(&ConsumerConfig::instance_id),
            "static group membership (librdkafka group.instance.id), one per process; empty: "
            "dynamic")
      .integer(
          "consumer.max_headers", [](Config & c) -> auto& { return c.consumer.limits.max_headers; },
          "records with more headers are refused", 1, 10000)
      .integer("consumer.max_in_flight", consumer(&ConsumerConfig::max_in_flight),
               "effect calls in flight at most, one per ordering key", 1, 1000000)
      .integer(
          "consumer.max_message_bytes",
          [](Config & c) -> auto& { return c.consumer.limits.max_payload_bytes; },
          "payloads above this many bytes go to the DLQ (too_large); a whole number of bytes "
          "only",
          1, 64.0 * 1024 * 1024)
      .boolean("consumer.offsets_in_store", consumer(&ConsumerConfig::offsets_in_store),
               "keep the next offset per partition in the store, in the transaction of the "
               "effects")
      .integer("consumer.pipeline_depth", consumer(&ConsumerConfig::pipeline_depth),
               "2: prepare the next batch on a second connection while this one commits", 1, 2)
      .duration("consumer.retry_initial", retry(&RetryPolicy::initial_backoff),
                "first retry backoff (a bare number is milliseconds)", 1, kMaxMs, "ms")
      .renamed_from("consumer.retry_initial_ms")
      .number("consumer.retry_jitter", retry(&RetryPolicy::jitter), "backoff jitter", 0, 1)
      .duration("consumer.retry_max", retry(&RetryPolicy::max_backoff),
                "backoff cap (a bare number is milliseconds)", 1, kMaxMs, "ms")
      .renamed_from("consumer.retry_max_ms")
      .number("consumer.retry_multiplier", retry(&RetryPolicy::multiplier), "backoff growth", 1,
              1000)
      .duration_list(
          "consumer.retry_topics.delays",
          [](Config & c) -> auto& { return c.consumer.retry_topics.delays; },
          "non-blocking retry topics, one delay each, e.g. 1s,10s (empty: retries block the "
          "partition, which keeps per-key order)",
          1, 7 * kConfigDay)
      .choice("consumer.stale_events", consumer(&ConsumerConfig::stale_events),
              "events past the dedup horizon: quarantine (DLQ), process or skip",
              std::vector<std::pair<std::string, StaleEventPolicy>>{
                  {"quarantine", StaleEventPolicy::Quarantine},
                  {"process", StaleEventPolicy::Process},
                  {"skip", StaleEventPolicy::Skip}})
      .duration("consumer.stop_timeout", consumer(&ConsumerConfig::stop_timeout),
                "on SIGTERM, finish, commit and leave the group within this long (then exit "
                "non-zero, saying what was not done)",
                0, kConfigHour)
      .list("consumer.topics", consumer(&ConsumerConfig::topics),
            "topics to consume (comma-separated)")
      .check(check_consumer);
}

void declare_dedup_keys(SectionKeys<Config>& k) {
  const auto partitions = [](auto member) {
    return [member](Config & c) -> auto& {
      return std::invoke(member, c.dedup.partitions);
    };
  };
  k.duration("dedup.partition_period", partitions(&MigrateOptions::partition_period),
             "partitioned PostgreSQL: period of a processed_event partition (whole hours)",
             kConfigHour, 366 * kConfigDay)
      .boolean("dedup.partitioned", partitions(&MigrateOptions::partitioned),
               "PostgreSQL: migrate RANGE-partitions processed_event on event_id")
      .integer("dedup.partitions_ahead", partitions(&MigrateOptions::partitions_ahead),
               "partitioned PostgreSQL: periods after now that must have a partition", 0, 3660)
      .integer("dedup.partitions_behind", partitions(&MigrateOptions::partitions_behind),
               "partitioned PostgreSQL: periods before now that migrate creates", 0, 3660)
      .duration(
          "dedup.retention", [](Config & c) -> auto& { return c.dedup.horizon.retention; },
          "dedup rows are kept this long in event time; older events are stale (whole hours)",
          kConfigHour, 3650 * kConfigDay)
      .duration(
          "dedup.safety_margin", [](Config & c) -> auto& { return c.dedup.horizon.safety_margin; },
          "dedup horizon = retention - margin (whole hours)", 0, 3650 * kConfigDay)
      .check([](Config& c, SectionProblems& problems) {
        const DedupHorizon& h = c.dedup.horizon;
        if (h.safety_margin >= h.retention) {
          problems.fail("dedup.safety_margin",
                        fmt::format("must be below dedup.retention ({})",
                                    format_duration(std::chrono::milliseconds(h.retention))));
        }
      });
}

void declare_relay_keys(SectionKeys<Config>& k) {
  const auto relay = [](auto member) {
    return [member](Config & c) -> auto& {
      return std::invoke(member, c.relay);
    };
  };
  k.integer("relay.batch_size", relay(&RelayConfig::batch_size), "rows per claim", 1, 100000)
      .integer("relay.in_flight", relay(&RelayConfig::max_batches_in_flight),
               "batches produced but not yet marked", 1, 64)
      .boolean("relay.listen", relay(&RelayConfig::listen),
               "PostgreSQL: LISTEN/NOTIFY besides polling")
      .integer("relay.mark_connections", relay(&RelayConfig::mark_connections),
               "connections marking rows published (0: on the relay's own)", 0, 16)
      .choice("relay.publish_after", relay(&RelayConfig::publish_after),
              "committed: publish rows once committed; replicated: once their commits are "
              "flushed on the standbys (PostgreSQL; needs pg_monitor; docs/failover.md)",
              std::vector<std::pair<std::string, PublishAfter>>{
                  {"committed", PublishAfter::Committed}, {"replicated", PublishAfter::Replicated}})
      .list("relay.standbys", relay(&RelayConfig::standbys),
            "replicated: the standbys that count, by application_name (empty: those the "
            "primary makes synchronous)")
      .integer("relay.standby_quorum", relay(&RelayConfig::standby_quorum),
               "replicated: how many of the counted standbys must have flushed a batch's commits",
               1, 64)
      .duration("relay.poll_interval", relay(&RelayConfig::poll_interval),
                "idle polling interval (a bare number is milliseconds)", 1, kMaxMs, "ms")
      .renamed_from("relay.poll_interval_ms")
      .duration("relay.progress_interval", relay(&RelayConfig::progress_interval),
                "progress interval (0: none; a bare number is milliseconds)", 0, kMaxMs, "ms")
      .renamed_from("relay.progress_interval_ms")
      .duration("relay.rebalance_interval", relay(&RelayConfig::rebalance_interval),
                "shard rebalance interval", 10, 600 * kConfigSecond)
      .duration("relay.retention", relay(&RelayConfig::retention),
                "published rows older than this are deleted (a bare number is hours)", 0,
                366 * kConfigDay, "h")
      .renamed_from("relay.retention_hours")
      .duration("relay.stop_timeout", relay(&RelayConfig::stop_timeout),
                "on SIGTERM, finish the batches in flight and exit within this long (then "
                "exit non-zero: rows not marked published are sent again by the next relay)",
                0, kConfigHour)
      .check(check_relay);
}

void declare_operations_keys(SectionKeys<Config>& k) {
  const auto policy = [](auto member) {
    return [member](Config & c) -> auto& {
      return std::invoke(member, c.maintenance.policy);
    };
  };
  k.number(
       "dlq.replay_rate", [](Config & c) -> auto& { return c.dlq.replay_rate; },
       "replay at most this many records per second (0: no limit)", 0, 1e9)
      .duration(
          "dlq.timeout", [](Config & c) -> auto& { return c.dlq.timeout; },
          "deadline of each broker step", kConfigSecond, kConfigHour)
      .text(
          "dlq.topic", [](Config & c) -> auto& { return c.dlq.topic; },
          "the dead-letter topic, e.g. orders.dlq")
      .choice(
          "log.format", [](Config & c) -> auto& { return c.log.format; }, "plain or json",
          std::vector<std::pair<std::string, LogFormat>>{{"plain", LogFormat::Plain},
                                                         {"json", LogFormat::Json}})
      .choice(
          "log.level", [](Config & c) -> auto& { return c.log.level; },
          "least severe level written",
          std::vector<std::pair<std::string, LogLevel>>{{"debug", LogLevel::Debug},
                                                        {"info", LogLevel::Info},
                                                        {"warn", LogLevel::Warn},
                                                        {"error", LogLevel::Error}})
      .duration("maintenance.batch_pause", policy(&RetentionPolicy::batch_pause),
                "pause between two DELETE batches", 0, 60 * kConfigSecond)
      .integer("maintenance.batch_size", policy(&RetentionPolicy::batch_size),
               "rows per DELETE (and transaction)", 1, 1'000'000)
      .duration(
          "maintenance.interval", [](Config & c) -> auto& { return c.maintenance.interval; },
          "idem consume: run a retention pass in the background this often (0: off)", 0, kConfigDay)
      .integer("maintenance.max_batches", policy(&RetentionPolicy::max_batches),
               "batches per table and pass (0: until done)", 0, 1e9)
      .duration(
          "maintenance.retry_for", [](Config & c) -> auto& { return c.maintenance.retry_for; },
          "idem maintain: start a pass cut short by a lost connection (a failover) again on a "
          "new connection, until this long after the first start (0: never)",
          0, kConfigDay)
      .duration("maintenance.outbox_retention", policy(&RetentionPolicy::outbox_retention),
                "published outbox rows older than this are deleted (0: keep)", 0, 3650 * kConfigDay)
      .boolean(
          "tracing.enabled", [](Config & c) -> auto& { return c.tracing.enabled; },
          "create and forward W3C traceparent");
}

}  // namespace

void declare_core_keys(SectionKeys<Config>& keys) {
  declare_store_keys(keys);
  declare_consumer_keys(keys);
  declare_dedup_keys(keys);
  declare_relay_keys(keys);
  declare_operations_keys(keys);
}

void declare_postgres_keys(SectionKeys<PostgresParams>& keys) {
  // Each a libpq parameter, kept as text in `values` when set.
  const auto param = [&keys](const char* name, const char* variable, KeyType type = KeyType::String,
                             std::vector<std::string> choices = {}) {
    KeySpec spec;
    spec.name = fmt::format("postgres.{}", name);
    spec.type = type;
    spec.help = fmt::format("libpq {}", name);
    spec.conventional_env = {variable};
    spec.choices = std::move(choices);
    if (type == KeyType::Integer) spec.min = 1, spec.max = 65535;
    keys.custom(spec, [spec, name](PostgresParams& p, std::string_view text) {
      std::optional<std::string> problem;
      if (spec.type == KeyType::Integer) {
        std::int64_t n = 0;
        problem = parse_integer(spec, text, n);
      } else if (spec.type == KeyType::Choice) {
        std::size_t index = 0;
        problem = parse_choice(spec, text, index);
      }
      if (problem) return problem;
      if (text.empty()) {
        p.values.erase(name);  // set to nothing: libpq's own default
      } else {
        p.values[name] = std::string(text);
      }
      return problem;
    });
  };
  param("dbname", "PGDATABASE");
  param("host", "PGHOST");
  param("password", "PGPASSWORD");
  param("port", "PGPORT", KeyType::Integer);
  param("sslcert", "PGSSLCERT");
  param("sslkey", "PGSSLKEY");
  param("sslmode", "PGSSLMODE", KeyType::Choice,
        {"disable", "allow", "prefer", "require", "verify-ca", "verify-full"});
  param("sslrootcert", "PGSSLROOTCERT");
  param("user", "PGUSER");
}

void apply_kafka_properties(const Settings& settings, Config& config, Problems& problems) {
  std::unique_ptr<rd_kafka_conf_t, void (*)(rd_kafka_conf_t*)> conf(rd_kafka_conf_new(),
                                                                    &rd_kafka_conf_destroy);
  for (const auto& [key, setting] : settings) {
    if (!key.starts_with(kKafkaPrefix)) continue;
    const std::string property = key.substr(kKafkaPrefix.size());
    if (property == "bootstrap.servers") {
      config.bootstrap_servers = setting.value;
      continue;
    }
    const auto owned = std::find_if(kOwnedKafkaProperties.begin(), kOwnedKafkaProperties.end(),
                                    [&](const OwnedProperty& o) { return o.name == property; });
    if (owned != kOwnedKafkaProperties.end()) {
      problems.add(key, setting.origin, std::string(owned->why));
      continue;
    }
    char errstr[512];
    if (rd_kafka_conf_set(conf.get(), property.c_str(), setting.value.c_str(), errstr,
                          sizeof errstr) != RD_KAFKA_CONF_OK) {
      // librdkafka's message may quote the value: a secret's is cut out of it.
      std::string reason = errstr;
      if (is_secret_key(property) && !setting.value.empty()) {
        for (auto at = reason.find(setting.value); at != std::string::npos;
             at = reason.find(setting.value, at)) {
          reason.replace(at, setting.value.size(), "<redacted>");
        }
      }
      problems.add(
          key, setting.origin,
          fmt::format("librdkafka rejects {}: {}",
                      is_secret_key(key) ? "<redacted>" : "'" + setting.value + "'", reason));
      continue;
    }
    config.kafka.emplace_back(property, setting.value);
  }
}

std::string env_name_of(std::string_view key) {
  std::string out = "IDEM_";
  for (const char c : key) {
    out.push_back(c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  }
  return out;
}

}  // namespace idem::detail

namespace idem {

bool is_host_port(std::string_view text) noexcept {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return false;
  int port = -1;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data() + colon + 1, end, port);
  return ec == std::errc() && ptr == end && port >= 0 && port <= 65535;
}

}  // namespace idem
