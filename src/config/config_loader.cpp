// load_config(): defaults -> TOML file -> environment -> flags, then one validation pass
// that collects every problem before throwing.
#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "config/keys.hpp"
#include "idem/config.hpp"
#include "stores/postgres/pg_conninfo.hpp"

namespace idem {

using detail::KeySpec;
using detail::KeyType;

namespace {

constexpr std::string_view kEnvPrefix = "IDEM_";
constexpr std::string_view kConfigFileEnv = "IDEM_CONFIG";
constexpr std::string_view kKafkaEnvPrefix = "IDEM_KAFKA_";
// Reserved for the test and benchmark harnesses and scripts/ (test.sh: IDEM_BUILD_DIR,
// IDEM_JOBS, IDEM_WERROR; with-postgres.sh: IDEM_PG_*): never configuration, so never
// reported as unknown keys.
constexpr std::array<std::string_view, 6> kNonConfigEnvPrefixes = {
    "IDEM_TEST_", "IDEM_BENCH_", "IDEM_PG_", "IDEM_BUILD_", "IDEM_JOBS", "IDEM_WERROR"};

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

struct Setting {
  std::string value;
  ConfigOrigin origin;
};

using Settings = std::map<std::string, Setting, std::less<>>;

class Problems {
 public:
  void add(std::string key, ConfigOrigin origin, std::string message) {
    list_.push_back({std::move(key), std::move(origin), std::move(message)});
  }
  [[nodiscard]] bool empty() const noexcept { return list_.empty(); }
  std::vector<ConfigProblem> take() { return std::move(list_); }

 private:
  std::vector<ConfigProblem> list_;
};

bool is_known_key(std::string_view key) {
  return detail::find_key(key) != nullptr ||
         (key.starts_with(detail::kKafkaPrefix) && key.size() > detail::kKafkaPrefix.size());
}

// ---- layer 2: the TOML file ------------------------------------------------------------

std::string scalar_text(const toml::node& node, bool& ok) {
  ok = true;
  if (const auto* s = node.as_string()) return s->get();
  if (const auto* i = node.as_integer()) return std::to_string(i->get());
  if (const auto* f = node.as_floating_point()) return fmt::format("{}", f->get());
  if (const auto* b = node.as_boolean()) return b->get() ? "true" : "false";
  ok = false;
  return {};
}

void flatten(const toml::table& table, const std::string& prefix, const std::string& path,
             Settings& out, Problems& problems) {
  for (const auto& [name, node] : table) {
    const std::string key =
        prefix.empty() ? std::string(name.str()) : prefix + "." + std::string(name.str());
    const ConfigOrigin origin{ConfigLayer::File,
                              fmt::format("{}:{}", path, node.source().begin.line)};
    if (const auto* sub = node.as_table()) {
      flatten(*sub, key, path, out, problems);
      continue;
    }
    if (!is_known_key(key)) {
      problems.add(key, origin, "unknown key");
      continue;
    }
    std::string text;
    if (const auto* array = node.as_array()) {
      for (const auto& element : *array) {
        bool ok = false;
        std::string item = scalar_text(element, ok);
        if (!ok) {
          problems.add(key, origin, "array elements must be strings or numbers");
          break;
        }
        if (!text.empty()) text.push_back(',');
        text += item;
      }
    } else {
      bool ok = false;
      text = scalar_text(node, ok);
      if (!ok) {
        problems.add(key, origin, "expected a string, number or boolean");
        continue;
      }
    }
    out[key] = {std::move(text), origin};
  }
}

// The line (1-based) of the first byte outside ASCII, or 0. toml++ 3.3.0 (Debian 12)
// reaches __builtin_unreachable() on some non-ASCII bytes where a key is expected (found
// by fuzz/config_fuzz.cpp; its reproducers are in fuzz/corpus/config/): undefined behaviour on
// input a user may write. idem's keys and values are ASCII, and any other character can
// still be written as a \uXXXX escape inside a string, so such a file is refused with a
// clear message before toml++ sees it.
std::size_t first_non_ascii_line(std::string_view text) {
  std::size_t line = 1;
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return line;
    if (c == '\n') ++line;
  }
  return 0;
}

void apply_file(const std::string& path, Settings& out, Problems& problems,
                const ConfigOrigin& named_by) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    problems.add(path, named_by, "cannot read TOML file: it does not exist or is not readable");
    return;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (const std::size_t line = first_non_ascii_line(text); line > 0) {
    problems.add(path, named_by,
                 fmt::format("cannot parse TOML file (line {}): a byte outside ASCII; write "
                             "such characters as \\uXXXX escapes inside a quoted string",
                             line));
    return;
  }
  try {
    const toml::table table = toml::parse(text, path);
    flatten(table, "", path, out, problems);
  } catch (const toml::parse_error& e) {
    const auto line = e.source().begin.line;
    problems.add(path, named_by,
                 line > 0
                     ? fmt::format("cannot parse TOML file (line {}): {}", line, e.description())
                     : fmt::format("cannot read TOML file: {}", e.description()));
  }
}

// ---- layer 3: the environment ----------------------------------------------------------

std::string kafka_key_from_env(std::string_view name) {
  std::string key(detail::kKafkaPrefix);
  for (const char c : name.substr(kKafkaEnvPrefix.size())) {
    key.push_back(c == '_' ? '.' : static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return key;
}

void apply_environment(const std::vector<std::pair<std::string, std::string>>& environment,
                       Settings& out, Problems& problems) {
  // Conventional names first, so IDEM_* names of the same key override them.
  std::map<std::string, std::string, std::less<>> env(environment.begin(), environment.end());
  const auto set_from = [&](const std::string& key, const std::string& var) {
    const auto it = env.find(var);
    if (it != env.end()) out[key] = {it->second, {ConfigLayer::Environment, var}};
  };
  for (const KeySpec& spec : detail::key_specs()) {
    for (const auto var : spec.conventional_env) set_from(std::string(spec.name), std::string(var));
  }
  set_from("kafka.bootstrap.servers", "KAFKA_BOOTSTRAP_SERVERS");

  std::map<std::string, std::string> known_env;  // IDEM_<KEY> -> key
  for (const KeySpec& spec : detail::key_specs())
    known_env.emplace(detail::env_name_of(spec.name), std::string(spec.name));
  for (const auto& [name, value] : env) {
    if (!name.starts_with(kEnvPrefix) || name == kConfigFileEnv) continue;
    // An init-capture: clang before 16 cannot capture a structured binding (fuzz builds).
    if (std::any_of(kNonConfigEnvPrefixes.begin(), kNonConfigEnvPrefixes.end(),
                    [&var = name](std::string_view p) { return var.starts_with(p); }))
      continue;
    const ConfigOrigin origin{ConfigLayer::Environment, name};
    if (name.starts_with(kKafkaEnvPrefix) && name.size() > kKafkaEnvPrefix.size()) {
      out[kafka_key_from_env(name)] = {value, origin};
    } else if (const auto it = known_env.find(name); it != known_env.end()) {
      out[it->second] = {value, origin};
    } else {
      problems.add(name, origin, "unknown environment variable (no such configuration key)");
    }
  }
}

// ---- validation ------------------------------------------------------------------------

class Validator {
 public:
  Validator(const Settings& settings, Problems& problems) : s_(settings), p_(problems) {}

  [[nodiscard]] const Setting* find(std::string_view key) const {
    const auto it = s_.find(key);
    return it == s_.end() ? nullptr : &it->second;
  }
  [[nodiscard]] std::string text(std::string_view key) const {
    const Setting* v = find(key);
    return v != nullptr ? v->value : std::string();
  }
  void fail(std::string_view key, const std::string& message) const {
    const Setting* v = find(key);
    p_.add(std::string(key), v != nullptr ? v->origin : ConfigOrigin{}, message);
  }
  // What a message may quote of a value: never a secret.
  [[nodiscard]] std::string shown(std::string_view key) const {
    return is_secret_key(key) ? "<redacted>" : "'" + text(key) + "'";
  }

  template <class T>
  void integer(std::string_view key, T& target) const {
    const Setting* v = find(key);
    if (v == nullptr || v->value.empty()) return;
    const KeySpec& spec = *detail::find_key(key);
    std::int64_t n = 0;
    const char* end = v->value.data() + v->value.size();
    const auto [ptr, ec] = std::from_chars(v->value.data(), end, n);
    if (ec != std::errc() || ptr != end || n < spec.min || n > spec.max) {
      fail(key, fmt::format("expected an integer from {} to {}, got {}", spec.min, spec.max,
                            shown(key)));
      return;
    }
    target = static_cast<T>(n);
  }
  // A Duration key through parse_duration(), the one duration syntax; nullopt when unset
  // or invalid (then reported).
  [[nodiscard]] std::optional<std::chrono::milliseconds> duration_of(std::string_view key,
                                                                     std::string_view text) const {
    const KeySpec& spec = *detail::find_key(key);
    const auto d = parse_duration(text, spec.unit_of_bare_number);
    if (!d || static_cast<double>(d->count()) < spec.min ||
        static_cast<double>(d->count()) > spec.max) {
      const auto bound = [](double ms) {
        return format_duration(std::chrono::milliseconds(static_cast<std::int64_t>(ms)));
      };
      fail(key, fmt::format("expected a duration from {} to {} (a number and ms, s, m, h or d{}), "
                            "got {}",
                            bound(spec.min), bound(spec.max),
                            spec.unit_of_bare_number.empty()
                                ? std::string()
                                : fmt::format("; a bare number is {}", spec.unit_of_bare_number),
                            is_secret_key(key) ? "<redacted>" : "'" + std::string(text) + "'"));
      return std::nullopt;
    }
    return d;
  }
  template <class Duration>
  void duration(std::string_view key, Duration& target) const {
    const Setting* v = find(key);
    if (v == nullptr || v->value.empty()) return;
    if (const auto d = duration_of(key, v->value)) {
      target = std::chrono::duration_cast<Duration>(*d);
    }
  }
  // DedupHorizon and the partition period count whole hours: a value that is not one
  // would be cut silently, so it is refused.
  void whole_hours(std::string_view key, std::chrono::hours& target) const {
    std::chrono::milliseconds d = target;
    duration(key, d);
    if (d % std::chrono::hours(1) != std::chrono::milliseconds(0)) {
      fail(key, fmt::format("must be a whole number of hours, got {}", shown(key)));
      return;
    }
    target = std::chrono::duration_cast<std::chrono::hours>(d);
  }
  [[nodiscard]] std::vector<std::chrono::milliseconds> duration_list(std::string_view key) const {
    std::vector<std::chrono::milliseconds> out;
    for (const std::string& item : list(key)) {
      if (const auto d = duration_of(key, item)) out.push_back(*d);
    }
    return out;
  }
  void number(std::string_view key, double& target) const {
    const Setting* v = find(key);
    if (v == nullptr || v->value.empty()) return;
    const KeySpec& spec = *detail::find_key(key);
    double d = 0;
    const char* end = v->value.data() + v->value.size();
    const auto [ptr, ec] = std::from_chars(v->value.data(), end, d);
    if (ec != std::errc() || ptr != end || !std::isfinite(d) || d < spec.min || d > spec.max) {
      fail(key,
           fmt::format("expected a number from {} to {}, got {}", spec.min, spec.max, shown(key)));
      return;
    }
    target = d;
  }
  void boolean(std::string_view key, bool& target) const {
    const Setting* v = find(key);
    if (v == nullptr || v->value.empty()) return;
    if (v->value == "true" || v->value == "1" || v->value == "yes") {
      target = true;
    } else if (v->value == "false" || v->value == "0" || v->value == "no") {
      target = false;
    } else {
      fail(key, fmt::format("expected true or false, got {}", shown(key)));
    }
  }
  // Returns the index of the value among the spec's choices, or -1.
  int choice(std::string_view key) const {
    const Setting* v = find(key);
    if (v == nullptr || v->value.empty()) return -1;
    const KeySpec& spec = *detail::find_key(key);
    const auto it = std::find(spec.choices.begin(), spec.choices.end(), v->value);
    if (it == spec.choices.end()) {
      fail(key, fmt::format("expected one of {}, got {}", choices_text(key), shown(key)));
      return -1;
    }
    return static_cast<int>(it - spec.choices.begin());
  }
  [[nodiscard]] std::vector<std::string> list(std::string_view key) const {
    std::vector<std::string> out;
    const std::string all = text(key);
    std::size_t start = 0;
    while (start <= all.size() && !all.empty()) {
      const auto comma = std::min(all.find(',', start), all.size());
      std::string item = all.substr(start, comma - start);
      item.erase(0, item.find_first_not_of(' '));
      item.erase(item.find_last_not_of(' ') + 1);
      if (item.empty()) {
        fail(key, "empty list element");
      } else if (!is_allowed_element(key, item)) {
        fail(key, fmt::format("'{}' is not one of {}", item, choices_text(key)));
      } else {
        out.push_back(std::move(item));
      }
      start = comma + 1;
    }
    return out;
  }

 private:
  [[nodiscard]] static std::string choices_text(std::string_view key) {
    std::string allowed;
    for (const auto c : detail::find_key(key)->choices)
      allowed += (allowed.empty() ? "" : ", ") + std::string(c);
    return allowed;
  }
  [[nodiscard]] static bool is_allowed_element(std::string_view key, std::string_view item) {
    const KeySpec* spec = detail::find_key(key);
    return spec == nullptr || spec->choices.empty() ||
           std::find(spec->choices.begin(), spec->choices.end(), item) != spec->choices.end();
  }

  const Settings& s_;
  Problems& p_;
};

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
std::string compose_postgres_url(const Validator& v, std::string_view url, bool& ok) {
  static constexpr std::array<std::string_view, 9> kParams = {
      "host", "port", "dbname", "user", "password", "sslmode", "sslrootcert", "sslcert", "sslkey"};
  std::map<std::string, std::string> params;
  ok = true;
  if (!url.empty()) {
    std::string conninfo(url);
    if (conninfo.starts_with("postgresql:") && !conninfo.starts_with("postgresql://"))
      conninfo.erase(0, 11);
    auto parsed = detail::pg::parse_conninfo(conninfo);
    if (!parsed) {
      // libpq's message may quote the string; only say that it is malformed.
      v.fail("store.url", "not a valid libpq connection string or URI");
      ok = false;
      return {};
    }
    params = std::move(*parsed);
  }
  bool overridden = false;
  for (const auto p : kParams) {
    const std::string value = v.text(fmt::format("postgres.{}", p));
    if (!value.empty()) {
      params[std::string(p)] = value;
      overridden = true;
    }
  }
  if (!overridden) return std::string(url);
  std::string out = "postgresql:";
  for (const auto& [k, value] : params) {
    if (out.size() > 11) out.push_back(' ');
    out += k + "=" + conninfo_value(value);
  }
  return out;
}

void validate_kafka(const Validator& v, const Settings& settings, Config& config) {
  std::unique_ptr<rd_kafka_conf_t, void (*)(rd_kafka_conf_t*)> conf(rd_kafka_conf_new(),
                                                                    &rd_kafka_conf_destroy);
  for (const auto& [key, setting] : settings) {
    if (!key.starts_with(detail::kKafkaPrefix)) continue;
    const std::string property = key.substr(detail::kKafkaPrefix.size());
    if (property == "bootstrap.servers") {
      config.bootstrap_servers = setting.value;
      continue;
    }
    const auto owned = std::find_if(kOwnedKafkaProperties.begin(), kOwnedKafkaProperties.end(),
                                    [&](const OwnedProperty& o) { return o.name == property; });
    if (owned != kOwnedKafkaProperties.end()) {
      v.fail(key, std::string(owned->why));
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
      v.fail(key, fmt::format("librdkafka rejects {}: {}", v.shown(key), reason));
      continue;
    }
    config.kafka.emplace_back(property, setting.value);
  }
}

// host:port (port 0: any free port).
void validate_listen(const Validator& v, std::string_view key, const std::string& listen) {
  if (listen.empty()) return;
  const auto colon = listen.rfind(':');
  int port = -1;
  if (colon != std::string::npos) {
    const char* end = listen.data() + listen.size();
    const auto [ptr, ec] = std::from_chars(listen.data() + colon + 1, end, port);
    if (ec != std::errc() || ptr != end) port = -1;
  }
  if (colon == std::string::npos || port < 0 || port > 65535) {
    v.fail(key, fmt::format("expected host:port (port 0 to 65535), got '{}'", listen));
  }
}

// The consumer's settings beyond ConsumerConfig's basics: retry topics, the stale
// policy and the built-in handler of `idem consume`.
void validate_consumer_extras(const Validator& v, Config& c) {
  ConsumerSettings& cs = c.consumer;
  cs.retry_topics.delays = v.duration_list("consumer.retry_topics.delays");
  if (const int stale = v.choice("consumer.stale_events"); stale >= 0)
    cs.stale_events = static_cast<StaleEventPolicy>(stale);  // choices in enum order
  if (const int handler = v.choice("consumer.handler"); handler >= 0)
    cs.handler = static_cast<HandlerKind>(handler);
  cs.provider_url = v.text("consumer.provider_url");
  if (!cs.provider_url.empty() && !cs.provider_url.starts_with("http://") &&
      !cs.provider_url.starts_with("https://")) {
    v.fail("consumer.provider_url", fmt::format("expected an http:// or https:// URL, got {}",
                                                v.shown("consumer.provider_url")));
  }
}

void validate_dedup_and_maintenance(const Validator& v, Config& c) {
  DedupSettings& d = c.dedup;
  v.whole_hours("dedup.retention", d.horizon.retention);
  v.whole_hours("dedup.safety_margin", d.horizon.safety_margin);
  if (d.horizon.safety_margin >= d.horizon.retention) {
    v.fail("dedup.safety_margin",
           fmt::format("must be below dedup.retention ({})",
                       format_duration(std::chrono::milliseconds(d.horizon.retention))));
  }
  v.boolean("dedup.partitioned", d.partitioned);
  v.whole_hours("dedup.partition_period", d.partition_period);
  v.integer("dedup.partitions_ahead", d.partitions_ahead);
  v.integer("dedup.partitions_behind", d.partitions_behind);

  MaintenanceSettings& m = c.maintenance;
  v.duration("maintenance.interval", m.interval);
  v.duration("maintenance.outbox_retention", m.outbox_retention);
  v.integer("maintenance.batch_size", m.batch_size);
  v.duration("maintenance.batch_pause", m.batch_pause);
  v.integer("maintenance.max_batches", m.max_batches);
}

// `NAME` or `NAME:PARTITIONS`, as DevBroker takes them (it checks the name itself).
void validate_dev_broker_topics(const Validator& v, DevBrokerSettings& b) {
  for (const std::string& spec : v.list("dev_broker.topics")) {
    DevBrokerTopic topic;
    const auto colon = spec.rfind(':');
    topic.name = spec.substr(0, colon);
    if (colon != std::string::npos) {
      const char* end = spec.data() + spec.size();
      const auto [ptr, ec] = std::from_chars(spec.data() + colon + 1, end, topic.partitions);
      if (ec != std::errc() || ptr != end || topic.partitions < 1 || topic.name.empty()) {
        v.fail("dev_broker.topics",
               fmt::format("expected NAME or NAME:PARTITIONS (PARTITIONS >= 1), got '{}'", spec));
        continue;
      }
    }
    b.topics.push_back(std::move(topic));
  }
}

// The commands around the consumer: dlq, provider, dev-broker, demo.
void validate_tools(const Validator& v, Config& c) {
  c.dlq.topic = v.text("dlq.topic");
  v.duration("dlq.timeout", c.dlq.timeout);
  v.number("dlq.replay_rate", c.dlq.replay_rate);

  ProviderSettings& p = c.provider;
  p.listen = v.text("provider.listen");
  validate_listen(v, "provider.listen", p.listen);
  v.duration("provider.key_retention", p.key_retention);
  v.number("provider.reset_after_commit", p.reset_after_commit);
  v.number("provider.unavailable", p.unavailable);
  v.duration("provider.latency", p.latency);
  v.number("provider.decline", p.decline);
  v.integer("provider.seed", p.seed);

  v.integer("dev_broker.brokers", c.dev_broker.brokers);
  v.boolean("dev_broker.read_stdin", c.dev_broker.read_stdin);
  validate_dev_broker_topics(v, c.dev_broker);

  DemoSettings& d = c.demo;
  v.integer("demo.orders", d.orders);
  v.integer("demo.partitions", d.partitions);
  v.integer("demo.batch", d.batch);
  v.integer("demo.seed", d.seed);
  v.duration("demo.timeout", d.timeout);
  d.faults = v.list("demo.faults");
  if (d.faults.size() > 1 &&
      (std::find(d.faults.begin(), d.faults.end(), "all") != d.faults.end() ||
       std::find(d.faults.begin(), d.faults.end(), "none") != d.faults.end())) {
    v.fail("demo.faults", "all and none stand alone, not in a list");
  }
  v.integer("demo.relay_kills", d.relay_kills);
  v.integer("demo.consumer_kills", d.consumer_kills);
  v.number("demo.resend", d.resend);
  v.number("demo.reset_after_commit", d.reset_after_commit);
  v.number("demo.unavailable", d.unavailable);
  v.number("demo.decline", d.decline);
  v.duration("demo.provider_latency", d.provider_latency);
  v.boolean("demo.keep", d.keep);
}

Config validate(const Settings& settings, Problems& problems) {
  Config c;
  const Validator v(settings, problems);

  // store.* and postgres.*
  const std::string url = v.text("store.url");
  if (!url.empty() && !is_postgres_url(url) && !url.starts_with("sqlite://")) {
    v.fail("store.url", "expected a postgresql://, postgres:// or sqlite:// URL");
  }
  std::int64_t port = 0;
  v.integer("postgres.port", port);
  static_cast<void>(v.choice("postgres.sslmode"));
  if (url.empty() || is_postgres_url(url)) {
    bool ok = true;
    c.store_url = compose_postgres_url(v, url, ok);
  } else {
    c.store_url = url;  // SQLite: postgres.* (e.g. a PGHOST in the environment) do not apply
  }
  c.store_options.application_name = v.text("store.application_name");
  v.duration("store.busy_timeout_ms", c.store_options.busy_timeout);
  v.duration("store.connect_timeout_ms", c.store_options.connect_timeout);
  v.duration("store.statement_timeout_ms", c.store_options.statement_timeout);

  validate_kafka(v, settings, c);

  // consumer.*
  ConsumerSettings& cs = c.consumer;
  cs.group = v.text("consumer.group");
  cs.topics = v.list("consumer.topics");
  v.integer("consumer.batch_size", cs.batch_size);
  v.duration("consumer.batch_window_ms", cs.batch_window);
  v.integer("consumer.max_in_flight", cs.max_in_flight);
  cs.dlq_suffix = v.text("consumer.dlq_suffix");
  if (cs.dlq_suffix.empty())
    v.fail("consumer.dlq_suffix",
           "must not be empty (dead letters would loop into their own topic)");
  v.duration("consumer.retry_initial_ms", cs.retry.initial_backoff);
  v.duration("consumer.retry_max_ms", cs.retry.max_backoff);
  v.number("consumer.retry_multiplier", cs.retry.multiplier);
  v.number("consumer.retry_jitter", cs.retry.jitter);
  if (cs.retry.max_backoff < cs.retry.initial_backoff) {
    v.fail("consumer.retry_max_ms", fmt::format("must be at least consumer.retry_initial_ms ({})",
                                                cs.retry.initial_backoff.count()));
  }
  v.integer("consumer.max_message_bytes", cs.max_message_bytes);
  v.integer("consumer.max_headers", cs.max_headers);
  v.duration("consumer.dlq_ack_timeout_ms", cs.dlq_ack_timeout);
  std::set<std::string, std::less<>> seen;
  for (const auto& t : cs.topics) {
    if (!seen.insert(t).second)
      v.fail("consumer.topics", fmt::format("topic '{}' is listed twice", t));
  }
  for (const auto& t : cs.topics) {
    if (seen.contains(t + cs.dlq_suffix))
      v.fail("consumer.topics",
             fmt::format("topic '{}{}' is also the DLQ of '{}'", t, cs.dlq_suffix, t));
  }

  // relay.*
  v.integer("relay.batch_size", c.relay.batch_size);
  v.integer("relay.in_flight", c.relay.in_flight);
  v.integer("relay.mark_connections", c.relay.mark_connections);
  v.duration("relay.poll_interval_ms", c.relay.poll_interval);
  v.duration("relay.progress_interval_ms", c.relay.progress_interval);
  v.duration("relay.retention_hours", c.relay.retention);
  v.duration("relay.rebalance_interval", c.relay.rebalance_interval);
  v.duration("relay.shutdown_timeout", c.relay.shutdown_timeout);
  v.boolean("relay.listen", c.relay.listen);

  validate_consumer_extras(v, c);
  validate_dedup_and_maintenance(v, c);
  validate_tools(v, c);

  // admin.*, log.*, tracing.*
  c.admin.listen = v.text("admin.listen");
  validate_listen(v, "admin.listen", c.admin.listen);
  v.duration("admin.stuck_after_ms", c.admin.stuck_after);
  if (const int level = v.choice("log.level"); level >= 0)
    c.log.level = static_cast<LogLevel>(level);
  if (const int format = v.choice("log.format"); format >= 0)
    c.log.format = static_cast<LogFormat>(format);
  v.boolean("tracing.enabled", c.tracing.enabled);

  // Every key, unset ones included: `idem config check` lists what each command reads.
  for (const auto& [key, setting] : settings) {
    const bool secret = is_secret_key(key);
    c.entries.push_back({key, setting.value, secret, setting.origin});
  }
  return c;
}

std::string problems_text(const std::vector<ConfigProblem>& problems) {
  std::string out = fmt::format("configuration has {} problem{}:", problems.size(),
                                problems.size() == 1 ? "" : "s");
  for (const auto& p : problems) {
    out += fmt::format("\n  {} ({}): {}", p.key, p.origin.describe(), p.message);
  }
  return out;
}

}  // namespace

std::string_view to_string(ConfigLayer layer) noexcept {
  switch (layer) {
    case ConfigLayer::Default: return "default";
    case ConfigLayer::File: return "file";
    case ConfigLayer::Environment: return "env";
    case ConfigLayer::Flag: return "flag";
  }
  return "unknown";
}

std::string_view to_string(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::Debug: return "debug";
    case LogLevel::Info: return "info";
    case LogLevel::Warn: return "warn";
    case LogLevel::Error: return "error";
  }
  return "unknown";
}

std::string ConfigOrigin::describe() const {
  return where.empty() ? std::string(to_string(layer))
                       : fmt::format("{} {}", to_string(layer), where);
}

ConfigError::ConfigError(std::vector<ConfigProblem> problems)
    : Error(ErrorCode::InvalidArgument, ErrorSource::Config, problems_text(problems)),
      problems_(std::move(problems)) {}

Config load_config(const ConfigSources& sources) {
  Settings settings;
  Problems problems;
  for (const KeySpec& spec : detail::key_specs()) {
    settings[std::string(spec.name)] = {std::string(spec.default_value), {}};
  }

  std::string file = sources.file;
  ConfigOrigin file_named_by{ConfigLayer::Flag, "--config"};
  if (file.empty()) {
    for (const auto& [name, value] : sources.environment) {
      if (name == kConfigFileEnv) {
        file = value;
        file_named_by = {ConfigLayer::Environment, std::string(kConfigFileEnv)};
      }
    }
  }
  if (!file.empty()) apply_file(file, settings, problems, file_named_by);
  apply_environment(sources.environment, settings, problems);
  for (const FlagSetting& f : sources.flags) {
    const ConfigOrigin origin{ConfigLayer::Flag, f.flag};
    if (!is_known_key(f.key)) {
      problems.add(f.key, origin, "unknown key");
      continue;
    }
    settings[f.key] = {f.value, origin};
  }

  Config config = validate(settings, problems);
  if (!problems.empty()) throw ConfigError(problems.take());
  return config;
}

ConsumerConfig Config::consumer_config() const {
  ConsumerConfig c;
  c.bootstrap_servers = bootstrap_servers;
  c.group_id = consumer.group;
  c.topics = consumer.topics;
  c.batch_size = consumer.batch_size;
  c.batch_window = consumer.batch_window;
  c.max_in_flight = consumer.max_in_flight;
  c.dlq_suffix = consumer.dlq_suffix;
  c.retry = consumer.retry;
  c.limits.max_payload_bytes = consumer.max_message_bytes;
  c.limits.max_headers = consumer.max_headers;
  c.kafka = kafka;
  c.dlq_ack_timeout = consumer.dlq_ack_timeout;
  c.retry_topics = consumer.retry_topics;
  c.stale_events = consumer.stale_events;
  c.dedup_horizon = dedup.horizon;
  return c;
}

RetentionPolicy Config::retention_policy() const {
  RetentionPolicy p;
  p.dedup = dedup.horizon;
  p.outbox_retention = maintenance.outbox_retention;
  p.batch_size = maintenance.batch_size;
  p.batch_pause = maintenance.batch_pause;
  p.max_batches = maintenance.max_batches;
  p.partition_period = dedup.partition_period;
  p.partitions_ahead = dedup.partitions_ahead;
  return p;
}

RelayConfig Config::relay_config() const {
  RelayConfig r;
  r.store_url = store_url;
  r.store_options = store_options;
  r.producer.bootstrap_servers = bootstrap_servers;
  r.producer.client_id = "idem-relay";
  r.producer.kafka = kafka;
  r.batch_size = relay.batch_size;
  r.max_batches_in_flight = relay.in_flight;
  r.mark_connections = relay.mark_connections;
  r.poll_interval = relay.poll_interval;
  r.retention = relay.retention;
  r.progress_interval = relay.progress_interval;
  r.rebalance_interval = relay.rebalance_interval;
  r.shutdown_timeout = relay.shutdown_timeout;
  r.listen = relay.listen;
  return r;
}

void Config::require(std::initializer_list<std::string_view> keys) const {
  std::vector<ConfigProblem> missing;
  for (const auto key : keys) {
    const auto it = std::find_if(entries.begin(), entries.end(),
                                 [&](const ConfigEntry& e) { return e.key == key; });
    if (it == entries.end() || it->value.empty()) {
      ConfigProblem problem;  // origin: none (a default); named object for GCC's -O3 flow analysis
      problem.key = std::string(key);
      problem.message = fmt::format("required; set it in the file, as {} or with a flag",
                                    detail::env_name_of(key));
      missing.push_back(std::move(problem));
    }
  }
  if (!missing.empty()) throw ConfigError(std::move(missing));
}

std::string Config::describe() const {
  std::size_t width = 0;
  std::vector<std::pair<std::string, const ConfigEntry*>> lines;
  for (const auto& e : entries) {
    lines.emplace_back(fmt::format("{} = {}", e.key, e.display_value()), &e);
    width = std::max(width, lines.back().first.size());
  }
  std::string out;
  for (const auto& [text, e] : lines) {
    out += fmt::format("{:<{}}  # {}\n", text, width, e->origin.describe());
  }
  return out;
}

}  // namespace idem
