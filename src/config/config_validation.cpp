// The loader's validation pass: every setting is checked against its key's type and
// range, the Config is built from them, and every problem is collected before the loader
// throws (config_loader.cpp).
#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "config/config_warnings.hpp"
#include "config/keys.hpp"
#include "config/settings.hpp"
#include "stores/postgres/pg_conninfo.hpp"

namespace idem::detail {
namespace {

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
    return is_secret_key(key) ? "<redacted>" : fmt::format("'{}'", text(key));
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
                            is_secret_key(key) ? "<redacted>" : fmt::format("'{}'", text)));
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

  c.console.listen = v.text("console.listen");
  validate_listen(v, "console.listen", c.console.listen);
  c.console.token = v.text("console.token");
  v.duration("console.refresh", c.console.refresh);
  c.console.scrape = v.list("console.scrape");
  c.console.groups = v.list("console.groups");

  ProviderSettings& p = c.provider;
  p.listen = v.text("provider.listen");
  validate_listen(v, "provider.listen", p.listen);
  v.duration("provider.key_retention", p.key_retention);
  std::chrono::milliseconds stated_key_retention{0};
  v.duration("billing.provider_key_retention", stated_key_retention);
  if (stated_key_retention.count() > 0) c.billing.provider_key_retention = stated_key_retention;
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

}  // namespace

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
  v.integer("consumer.pipeline_depth", cs.pipeline_depth);
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
  v.duration("consumer.stop_timeout", cs.stop_timeout);
  cs.instance_id = v.text("consumer.instance_id");
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
  v.duration("relay.stop_timeout", c.relay.stop_timeout);
  v.boolean("relay.listen", c.relay.listen);

  validate_consumer_extras(v, c);
  validate_dedup_and_maintenance(v, c);
  validate_tools(v, c);

  // admin.*, log.*, tracing.*
  c.admin.listen = v.text("admin.listen");
  validate_listen(v, "admin.listen", c.admin.listen);
  v.duration("admin.stuck_after_ms", c.admin.stuck_after);
  v.boolean("admin.console", c.admin.console);
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
  c.warnings = detail::config_warnings(c);
  return c;
}

}  // namespace idem::detail
