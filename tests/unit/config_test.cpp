// The configuration loader: layer precedence, pass-through, PG* composition, redaction,
// and every validation error (each naming its key and where the value came from).
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <set>
#include <string>

#include <fmt/format.h>

#include "idem/config.hpp"
#include "idem/config_document.hpp"
#include "idem/console/console.hpp"
#include "idem/devtools/dev_broker.hpp"
#include "idem/metrics/metrics.hpp"
#include "idem/reference/billing.hpp"
#include "idem/reference/payment_provider.hpp"
#include "support/store_backends.hpp"

namespace idem {
namespace config_test {

using Env = std::vector<std::pair<std::string, std::string>>;

// The core's keys and the components' sections (the CLI adds its commands' own too:
// tests/integration/config_check_test.cpp).
const ConfigSchema& schema() {
  static const ConfigSchema s = [] {
    ConfigSchema out;
    out.add<AdminSettings>(declare_admin_keys)
        .add<ConsoleOptions>(declare_console_keys)
        .add<http::ProviderSettings>(http::declare_provider_keys)
        .add<BillingSettings>(declare_billing_keys)
        .add<DevBrokerSettings>(declare_dev_broker_keys);
    return out;
  }();
  return s;
}

Config load(const ConfigSources& sources) {
  return load_config(sources, schema());
}

std::string write_toml(const std::string& text) {
  static std::atomic<int> counter{0};
  const auto path = test::scratch_dir() / fmt::format("config-{}.toml", counter.fetch_add(1));
  std::ofstream(path) << text;
  return path.string();
}

const ConfigEntry& entry(const Config& c, std::string_view key) {
  for (const auto& e : c.entries) {
    if (e.key == key) return e;
  }
  throw std::runtime_error("no entry " + std::string(key));
}

ConfigSources from_file(std::string path, Env environment = {}) {
  ConfigSources s;
  s.file = std::move(path);
  s.environment = std::move(environment);
  return s;
}
ConfigSources from_env(Env environment) {
  return from_file("", std::move(environment));
}
ConfigSources from_flags(std::vector<FlagSetting> flags) {
  ConfigSources s;
  s.flags = std::move(flags);
  return s;
}

std::vector<ConfigProblem> problems_of(const ConfigSources& sources) {
  try {
    static_cast<void>(load(sources));
  } catch (const ConfigError& e) {
    return e.problems();
  }
  return {};
}

TEST(ConfigLoader, DefaultsAreTheLibraryStructsOwn) {
  // A key's default is its member's value in the struct it is bound to: loading nothing
  // gives the structs as declared, and the listed default is that value as text.
  const Config c = load({});
  const ConsumerConfig lib_consumer;
  const ConsumerConfig consumer = c.consumer_config();
  EXPECT_EQ(consumer.batch_size, lib_consumer.batch_size);
  EXPECT_EQ(consumer.batch_window, lib_consumer.batch_window);
  EXPECT_EQ(consumer.retry.jitter, lib_consumer.retry.jitter);
  EXPECT_EQ(consumer.limits.max_payload_bytes, lib_consumer.limits.max_payload_bytes);
  EXPECT_EQ(consumer.dedup_horizon.retention, lib_consumer.dedup_horizon.retention);
  EXPECT_EQ(consumer.stale_events, lib_consumer.stale_events);
  EXPECT_EQ(c.relay_config().mark_connections, RelayConfig{}.mark_connections);
  EXPECT_EQ(c.retention_policy().outbox_retention, RetentionPolicy{}.outbox_retention);
  EXPECT_EQ(c.migrate_options().partitions_behind, MigrateOptions{}.partitions_behind);
  EXPECT_EQ(c.store_options.connect_timeout, StoreOptions{}.connect_timeout);
  EXPECT_EQ(c.get<http::ProviderSettings>().provider.key_retention,
            http::ProviderConfig{}.key_retention);
  EXPECT_EQ(c.get<DevBrokerSettings>().options.brokers, DevBrokerOptions{}.brokers);

  EXPECT_EQ(entry(c, "consumer.batch_size").value, std::to_string(lib_consumer.batch_size));
  EXPECT_EQ(entry(c, "consumer.batch_size").origin.layer, ConfigLayer::Default);
  EXPECT_EQ(entry(c, "consumer.batch_window").value, "50") << "a bare number of ms";
  EXPECT_EQ(entry(c, "store.connect_timeout").value, "10000");
  EXPECT_EQ(entry(c, "relay.retention").value, "24") << "a bare number of hours";
  EXPECT_EQ(entry(c, "dedup.retention").value, "7d");
  EXPECT_EQ(entry(c, "consumer.retry_jitter").value, "0.2");
  EXPECT_EQ(entry(c, "consumer.stale_events").value, "quarantine");
  EXPECT_EQ(entry(c, "log.level").value, "info");
  EXPECT_EQ(entry(c, "relay.listen").value, "true");
  EXPECT_EQ(entry(c, "provider.key_retention").value, "8d");
  EXPECT_EQ(entry(c, "provider.listen").value, "127.0.0.1:0");
  EXPECT_EQ(entry(c, "console.listen").value, "127.0.0.1:8480");
  EXPECT_EQ(entry(c, "billing.provider_key_retention").value, "") << "unknown unless stated";
  EXPECT_EQ(entry(c, "consumer.topics").value, "");
}

TEST(ConfigLoader, AComponentsKeysAreUnknownToASchemaWithoutIt) {
  const std::vector<ConfigProblem> problems = [] {
    try {
      static_cast<void>(load_config(from_flags({{"provider.seed", "7", "--set"}})));
    } catch (const ConfigError& e) {
      return e.problems();
    }
    return std::vector<ConfigProblem>{};
  }();
  ASSERT_EQ(problems.size(), 1U);
  EXPECT_EQ(problems[0].key, "provider.seed");
  EXPECT_EQ(problems[0].message, "unknown key");
  EXPECT_THROW(static_cast<void>(load_config({}).get<http::ProviderSettings>()), Error);
}

TEST(ConfigLoader, AKeyDeclaredTwiceIsRefused) {
  ConfigSchema twice;
  EXPECT_THROW(twice.add<AdminSettings>(declare_admin_keys).add<AdminSettings>(declare_admin_keys),
               Error);
}

TEST(ConfigLoader, ListsEveryKeyOfEveryCommandEvenWhenUnset) {
  const Config c = load({});
  std::set<std::string> listed;
  for (const auto& e : c.entries) listed.insert(e.key);
  for (const KeySpec& spec : schema().keys()) EXPECT_TRUE(listed.contains(spec.name)) << spec.name;
  EXPECT_EQ(entry(c, "dlq.topic").value, "");
  EXPECT_EQ(entry(c, "dlq.topic").origin.layer, ConfigLayer::Default);
  const std::string text = c.describe();
  for (const auto* key :
       {"consumer.retry_topics.delays", "dedup.retention", "maintenance.interval", "dlq.timeout",
        "provider.key_retention", "dev_broker.brokers", "admin.listen", "relay.stop_timeout"}) {
    EXPECT_NE(text.find(std::string(key) + " = "), std::string::npos) << key << " not in\n" << text;
  }
}

TEST(ConfigLoader, EveryCommandsSettingsComeTypedFromEveryLayer) {
  const std::string file = write_toml(R"(
[consumer]
stale_events = "skip"
pipeline_depth = 2
provider_url = "http://127.0.0.1:8080"
[consumer.retry_topics]
delays = ["1s", "1.5m"]
[dedup]
retention = "48h"
partitioned = true
[dev_broker]
topics = ["a", "b:7"]
)");
  ConfigSources s = from_file(file);
  s.environment = {{"IDEM_MAINTENANCE_INTERVAL", "15m"},
                   {"IDEM_PROVIDER_LISTEN", "0.0.0.0:9000"},
                   {"IDEM_DLQ_TIMEOUT", "5s"},
                   {"IDEM_RELAY_LISTEN", "false"}};
  s.flags = {{"dedup.safety_margin", "2h", "--safety-margin"},
             {"provider.latency", "250ms", "--latency"},
             {"relay.retention", "1.5", "--retention"}};
  const Config c = load(s);
  using namespace std::chrono_literals;
  EXPECT_EQ(c.consumer.stale_events, StaleEventPolicy::Skip);
  EXPECT_EQ(c.get<BillingSettings>().provider_url, "http://127.0.0.1:8080");
  EXPECT_EQ(c.consumer.retry_topics.delays, (std::vector<std::chrono::milliseconds>{1s, 90s}));
  EXPECT_EQ(c.consumer_config().retry_topics.delays, c.consumer.retry_topics.delays);
  EXPECT_EQ(c.consumer_config().stale_events, StaleEventPolicy::Skip);
  EXPECT_EQ(c.consumer_config().pipeline_depth, 2U);
  EXPECT_EQ(c.dedup.horizon.retention, 48h);
  EXPECT_EQ(c.dedup.horizon.safety_margin, 2h);
  EXPECT_EQ(c.consumer_config().dedup_horizon.stale_age(), 46h);
  EXPECT_EQ(c.retention_policy().dedup.retention, 48h);
  EXPECT_TRUE(c.migrate_options().partitioned);
  EXPECT_EQ(c.maintenance.interval, 15min);
  EXPECT_EQ(c.get<http::ProviderSettings>().listen, "0.0.0.0:9000");
  EXPECT_EQ(c.get<http::ProviderSettings>().provider.faults.latency, 250ms);
  EXPECT_EQ(c.dlq.timeout, 5s);
  EXPECT_FALSE(c.relay_config().listen);
  EXPECT_EQ(c.relay.retention, 90min);  // a bare number of relay.retention is hours
  const auto& topics = c.get<DevBrokerSettings>().options.topics;
  ASSERT_EQ(topics.size(), 2U);
  EXPECT_EQ(topics[0].name, "a");
  EXPECT_EQ(topics[0].partitions, 3);
  EXPECT_EQ(topics[1].name, "b");
  EXPECT_EQ(topics[1].partitions, 7);
  EXPECT_EQ(entry(c, "dedup.retention").origin.describe(), "file " + file + ":9");
  EXPECT_EQ(entry(c, "maintenance.interval").origin.describe(), "env IDEM_MAINTENANCE_INTERVAL");
  EXPECT_EQ(entry(c, "dedup.safety_margin").origin.describe(), "flag --safety-margin");
  EXPECT_EQ(entry(c, "dlq.replay_rate").origin.describe(), "default");
}

TEST(ConfigLoader, RelayPublishesAfterReplicationOnTheNamedStandbys) {
  const Config defaults = load({});
  EXPECT_EQ(defaults.relay.publish_after, PublishAfter::Committed) << "today's behaviour";
  EXPECT_EQ(entry(defaults, "relay.publish_after").value, "committed");
  const Config c = load(from_flags({{"store.url", "postgresql://h/db", "--set"},
                                    {"relay.publish_after", "replicated", "--publish-after"},
                                    {"relay.standbys", "node_a,node_b", "--standbys"},
                                    {"relay.standby_quorum", "2", "--standby-quorum"}}));
  const RelayConfig r = c.relay_config();
  EXPECT_EQ(r.publish_after, PublishAfter::Replicated);
  EXPECT_EQ(r.standbys, (std::vector<std::string>{"node_a", "node_b"}));
  EXPECT_EQ(r.standby_quorum, 2U);
}

TEST(ConfigLoader, MillisecondKeysTakeBareNumbersAndUnits) {
  using namespace std::chrono_literals;
  const Config c = load(from_flags(
      {{"consumer.batch_window", "2s", "--set"}, {"relay.poll_interval", "75", "--set"}}));
  EXPECT_EQ(c.consumer.batch_window, 2s);
  EXPECT_EQ(c.relay.poll_interval, 75ms);
}

TEST(Duration, ParsesANumberAndAUnit) {
  using namespace std::chrono_literals;
  using D = std::optional<std::chrono::milliseconds>;
  EXPECT_EQ(parse_duration("250ms"), D(250ms));
  EXPECT_EQ(parse_duration("90s"), D(90s));
  EXPECT_EQ(parse_duration("15m"), D(15min));
  EXPECT_EQ(parse_duration("2h"), D(2h));
  EXPECT_EQ(parse_duration("7d"), D(7 * 24h));
  EXPECT_EQ(parse_duration("0s"), D(0ms));
  EXPECT_EQ(parse_duration("1.5h"), D(90min));
  EXPECT_EQ(parse_duration(".5s"), D(500ms));
  EXPECT_EQ(parse_duration("1.0009s"), D(1000ms));  // below a millisecond: rounded down
  EXPECT_EQ(parse_duration("48", "h"), D(48h));
  EXPECT_EQ(parse_duration("48s", "h"), D(48s));  // an explicit unit wins
}

TEST(Duration, RefusesAnythingElse) {
  for (const auto* text :
       {"", "s", "10", "-5s", "+5s", "5 s", "5sec", "5S", "1e3ms", "inf", "nans", "1.2.3s", ".s",
        "5ms5", "99999999999999999999ms", "9223372036854775807d"}) {
    EXPECT_EQ(parse_duration(text), std::nullopt) << text;
  }
  EXPECT_EQ(parse_duration("10", "weeks"), std::nullopt);
}

TEST(Duration, FormatsInTheLargestExactUnit) {
  using namespace std::chrono_literals;
  EXPECT_EQ(format_duration(0ms), "0s");
  EXPECT_EQ(format_duration(7 * 24h), "7d");
  EXPECT_EQ(format_duration(90min), "90m");
  EXPECT_EQ(format_duration(1500ms), "1500ms");
  for (const std::chrono::milliseconds d : {1ms, 999ms, 61'000ms, 90'000'000ms}) {
    EXPECT_EQ(parse_duration(format_duration(d)), d) << format_duration(d);
  }
}

TEST(ConfigLoader, FileThenEnvironmentThenFlagsEachOverrideTheLayerBefore) {
  const std::string file = write_toml(R"(
[consumer]
batch_size = 100        # file only
batch_window = 10       # file, then env
retry_initial = 7       # file, env, then flag
topics = ["a", "b"]
)");
  ConfigSources s;
  s.file = file;
  s.environment = {{"IDEM_CONSUMER_BATCH_WINDOW", "20"}, {"IDEM_CONSUMER_RETRY_INITIAL", "8"}};
  s.flags = {{"consumer.retry_initial", "9", "--retry-initial"}};
  const Config c = load(s);

  EXPECT_EQ(c.consumer.batch_size, 100U);
  EXPECT_EQ(entry(c, "consumer.batch_size").origin.describe(), "file " + file + ":3");
  EXPECT_EQ(c.consumer.batch_window, std::chrono::milliseconds(20));
  EXPECT_EQ(entry(c, "consumer.batch_window").origin.describe(), "env IDEM_CONSUMER_BATCH_WINDOW");
  EXPECT_EQ(c.consumer.retry.initial_backoff, std::chrono::milliseconds(9));
  EXPECT_EQ(entry(c, "consumer.retry_initial").origin.describe(), "flag --retry-initial");
  EXPECT_EQ(c.consumer.topics, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.consumer.batch_size, c.consumer_config().batch_size);
}

// Found by fuzz/config_fuzz.cpp: toml++ 3.3.0 reaches __builtin_unreachable() on some
// non-ASCII bytes where a key is expected. Such a file is refused first, naming the line.
TEST(ConfigLoader, FileWithANonAsciiByteIsRefusedNamingTheLine) {
  const std::string file = write_toml("[consumer]\nbatch_size = 10\n\xc3\xa9 = 1\n");
  ConfigSources s;
  s.file = file;
  const auto problems = problems_of(s);
  ASSERT_EQ(problems.size(), 1U);
  EXPECT_EQ(problems[0].key, file);
  EXPECT_NE(problems[0].message.find("line 3"), std::string::npos) << problems[0].message;
  EXPECT_NE(problems[0].message.find("ASCII"), std::string::npos) << problems[0].message;
  // Other characters remain possible as escapes inside strings.
  const std::string escaped = write_toml("[consumer]\ngroup = \"caf\\u00e9\"\n");
  ConfigSources ok;
  ok.file = escaped;
  EXPECT_EQ(load(ok).consumer.group_id, "caf\xc3\xa9");
}

// The file is parsed once: what the loader parsed, with each value's line, and the
// environment it read are handed on to the parts that read a table of their own.
TEST(ConfigLoader, HandsItsParseOfTheFileAndItsEnvironmentOn) {
  const std::string file = write_toml("[consumer]\ngroup = \"g\"\n\n[routes.r]\ntopic = \"t\"\n");
  ConfigSchema reserving;
  reserving.reserve_table("routes");
  ConfigSources s = from_file(file, {{"TOKEN", "t0k3n"}});
  const Config c = load_config(s, reserving);
  ASSERT_NE(c.document, nullptr);
  EXPECT_EQ(c.document->file(), file);
  const toml::node* topic = c.document->table().at_path("routes.r.topic").node();
  ASSERT_NE(topic, nullptr);
  EXPECT_EQ(topic->value<std::string>(), "t");
  EXPECT_EQ(topic->source().begin.line, 5U);
  EXPECT_EQ(c.environment, (Env{{"TOKEN", "t0k3n"}}));
  EXPECT_EQ(load_config(from_env({}), reserving).document, nullptr) << "no file, no document";
}

TEST(ConfigLoader, ConfigFileComesFromTheFlagBeforeIdemConfig) {
  const std::string env_file = write_toml("[consumer]\ngroup = \"from-env-file\"\n");
  const std::string from_flag = write_toml("[consumer]\ngroup = \"from-flag-file\"\n");
  EXPECT_EQ(load(from_env({{"IDEM_CONFIG", env_file}})).consumer.group_id, "from-env-file");
  EXPECT_EQ(load(from_file(from_flag, {{"IDEM_CONFIG", env_file}})).consumer.group_id,
            "from-flag-file");
}

TEST(ConfigLoader, KafkaKeysPassThroughFromEveryLayer) {
  const std::string file = write_toml(R"(
[kafka]
"security.protocol" = "ssl"
ssl.ca.location = "/etc/ca.pem"
"session.timeout.ms" = 6000
)");
  ConfigSources s = from_file(file);
  s.environment = {{"KAFKA_BOOTSTRAP_SERVERS", "conventional:9092"},
                   {"IDEM_KAFKA_CLIENT_ID", "billing"}};
  s.flags = {{"kafka.session.timeout.ms", "7000", "--kafka"}};
  const Config c = load(s);
  EXPECT_EQ(c.bootstrap_servers, "conventional:9092");
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"client.id", "billing"},
      {"security.protocol", "ssl"},
      {"session.timeout.ms", "7000"},
      {"ssl.ca.location", "/etc/ca.pem"}};
  EXPECT_EQ(c.kafka, expected);
  EXPECT_EQ(c.consumer_config().kafka, expected);
  EXPECT_EQ(c.consumer_config().bootstrap_servers, "conventional:9092");
  EXPECT_EQ(c.relay_config().producer.kafka, expected);

  // The IDEM_ name is more specific than the conventional one and wins.
  s.environment.emplace_back("IDEM_KAFKA_BOOTSTRAP_SERVERS", "specific:9092");
  EXPECT_EQ(load(s).bootstrap_servers, "specific:9092");
}

TEST(ConfigLoader, LibpqVariablesComposeWithTheStoreUrl) {
  ConfigSources s;
  s.environment = {{"PGHOST", "db.internal"}, {"PGPASSWORD", "hunter2"}, {"PGSSLMODE", "require"}};
  // Only PG*: a libpq key/value URL built from them.
  EXPECT_EQ(load(s).store_url,
            "postgresql:host='db.internal' password='hunter2' sslmode='require'");

  // A URL plus PG*: the variables fill in and override its parameters; IDEM_POSTGRES_* wins over
  // PG*.
  s.flags = {{"store.url", "postgresql://app@old-host:5433/orders?sslmode=disable", "--db"}};
  s.environment.emplace_back("IDEM_POSTGRES_HOST", "idem-host");
  EXPECT_EQ(load(s).store_url,
            "postgresql:dbname='orders' host='idem-host' password='hunter2' port='5433' "
            "sslmode='require' user='app'");

  // SQLite: a PGHOST lying around in the environment does not apply.
  s.flags = {{"store.url", "sqlite:///tmp/x.db", "--db"}};
  EXPECT_EQ(load(s).store_url, "sqlite:///tmp/x.db");
}

TEST(ConfigLoader, QuotesLibpqValuesSoTheyCannotAddParameters) {
  ConfigSources s;
  s.environment = {{"PGDATABASE", "x' host='evil"}};
  EXPECT_EQ(load(s).store_url, R"(postgresql:dbname='x\' host=\'evil')");
}

TEST(ConfigLoader, IgnoresTheTestHarnessVariables) {
  ConfigSources s;
  s.environment = {{"IDEM_TEST_PG_DSN", "postgresql://x"},
                   {"IDEM_BENCH_BATCH", "1"},
                   {"IDEM_PG_BINDIR", "/usr/lib"},
                   {"IDEM_BUILD_DIR", "/tmp/b"},
                   {"IDEM_JOBS", "2"},
                   {"IDEM_WERROR", "ON"},
                   {"PATH", "/bin"}};
  EXPECT_NO_THROW(static_cast<void>(load(s)));
}

struct BadCase {
  std::string name;
  ConfigSources sources;
  std::string key;
  std::string origin;   ///< ConfigOrigin::describe(), or a prefix of it ending in '*'
  std::string message;  ///< a substring of the problem's message
};

std::vector<BadCase> bad_cases() {
  const auto flag = [](std::string key, std::string value) {
    return from_flags({{std::move(key), std::move(value), "--set"}});
  };
  const auto env = [](std::string name, std::string value) {
    return from_env({{std::move(name), std::move(value)}});
  };
  const std::string unknown_in_file = write_toml("[consumer]\nbatchsize = 5\n");
  const std::string broken = write_toml("[consumer\nbatch_size = 5\n");
  const std::string table_array = write_toml("[consumer]\ntopics = [[\"a\"]]\n");
  const std::string date_value = write_toml("[consumer]\ngroup = 1979-05-27\n");
  return {
      {"UnknownKeyInFile", from_file(unknown_in_file), "consumer.batchsize",
       "file " + unknown_in_file + ":2", "unknown key"},
      {"UnparsableFile", from_file(broken), broken, "flag --config",
       "cannot parse TOML file (line 1)"},
      {"MissingFile", from_file("/nonexistent/idem.toml"), "/nonexistent/idem.toml",
       "flag --config", "cannot read TOML file"},
      {"MissingFileNamedByEnv", env("IDEM_CONFIG", "/nonexistent/x.toml"), "/nonexistent/x.toml",
       "env IDEM_CONFIG", "cannot read"},
      {"NestedArray", from_file(table_array), "consumer.topics", "file " + table_array + ":2",
       "array elements must be strings or numbers"},
      {"DateValue", from_file(date_value), "consumer.group", "file " + date_value + ":2",
       "expected a string, number or boolean"},
      {"UnknownEnvVariable", env("IDEM_CONSUMER_BATCHSIZE", "5"), "IDEM_CONSUMER_BATCHSIZE",
       "env IDEM_CONSUMER_BATCHSIZE", "unknown environment variable"},
      {"UnknownFlagKey", flag("consumer.nope", "1"), "consumer.nope", "flag --set", "unknown key"},
      {"NotAnInteger", flag("consumer.batch_size", "ten"), "consumer.batch_size", "flag --set",
       "expected an integer from 1 to 100000, got 'ten'"},
      {"IntegerTooSmall", env("IDEM_CONSUMER_BATCH_SIZE", "0"), "consumer.batch_size",
       "env IDEM_CONSUMER_BATCH_SIZE", "from 1 to 100000"},
      {"IntegerTooLarge", flag("relay.in_flight", "65"), "relay.in_flight", "flag --set",
       "from 1 to 64"},
      {"BadPort", env("PGPORT", "99999"), "postgres.port", "env PGPORT", "from 1 to 65535"},
      {"NotANumber", flag("consumer.retry_jitter", "lots"), "consumer.retry_jitter", "flag --set",
       "expected a number from 0 to 1"},
      {"NumberOutOfRange", flag("consumer.retry_multiplier", "0.5"), "consumer.retry_multiplier",
       "flag --set", "from 1 to 1000"},
      {"NotABoolean", flag("tracing.enabled", "maybe"), "tracing.enabled", "flag --set",
       "expected true or false"},
      {"BadLogLevel", flag("log.level", "verbose"), "log.level", "flag --set",
       "expected one of debug, info, warn, error"},
      {"BadLogFormat", flag("log.format", "xml"), "log.format", "flag --set",
       "expected one of plain, json"},
      {"BadSslMode", env("PGSSLMODE", "sometimes"), "postgres.sslmode", "env PGSSLMODE",
       "expected one of disable"},
      {"EmptyListElement", flag("consumer.topics", "a,,b"), "consumer.topics", "flag --set",
       "empty list element"},
      {"DuplicateTopic", flag("consumer.topics", "a,a"), "consumer.topics", "flag --set",
       "topic 'a' is listed twice"},
      {"TopicIsDlqOfAnother", flag("consumer.topics", "a,a.dlq"), "consumer.topics", "flag --set",
       "is also the DLQ of 'a'"},
      {"EmptyDlqSuffix", flag("consumer.dlq_suffix", ""), "consumer.dlq_suffix", "flag --set",
       "must not be empty"},
      {"RetryCapBelowInitial", flag("consumer.retry_max", "50"), "consumer.retry_max", "flag --set",
       "at least consumer.retry_initial"},
      {"BadStoreScheme", flag("store.url", "mysql://x"), "store.url", "flag --set",
       "expected a postgresql://"},
      {"MalformedPostgresUrl", flag("store.url", "postgresql:host"), "store.url", "flag --set",
       "not a valid libpq connection string"},
      {"BadAdminListen", flag("admin.listen", "localhost"), "admin.listen", "flag --set",
       "expected host:port"},
      {"BadAdminPort", flag("admin.listen", "127.0.0.1:70000"), "admin.listen", "flag --set",
       "expected host:port"},
      {"UnknownKafkaProperty", env("IDEM_KAFKA_NO_SUCH_PROPERTY", "1"), "kafka.no.such.property",
       "env IDEM_KAFKA_NO_SUCH_PROPERTY", "librdkafka rejects '1': No such configuration property"},
      {"BadKafkaValue", flag("kafka.security.protocol", "carrier-pigeon"),
       "kafka.security.protocol", "flag --set", "librdkafka rejects 'carrier-pigeon'"},
      {"OwnedAutoCommit", flag("kafka.enable.auto.commit", "true"), "kafka.enable.auto.commit",
       "flag --set", "owned by idem"},
      {"OwnedOffsetStore", flag("kafka.enable.auto.offset.store", "true"),
       "kafka.enable.auto.offset.store", "flag --set", "owned by idem"},
      {"OwnedGroupId", flag("kafka.group.id", "g"), "kafka.group.id", "flag --set",
       "consumer.group"},
      {"OwnedIdempotence", flag("kafka.enable.idempotence", "false"), "kafka.enable.idempotence",
       "flag --set", "owned by idem"},
      {"OwnedAcks", flag("kafka.acks", "1"), "kafka.acks", "flag --set", "owned by idem"},
      {"NotADuration", env("IDEM_DLQ_TIMEOUT", "soon"), "dlq.timeout", "env IDEM_DLQ_TIMEOUT",
       "expected a duration from 1s to 1h"},
      {"DurationWithoutUnit", flag("dedup.retention", "48"), "dedup.retention", "flag --set",
       "(a number and ms, s, m, h or d)"},
      {"DurationOutOfRange", flag("provider.latency", "11m"), "provider.latency", "flag --set",
       "from 0s to 10m"},
      {"MsKeyNamesItsBareUnit", flag("consumer.batch_window", "2m"), "consumer.batch_window",
       "flag --set", "a bare number is ms"},
      {"SizeInBytesOnly", flag("consumer.max_message_bytes", "64KiB"), "consumer.max_message_bytes",
       "flag --set", "expected an integer"},
      {"RetentionNotWholeHours", flag("dedup.retention", "90m"), "dedup.retention", "flag --set",
       "whole number of hours"},
      {"MarginNotBelowRetention", flag("dedup.safety_margin", "7d"), "dedup.safety_margin",
       "flag --set", "must be below dedup.retention (7d)"},
      {"BadRetryDelay", flag("consumer.retry_topics.delays", "1s,later"),
       "consumer.retry_topics.delays", "flag --set", "got 'later'"},
      {"BadStalePolicy", env("IDEM_CONSUMER_STALE_EVENTS", "ignore"), "consumer.stale_events",
       "env IDEM_CONSUMER_STALE_EVENTS", "expected one of quarantine, process, skip"},
      {"BadProviderUrl", flag("consumer.provider_url", "127.0.0.1:8080"), "consumer.provider_url",
       "flag --set", "expected an http://"},
      {"BadProviderListen", flag("provider.listen", "anywhere"), "provider.listen", "flag --set",
       "expected host:port"},
      {"ProbabilityAboveOne", flag("provider.unavailable", "1.5"), "provider.unavailable",
       "flag --set", "from 0 to 1"},
      {"TooManyBrokers", flag("dev_broker.brokers", "33"), "dev_broker.brokers", "flag --set",
       "from 1 to 32"},
      {"BadTopicSpec", flag("dev_broker.topics", "t:many"), "dev_broker.topics", "flag --set",
       "expected NAME or NAME:PARTITIONS"},
      {"NegativeMaxBatches", env("IDEM_MAINTENANCE_MAX_BATCHES", "-1"), "maintenance.max_batches",
       "env IDEM_MAINTENANCE_MAX_BATCHES", "expected an integer"},
      {"BadPublishAfter", flag("relay.publish_after", "durable"), "relay.publish_after",
       "flag --set", "expected one of committed, replicated"},
      {"ReplicatedOnSqlite",
       from_flags({{"store.url", "sqlite:///tmp/idem.db", "--set"},
                   {"relay.publish_after", "replicated", "--set"}}),
       "relay.publish_after", "flag --set", "needs a PostgreSQL store"},
      {"QuorumAboveTheNamedStandbys",
       from_flags({{"relay.standbys", "a,b", "--set"}, {"relay.standby_quorum", "3", "--set"}}),
       "relay.standby_quorum", "flag --set", "at most the number of relay.standbys (2)"},
  };
}

class ConfigValidation : public testing::TestWithParam<BadCase> {};

TEST_P(ConfigValidation, ReportsTheKeyAndWhereItsValueCameFrom) {
  const BadCase& c = GetParam();
  const std::vector<ConfigProblem> problems = problems_of(c.sources);
  ASSERT_EQ(problems.size(), 1U) << (problems.empty() ? "no problem reported"
                                                      : problems[1].message);
  EXPECT_EQ(problems[0].key, c.key);
  EXPECT_EQ(problems[0].origin.describe(), c.origin);
  EXPECT_NE(problems[0].message.find(c.message), std::string::npos) << problems[0].message;
}

INSTANTIATE_TEST_SUITE_P(EveryError, ConfigValidation, testing::ValuesIn(bad_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

TEST(ConfigLoader, ReportsEveryProblemTogether) {
  ConfigSources all;
  for (const BadCase& c : bad_cases()) {
    if (!c.sources.file.empty()) continue;  // one file per load
    all.environment.insert(all.environment.end(), c.sources.environment.begin(),
                           c.sources.environment.end());
  }
  all.flags = {{"consumer.batch_size", "ten", "--batch"},
               {"log.level", "verbose", "--log-level"},
               {"kafka.enable.auto.commit", "true", "--kafka"}};
  all.file = write_toml("[consumer]\nbatchsize = 5\n");
  const auto problems = problems_of(all);
  std::set<std::string> keys;
  for (const auto& p : problems) keys.insert(p.key);
  for (const auto* key :
       {"consumer.batchsize", "IDEM_CONSUMER_BATCHSIZE", "consumer.batch_size", "postgres.port",
        "postgres.sslmode", "log.level", "kafka.enable.auto.commit", "kafka.no.such.property"}) {
    EXPECT_TRUE(keys.contains(key)) << key;
  }
  try {
    static_cast<void>(load(all));
  } catch (const ConfigError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find(fmt::format("configuration has {} problems:", problems.size())),
              std::string::npos);
    EXPECT_NE(text.find("consumer.batch_size (flag --batch): expected an integer"),
              std::string::npos)
        << text;
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_EQ(e.source(), ErrorSource::Config);
  }
}

TEST(ConfigLoader, RequireNamesEveryMissingKeyAndItsVariable) {
  const Config c = load(from_flags({{"consumer.group", "billing", "--group"}}));
  EXPECT_NO_THROW(c.require({"consumer.group"}));
  try {
    c.require({"store.url", "consumer.group", "consumer.topics"});
    FAIL() << "require() accepted missing keys";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 2U);
    EXPECT_EQ(e.problems()[0].key, "store.url");
    EXPECT_NE(e.problems()[0].message.find("IDEM_STORE_URL"), std::string::npos);
    EXPECT_EQ(e.problems()[1].key, "consumer.topics");
  }
}

TEST(ConfigRedaction, SecretKeysAreRecognisedByName) {
  for (const auto* key :
       {"postgres.password", "kafka.sasl.password", "kafka.ssl.key.password",
        "kafka.ssl.keystore.password", "kafka.ssl.key.pem", "kafka.sasl.oauthbearer.client.secret",
        "kafka.sasl.oauthbearer.config", "kafka.sasl.jaas.config"}) {
    EXPECT_TRUE(is_secret_key(key)) << key;
  }
  for (const auto* key : {"kafka.sasl.username", "kafka.ssl.key.location", "kafka.ssl.ca.location",
                          "store.url", "postgres.user", "consumer.batch_size"}) {
    EXPECT_FALSE(is_secret_key(key)) << key;
  }
}

TEST(ConfigRedaction, StoreUrlsLoseTheirPasswords) {
  EXPECT_EQ(redact_store_url("postgresql://app:s3cr%40t@db:5432/orders?sslmode=require"),
            "postgresql://app:<redacted>@db:5432/orders?sslmode=require");
  EXPECT_EQ(redact_store_url("postgresql://app@db/orders?password=s3cret&sslmode=require"),
            "postgresql://app@db/orders?password=<redacted>&sslmode=require");
  EXPECT_EQ(redact_store_url("postgresql:host=db password = s3cret sslpassword=k user=app"),
            "postgresql:host=db password = <redacted> sslpassword=<redacted> user=app");
  EXPECT_EQ(redact_store_url("postgresql:password='a\\' b' user='app'"),
            "postgresql:password=<redacted> user='app'");
  EXPECT_EQ(redact_store_url("sqlite:///var/lib/idem.db"), "sqlite:///var/lib/idem.db");
}

TEST(ConfigRedaction, DescribeAndProblemsNeverShowSecrets) {
  ConfigSources s;
  s.environment = {{"PGPASSWORD", "pg-Secret-1"}, {"IDEM_KAFKA_SASL_PASSWORD", "sasl-Secret-2"}};
  s.flags = {{"store.url", "postgresql://app:url-Secret-3@db/orders", "--db"},
             {"kafka.ssl.key.pem", "pem-Secret-4", "--kafka"}};
  const std::string text = load(s).describe();
  for (const auto* secret : {"pg-Secret-1", "sasl-Secret-2", "url-Secret-3", "pem-Secret-4"}) {
    EXPECT_EQ(text.find(secret), std::string::npos) << secret << " in\n" << text;
  }
  const auto line_start = text.find("kafka.sasl.password = <redacted> ");
  ASSERT_NE(line_start, std::string::npos) << text;
  const std::string line = text.substr(line_start, text.find('\n', line_start) - line_start);
  EXPECT_TRUE(line.ends_with("# env IDEM_KAFKA_SASL_PASSWORD")) << line;

  // A rejected secret is named, not quoted.
  s.flags.push_back({"kafka.custom.password", "kafka-Secret-5", "--kafka"});
  s.flags.push_back({"store.url", "postgresql:host password=url-Secret-6", "--db"});
  try {
    static_cast<void>(load(s));
    FAIL() << "an unknown librdkafka property was accepted";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 2U) << e.what();
    EXPECT_EQ(e.problems()[0].key, "store.url");
    EXPECT_EQ(e.problems()[1].key, "kafka.custom.password");
    EXPECT_EQ(std::string(e.what()).find("Secret"), std::string::npos) << e.what();
  }
}

}  // namespace config_test
}  // namespace idem
