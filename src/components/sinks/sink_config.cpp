// load_sink_config(): the `routes` table of idem's TOML file, read from the loader's own
// parse of it (ConfigDocument, toml++) and checked in one pass that reports every problem
// with its file, line and key.
#include "idem/sinks/sink_config.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "idem/config_document.hpp"
#include "sinks/param_values.hpp"
#include "sinks/sql_text.hpp"

namespace idem::sinks {

namespace {

constexpr std::string_view kRoutes = "routes";

class Problems {
 public:
  void add(SinkKey where, std::string message) {
    list_.push_back({std::move(where.key), std::move(where.origin), std::move(message)});
  }
  [[nodiscard]] bool empty() const noexcept { return list_.empty(); }
  std::vector<ConfigProblem> take() { return std::move(list_); }

 private:
  std::vector<ConfigProblem> list_;
};

struct Reader {
  std::string file;
  const std::vector<std::pair<std::string, std::string>>* environment = nullptr;
  Problems problems;

  [[nodiscard]] SinkKey at(const std::string& key, const toml::node& node) const {
    return {key, {ConfigLayer::File, fmt::format("{}:{}", file, node.source().begin.line)}};
  }

  std::optional<std::string> string(const std::string& key, const toml::node& node) {
    if (const auto* s = node.as_string()) return s->get();
    problems.add(at(key, node), "expected a string");
    return std::nullopt;
  }
};

// RFC 6901: empty (the whole document) or `/`-separated tokens where `~` is followed by
// 0 or 1.
bool is_json_pointer(std::string_view p) noexcept {
  if (!p.empty() && p[0] != '/') return false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '~' && (i + 1 == p.size() || (p[i + 1] != '0' && p[i + 1] != '1'))) return false;
  }
  return true;
}

std::optional<ParamType> param_type_of(std::string_view s) {
  static constexpr std::array<std::pair<std::string_view, ParamType>, 7> kTypes = {{
      {"text", ParamType::Text},
      {"integer", ParamType::Integer},
      {"numeric", ParamType::Numeric},
      {"boolean", ParamType::Boolean},
      {"uuid", ParamType::Uuid},
      {"timestamp", ParamType::Timestamp},
      {"json", ParamType::Json},
  }};
  for (const auto& [name, type] : kTypes) {
    if (name == s) return type;
  }
  return std::nullopt;
}

std::optional<ParamSource> source_of(std::string_view s) {
  using K = ParamSource::Kind;
  if (s.empty() || s[0] == '/') {
    if (!is_json_pointer(s)) return std::nullopt;
    return ParamSource{K::Pointer, std::string(s)};
  }
  static constexpr std::array<std::pair<std::string_view, K>, 7> kNamed = {{
      {"event.id", K::EventId},
      {"event.type", K::EventType},
      {"kafka.topic", K::KafkaTopic},
      {"kafka.partition", K::KafkaPartition},
      {"kafka.offset", K::KafkaOffset},
      {"kafka.key", K::KafkaKey},
      {"consumer.group", K::ConsumerGroup},
  }};
  for (const auto& [name, kind] : kNamed) {
    if (name == s) return ParamSource{kind, {}};
  }
  if (s.starts_with("ce.") && s.size() > 3)
    return ParamSource{K::Attribute, std::string(s.substr(3))};
  if (s.starts_with("response:") && is_json_pointer(s.substr(9)))
    return ParamSource{K::Response, std::string(s.substr(9))};
  if (s.starts_with("kafka.header.") && s.size() > 13)
    return ParamSource{K::KafkaHeader, std::string(s.substr(13))};
  return std::nullopt;
}

// The parameters every statement may use without declaring them.
std::optional<ParamSpec> builtin_param(std::string_view name) {
  using K = ParamSource::Kind;
  static constexpr std::array<std::tuple<std::string_view, K, ParamType>, 7> kBuiltins = {{
      {"event_id", K::EventId, ParamType::Uuid},
      {"event_type", K::EventType, ParamType::Text},
      {"kafka_topic", K::KafkaTopic, ParamType::Text},
      {"kafka_partition", K::KafkaPartition, ParamType::Integer},
      {"kafka_offset", K::KafkaOffset, ParamType::Integer},
      {"kafka_key", K::KafkaKey, ParamType::Text},
      {"consumer_group", K::ConsumerGroup, ParamType::Text},
  }};
  for (const auto& [builtin, kind, type] : kBuiltins) {
    if (builtin == name) {
      ParamSpec spec;
      spec.name = std::string(name);
      spec.source = {kind, {}};
      spec.type = type;
      return spec;
    }
  }
  return std::nullopt;
}

void read_param(Reader& r, const std::string& key, const std::string& name, const toml::node& node,
                Route& route) {
  const auto* table = node.as_table();
  if (table == nullptr) {
    r.problems.add(
        r.at(key, node),
        "expected a table such as { from = \"/amount\", type = \"numeric\", scale = 2 }");
    return;
  }
  ParamSpec spec;
  spec.name = name;
  spec.where = r.at(key, node);
  if (!detail::is_param_name(name))
    r.problems.add(spec.where, "a parameter name is a letter or _, then letters, digits or _");
  if (builtin_param(name))
    r.problems.add(spec.where, fmt::format("${} is built in; choose another name", name));
  bool has_from = false;
  bool has_type = false;
  for (const auto& [k, value] : *table) {
    const std::string sub = fmt::format("{}.{}", key, k.str());
    if (k == "from") {
      has_from = true;
      if (auto text = r.string(sub, value)) {
        if (auto source = source_of(*text)) {
          spec.source = std::move(*source);
        } else {
          r.problems.add(r.at(sub, value),
                         fmt::format("'{}' is neither a JSON pointer (/a/b, RFC 6901) nor a source "
                                     "(event.id, event.type, ce.NAME, kafka.topic, "
                                     "kafka.partition, kafka.offset, kafka.key, kafka.header.NAME, "
                                     "consumer.group, response:/POINTER)",
                                     *text));
        }
      }
    } else if (k == "type") {
      has_type = true;
      if (auto text = r.string(sub, value)) {
        if (auto type = param_type_of(*text)) {
          spec.type = *type;
        } else {
          r.problems.add(r.at(sub, value),
                         fmt::format("unknown type '{}': text, integer, numeric, boolean, uuid, "
                                     "timestamp or json",
                                     *text));
        }
      }
    } else if (k == "precision" || k == "scale") {
      const auto* n = value.as_integer();
      if (n == nullptr || n->get() < 0 || n->get() > 18) {
        r.problems.add(r.at(sub, value), "expected an integer from 0 to 18");
      } else {
        (k == "precision" ? spec.precision : spec.scale) = static_cast<int>(n->get());
      }
    } else if (k == "bind") {
      const auto text = r.string(sub, value);
      if (text == "auto") {
        spec.binding = ParamSpec::Binding::Auto;
      } else if (text == "decimal") {
        spec.binding = ParamSpec::Binding::Decimal;
      } else if (text == "scaled") {
        spec.binding = ParamSpec::Binding::Scaled;
      } else if (text) {
        r.problems.add(r.at(sub, value), "expected \"auto\", \"decimal\" or \"scaled\"");
      }
    } else if (k == "required") {
      if (const auto* b = value.as_boolean()) {
        spec.required = b->get();
      } else {
        r.problems.add(r.at(sub, value), "expected true or false");
      }
    } else {
      r.problems.add(r.at(sub, value),
                     "unknown key (from, type, precision, scale, bind, required)");
    }
  }
  if (!has_from) r.problems.add(spec.where, "missing `from` (a JSON pointer or a source)");
  if (!has_type) r.problems.add(spec.where, "missing `type`");
  if (spec.type == ParamType::Numeric && (spec.precision < 1 || spec.scale > spec.precision))
    r.problems.add(spec.where, "numeric needs 1 <= precision <= 18 and scale <= precision");
  if (spec.type != ParamType::Numeric &&
      (table->contains("precision") || table->contains("scale") || table->contains("bind")))
    r.problems.add(spec.where, "precision, scale and bind apply to type numeric only");
  route.params.push_back(std::move(spec));
}

// The route parameter `name` (a built-in one is added on first use), or nullopt after
// reporting that it is not declared.
std::optional<std::size_t> param_index(Reader& r, Route& route, const std::string& name,
                                       const SinkKey& where) {
  auto it = std::find_if(route.params.begin(), route.params.end(),
                         [&](const ParamSpec& p) { return p.name == name; });
  if (it == route.params.end()) {
    auto builtin = builtin_param(name);
    if (!builtin) {
      r.problems.add(where, fmt::format("${} is not declared under routes.{}.params (nor built "
                                        "in: $event_id, $event_type, $kafka_topic, "
                                        "$kafka_partition, $kafka_offset, $kafka_key, "
                                        "$consumer_group)",
                                        name, route.name));
      return std::nullopt;
    }
    builtin->where = where;
    route.params.push_back(std::move(*builtin));
    it = route.params.end() - 1;
  }
  return static_cast<std::size_t>(it - route.params.begin());
}

// `{name}` inserts a route parameter (not one read from the call's answer, which does not
// exist yet); `${VAR}` (in a URL or a header value) the environment variable VAR, and the
// template is then a secret. Any other `{` is text, as in a JSON body. A URL or a header
// value must not hold a control character (a header could not be sent; a file-backed
// secret often ends with a newline): the problem names the key and the variable, never
// the value.
std::optional<Template> read_template(Reader& r, const std::string& key, const toml::node& node,
                                      Route& route, detail::TemplatePlace place) {
  const bool allow_env = place != detail::TemplatePlace::Body;
  const auto text = r.string(key, node);
  if (!text) return std::nullopt;
  const SinkKey where = r.at(key, node);
  Template t;
  std::string literal;
  const auto flush = [&] {
    if (!literal.empty()) t.parts.push_back({std::move(literal), 0, false});
    literal.clear();
  };
  for (std::size_t i = 0; i < text->size(); ++i) {
    const bool env =
        allow_env && (*text)[i] == '$' && i + 1 < text->size() && (*text)[i + 1] == '{';
    const std::size_t open = env ? i + 1 : i;
    if ((*text)[open] != '{') {
      literal.push_back((*text)[i]);
      continue;
    }
    const std::size_t close = text->find('}', open);
    const std::string name =
        close == std::string::npos ? std::string() : text->substr(open + 1, close - open - 1);
    if (!detail::is_param_name(name)) {
      literal.push_back((*text)[i]);
      continue;
    }
    if (env) {
      const auto var = std::find_if(r.environment->begin(), r.environment->end(),
                                    [&](const auto& kv) { return kv.first == name; });
      if (var == r.environment->end()) {
        r.problems.add(where, fmt::format("the environment variable {} is not set", name));
      } else {
        if (const auto bad = detail::control_character(var->second))
          r.problems.add(where,
                         fmt::format("the value of the environment variable {} has {} "
                                     "(value not shown): a {} cannot hold it; remove it "
                                     "(a secret read from a file often ends with a newline)",
                                     name, *bad,
                                     place == detail::TemplatePlace::Url ? "URL" : "header value"));
        literal += var->second;
        t.secret = true;
        t.secrets.push_back(var->second);
      }
    } else if (auto index = param_index(r, route, name, where)) {
      if (route.params[*index].source.kind == ParamSource::Kind::Response) {
        r.problems.add(where, fmt::format("{{{}}} is read from the call's answer: it can be used "
                                          "in sql only",
                                          name));
      }
      flush();
      t.parts.push_back({{}, *index, true});
    }
    i = close;
  }
  flush();
  if (const auto bad = allow_env ? detail::control_character(*text) : std::nullopt)
    r.problems.add(where,
                   fmt::format("has {}: a {} cannot hold it", *bad,
                               place == detail::TemplatePlace::Url ? "URL" : "header value"));
  return t;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

void read_http(Reader& r, const std::string& key, const toml::node& node, Route& route) {
  const auto* table = node.as_table();
  if (table == nullptr) {
    r.problems.add(r.at(key, node), "expected a table ([routes.NAME.http])");
    return;
  }
  HttpCall call;
  call.where = r.at(key, node);
  bool has_url = false;
  for (const auto& [k, value] : *table) {
    const std::string sub = fmt::format("{}.{}", key, k.str());
    if (k == "url") {
      has_url = true;
      if (auto t = read_template(r, sub, value, route, detail::TemplatePlace::Url)) {
        if (auto problem = detail::url_template_problem(*t, route.params))
          r.problems.add(r.at(sub, value), std::move(*problem));
        call.url = std::move(*t);
      }
    } else if (k == "body") {
      const auto* text = value.as_string();
      if (text != nullptr && text->get() == "event") continue;
      call.body_is_event = false;
      if (auto t = read_template(r, sub, value, route, detail::TemplatePlace::Body))
        call.body = std::move(*t);
    } else if (k == "headers") {
      const auto* headers = value.as_table();
      if (headers == nullptr) {
        r.problems.add(r.at(sub, value), "expected a table of header names and values");
        continue;
      }
      for (const auto& [name, v] : *headers) {
        const std::string hkey = fmt::format("{}.{}", sub, name.str());
        if (!is_token(name.str()))
          r.problems.add(r.at(hkey, v), "not a header name (an HTTP token)");
        if (auto t = read_template(r, hkey, v, route, detail::TemplatePlace::Header))
          call.headers.emplace_back(std::string(name.str()), std::move(*t));
      }
    } else if (k == "method" || k == "content_type" || k == "idempotency_header" ||
               k == "ordering_key") {
      const auto text = r.string(sub, value);
      if (!text) continue;
      if (k == "method") call.method = *text;
      if (k == "content_type") call.content_type = *text;
      if (k == "idempotency_header") call.idempotency_header = *text;
      if (k == "ordering_key") call.ordering_key = *text;
      if ((k == "method" || k == "idempotency_header") && !is_token(*text))
        r.problems.add(r.at(sub, value), "not an HTTP token");
      if (k == "ordering_key" && (text->empty() || !is_json_pointer(*text)))
        r.problems.add(r.at(sub, value), "expected a JSON pointer (/field)");
    } else if (k == "rate_limit") {
      const auto rate = value.value<double>();
      if (!rate || *rate < 0) {
        r.problems.add(r.at(sub, value), "expected calls per second, a number >= 0");
      } else {
        call.rate_limit = *rate;
      }
    } else {
      r.problems.add(r.at(sub, value),
                     "unknown key (method, url, headers, body, content_type, "
                     "idempotency_header, ordering_key, rate_limit)");
    }
  }
  if (!has_url) r.problems.add(call.where, "missing `url`");
  route.http = std::move(call);
}

void read_statement(Reader& r, const std::string& key, const toml::node& node, Route& route) {
  const auto text = r.string(key, node);
  if (!text) return;
  SqlStatement st;
  st.text = *text;
  st.where = r.at(key, node);
  detail::NamedSql named = detail::positional_sql(*text);
  if (!named.problem.empty()) {
    r.problems.add(st.where, std::move(named.problem));
    return;
  }
  for (const std::string& name : named.names) {
    if (auto index = param_index(r, route, name, st.where)) st.params.push_back(*index);
  }
  st.sql = std::move(named.sql);
  route.sql.push_back(std::move(st));
}

// The keys a route and the `routes` table share: how a topic's events are read.
bool read_format_key(Reader& r, const std::string& key, std::string_view name,
                     const toml::node& value, TopicFormat& format) {
  if (name == "format") {
    if (auto text = r.string(key, value)) {
      if (*text == "json") {
        format.format = EventFormat::Json;
      } else if (*text == "cloudevents") {
        format.format = EventFormat::CloudEvents;
      } else if (*text == "auto") {
        format.format = EventFormat::Auto;
      } else {
        r.problems.add(r.at(key, value), "expected \"json\", \"cloudevents\" or \"auto\"");
      }
    }
  } else if (name == "id_pointer" || name == "type_pointer") {
    if (auto text = r.string(key, value)) {
      if (!is_json_pointer(*text) || text->empty()) {
        r.problems.add(r.at(key, value),
                       fmt::format("'{}' is not a JSON pointer (RFC 6901: /field/sub)", *text));
      }
      (name == "id_pointer" ? format.id_pointer : format.type_pointer) = *text;
    }
  } else if (name == "unknown_type") {
    if (auto text = r.string(key, value)) {
      if (*text == "dead_letter") {
        format.unknown_type = UnknownTypePolicy::DeadLetter;
      } else if (*text == "skip") {
        format.unknown_type = UnknownTypePolicy::Skip;
      } else {
        r.problems.add(r.at(key, value), "expected \"dead_letter\" or \"skip\"");
      }
    }
  } else {
    return false;
  }
  return true;
}

bool same_format(const TopicFormat& a, const TopicFormat& b) {
  return a.format == b.format && a.id_pointer == b.id_pointer && a.type_pointer == b.type_pointer &&
         a.unknown_type == b.unknown_type;
}

void read_route(Reader& r, const std::string& name, const toml::table& table,
                const TopicFormat& defaults, SinkConfig& out) {
  Route route;
  route.name = name;
  const std::string key = fmt::format("{}.{}", kRoutes, name);
  route.where = r.at(key, table);
  TopicFormat format = defaults;
  // Parameters first: statements refer to them whatever the order in the file.
  if (const auto* params = table.get("params")) {
    if (const auto* t = params->as_table()) {
      for (const auto& [pname, value] : *t)
        read_param(r, fmt::format("{}.params.{}", key, pname.str()), std::string(pname.str()),
                   value, route);
    } else {
      r.problems.add(r.at(key + ".params", *params), "expected a table of parameters");
    }
  }
  for (const auto& [k, value] : table) {
    const std::string sub = fmt::format("{}.{}", key, k.str());
    if (k == "params") continue;
    if (k == "topic") {
      if (auto text = r.string(sub, value)) route.topic = *text;
    } else if (k == "type") {
      if (auto text = r.string(sub, value)) route.event_type = *text;
    } else if (k == "schema") {
      if (auto text = r.string(sub, value)) {
        std::filesystem::path path(*text);
        if (path.is_relative()) path = std::filesystem::path(r.file).parent_path() / path;
        route.schema = path.lexically_normal().string();
      }
    } else if (k == "http") {
      read_http(r, sub, value, route);
    } else if (k == "sql") {
      if (const auto* list = value.as_array()) {
        for (std::size_t i = 0; i < list->size(); ++i)
          read_statement(r, fmt::format("{}[{}]", sub, i), *list->get(i), route);
      } else {
        read_statement(r, sub, value, route);
      }
    } else if (!read_format_key(r, sub, k.str(), value, format)) {
      r.problems.add(r.at(sub, value),
                     "unknown key (topic, type, schema, params, sql, http, "
                     "format, id_pointer, type_pointer, unknown_type)");
    }
  }
  if (route.topic.empty()) r.problems.add(route.where, "missing `topic`");
  if (route.event_type.empty()) r.problems.add(route.where, "missing `type` (the event type)");
  if (route.sql.empty() && !route.http && !table.contains("sql"))
    r.problems.add(route.where, "no effect: give `sql` (one statement or a list) or `http`");
  for (const ParamSpec& p : route.params) {
    if (p.source.kind == ParamSource::Kind::Response && !route.http)
      r.problems.add(p.where, "reads the answer of a call, and the route makes none (http)");
  }
  for (const Route& other : out.routes) {
    if (other.topic == route.topic && other.event_type == route.event_type && !route.topic.empty())
      r.problems.add(route.where, fmt::format("routes.{} already handles type '{}' on topic '{}'",
                                              other.name, route.event_type, route.topic));
  }
  if (const auto [it, inserted] = out.topics.emplace(route.topic, format);
      !inserted && !same_format(it->second, format)) {
    r.problems.add(route.where,
                   fmt::format("routes on topic '{}' disagree on format, id_pointer, type_pointer "
                               "or unknown_type (one topic is read one way)",
                               route.topic));
  }
  out.routes.push_back(std::move(route));
}

}  // namespace

std::vector<std::string> SinkConfig::topic_names() const {
  std::vector<std::string> names;
  for (const auto& [topic, format] : topics) names.push_back(topic);
  return names;
}

std::optional<SinkConfig> load_sink_config(
    const ConfigDocument& document,
    const std::vector<std::pair<std::string, std::string>>& environment) {
  const std::string& file = document.file();
  Reader r;
  r.file = file;
  r.environment = &environment;
  const SinkKey whole{std::string(kRoutes), {ConfigLayer::File, file}};
  const toml::table& doc = document.table();
  const toml::node* routes = doc.get(kRoutes);
  if (routes == nullptr) return std::nullopt;
  const auto* table = routes->as_table();
  if (table == nullptr)
    throw ConfigError({{whole.key, r.at(whole.key, *routes).origin, "expected a table"}});

  SinkConfig out;
  out.file = file;
  TopicFormat defaults;
  for (const auto& [k, value] : *table) {
    if (value.is_table()) continue;
    const std::string key = fmt::format("{}.{}", kRoutes, k.str());
    if (!read_format_key(r, key, k.str(), value, defaults))
      r.problems.add(r.at(key, value),
                     "unknown key (a route is a table: [routes.NAME]; scalar keys "
                     "here are format, id_pointer, type_pointer, unknown_type)");
  }
  for (const auto& [k, value] : *table) {
    if (const auto* route = value.as_table())
      read_route(r, std::string(k.str()), *route, defaults, out);
  }
  if (out.routes.empty() && r.problems.empty())
    r.problems.add(whole, "declares no route ([routes.NAME] with topic, type and sql)");
  if (!r.problems.empty()) throw ConfigError(r.problems.take());
  return out;
}

std::optional<SinkConfig> load_sink_config(
    const std::string& file, const std::vector<std::pair<std::string, std::string>>& environment) {
  std::string problem;
  const std::shared_ptr<const ConfigDocument> document = ConfigDocument::read(file, problem);
  if (!document) throw ConfigError({{file, {ConfigLayer::File, file}, problem}});
  return load_sink_config(*document, environment);
}

std::string SinkConfig::describe() const {
  std::string out;
  for (const Route& route : routes) {
    out += fmt::format("route {}: topic {} type {} ({} statement{}{})\n", route.name, route.topic,
                       route.event_type, route.sql.size(), route.sql.size() == 1 ? "" : "s",
                       route.schema.empty() ? "" : ", schema " + route.schema);
    if (route.http) {
      const auto shown = [&](const Template& t) {
        if (t.secret) return std::string("<redacted>");
        std::string text;
        for (const auto& part : t.parts)
          text += part.is_param ? "{" + route.params[part.param].name + "}" : part.text;
        return text;
      };
      out += fmt::format("  http: {} {}\n", route.http->method, shown(route.http->url));
      for (const auto& [name, value] : route.http->headers)
        out += fmt::format("  header: {}: {}\n", name, shown(value));
    }
    for (const SqlStatement& st : route.sql) out += fmt::format("  sql: {}\n", st.text);
  }
  return out;
}

void reserve_tables(ConfigSchema& schema) {
  schema.reserve_table(std::string(kRoutes));
  schema.reserve_table("tests");  // the routes' own tests (route_tests.hpp)
}

}  // namespace idem::sinks
