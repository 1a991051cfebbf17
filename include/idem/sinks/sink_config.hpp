#pragma once
/// \file
/// Sinks declared in a configuration file (docs/configured-sinks.md): the `routes` table
/// of idem's TOML file, read by this component from the same file as the core settings
/// (Config::file; a schema with these sinks reserves the table for them: reserve_tables()).
///
///     [routes]                          # defaults of every route (shown)
///     format = "json"                   # or "cloudevents" (binary and structured mode),
///                                       # or "auto" (each record as its headers say)
///     id_pointer = "/event_id"          # where a JSON event's UUIDv7 is
///     type_pointer = "/event_type"      # where a JSON event's type is
///     unknown_type = "dead_letter"      # an event whose type has no route: or "skip"
///
///     [routes.balance]                  # one route: one event type on one topic
///     topic = "payments"
///     type = "payment.received.v1"
///     schema = "payment.schema.json"    # optional JSON Schema (draft-07), beside the file
///     sql = ["UPDATE account SET balance = balance + $amount WHERE id = $account",
///            "INSERT INTO movement (event_id, amount) VALUES ($event_id, $amount)"]
///     [routes.balance.params]
///     account = { from = "/account", type = "text" }
///     amount = { from = "/amount", type = "numeric", precision = 18, scale = 2 }
///
/// Plain data; load_sink_config() validates everything that needs no database.

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "idem/config.hpp"
#include "idem/events/event_reader.hpp"

namespace idem::sinks {

/// How the records of a topic carry their events: the core's event reader's formats.
using idem::EventFormat;

/// What happens to an event whose type has no route on its topic.
enum class UnknownTypePolicy {
  DeadLetter,  ///< to the DLQ, reason validation.unknown_event_type (default)
  Skip         ///< marked processed with no effect; its offset advances
};

/// The declared type of a parameter: how its value is checked and bound.
enum class ParamType {
  Text,       ///< a JSON string
  Integer,    ///< a JSON integer (64-bit)
  Numeric,    ///< an exact decimal (JSON string or number) within precision and scale
  Boolean,    ///< true or false
  Uuid,       ///< a UUID string; bound as idem binds UUIDs (text on PostgreSQL, 16 bytes on SQLite)
  Timestamp,  ///< an RFC 3339 date-time string; bound as RFC 3339 text
  Json        ///< any JSON value, bound as its compact JSON text
};

/// Where a parameter's value comes from (`from = ...`).
struct ParamSource {
  enum class Kind {
    Pointer,         ///< `/a/b`: a JSON pointer into the event (its `data` for CloudEvents)
    EventId,         ///< `event.id`: the event's id (UUIDv7)
    EventType,       ///< `event.type`
    Attribute,       ///< `ce.NAME`: a CloudEvents attribute (source, time, subject, ...)
    KafkaTopic,      ///< `kafka.topic`
    KafkaPartition,  ///< `kafka.partition`
    KafkaOffset,     ///< `kafka.offset`
    KafkaKey,        ///< `kafka.key`
    KafkaHeader,     ///< `kafka.header.NAME`
    ConsumerGroup,   ///< `consumer.group`
    Response,        ///< `response:/a/b`: a JSON pointer into the answer of the route's call
  };
  Kind kind = Kind::Pointer;
  std::string name;  ///< the pointer, attribute or header name
};

/// Where a value of the file is, for messages: `routes.balance.params.amount` at
/// `file /etc/idem/balance.toml:12`.
struct SinkKey {
  std::string key;
  ConfigOrigin origin;
};

/// One parameter of a route (`[routes.NAME.params]`), or a built-in one a statement uses
/// (`$event_id`, `$event_type`, `$kafka_topic`, `$kafka_partition`, `$kafka_offset`,
/// `$kafka_key`, `$consumer_group`).
struct ParamSpec {
  std::string name;
  ParamSource source;
  ParamType type = ParamType::Text;
  int precision = 18;  ///< Numeric: digits in all, 1..18 (SQLite binds a 64-bit integer)
  int scale = 0;       ///< Numeric: digits after the point, 0..precision
  /// Numeric: how the value is bound (`bind`). Auto: exact decimal text on PostgreSQL, a
  /// scaled integer on SQLite (no exact decimal type there); Decimal: text on both (for
  /// a column that stores decimal text); Scaled: the integer on both (minor units).
  enum class Binding { Auto, Decimal, Scaled } binding = Binding::Auto;
  bool required = true;  ///< false: a missing or null value binds NULL
  SinkKey where;
};

/// One statement of a route, written with named parameters (`$amount`), run with
/// positional ones (`$1`): values are always bound, never spliced into the text.
struct SqlStatement {
  std::string text;                 ///< as written in the file
  std::string sql;                  ///< `$name` replaced by `$1`, `$2`, ...
  std::vector<std::size_t> params;  ///< route parameter of `$1`, `$2`, ... (indexes)
  SinkKey where;
};

/// A text with `{name}` placeholders for the route's parameters: what a call's URL,
/// header values and body are made of. How a value is inserted depends on where: percent-
/// encoded in a URL, refused with CR or LF in a header, JSON-encoded in a body.
struct Template {
  struct Part {
    std::string text;       ///< literal text, or empty for a parameter
    std::size_t param = 0;  ///< the route parameter inserted, when `text` is empty
    bool is_param = false;
  };
  std::vector<Part> parts;
  bool secret = false;  ///< it took a value from the environment (`${VAR}`): never shown
  /// The values it took from the environment, which messages (dead letters' reasons,
  /// logs, /readyz) show as `<redacted>`.
  std::vector<std::string> secrets;
};

/// The HTTP call of a route (`[routes.NAME.http]`), made through the concurrent, key-
/// ordered effect path (Consumer::on_effect) with the event id as its idempotency key.
struct HttpCall {
  std::string method = "POST";
  Template url;
  std::vector<std::pair<std::string, Template>> headers;
  bool body_is_event = true;  ///< send the event (its data) as it came; else `body`
  Template body;
  std::string content_type = "application/json";
  std::string idempotency_header = "Idempotency-Key";
  /// A JSON pointer whose value orders the calls (one at a time per value, in offset
  /// order); empty: the Kafka key.
  std::string ordering_key;
  double rate_limit = 0;  ///< calls per second started at most; 0: no limit
  SinkKey where;
};

/// One route: the events of one type on one topic and the effects each must have.
struct Route {
  std::string name;  ///< the table name under `routes`
  std::string topic;
  std::string event_type;  ///< `type`
  std::string schema;      ///< the JSON Schema file (absolute path), or empty
  std::vector<ParamSpec> params;
  std::vector<SqlStatement> sql;  ///< with an HTTP call: run after it, in the mark's transaction
  std::optional<HttpCall> http;
  SinkKey where;
};

/// How the events of one topic are read; routes sharing a topic must agree on it.
struct TopicFormat {
  EventFormat format = EventFormat::Json;
  std::string id_pointer = "/event_id";
  std::string type_pointer = "/event_type";
  UnknownTypePolicy unknown_type = UnknownTypePolicy::DeadLetter;
};

/// The `routes` table of one file.
struct SinkConfig {
  std::string file;
  std::vector<Route> routes;                  ///< in file order
  std::map<std::string, TopicFormat> topics;  ///< every topic a route reads

  /// The topics, sorted.
  [[nodiscard]] std::vector<std::string> topic_names() const;
  /// The routes and their effects as text, one line each, for `idem config check`.
  [[nodiscard]] std::string describe() const;
};

/// Reserves the file's `routes` table and `tests` array for these sinks in `schema`
/// (ConfigSchema::reserve_table): the loader leaves them to load_sink_config() and
/// load_route_tests().
void reserve_tables(ConfigSchema& schema);

/// Reads the `routes` table of the configuration file `document` (Config::document: the
/// loader's parse, not a second one). nullopt when the file has no such table (the
/// built-in handlers run then).
/// \throws ConfigError listing every problem, each naming the file and line, the key
///   and what is wrong: an unknown key, a bad pointer or source, an unknown type, a
///   statement with an undeclared or positional parameter, a schema that does not load.
/// `environment` gives the values of `${VAR}` in a call's URL and header values (secrets
/// such as an API token stay out of the file).
[[nodiscard]] std::optional<SinkConfig> load_sink_config(
    const ConfigDocument& document,
    const std::vector<std::pair<std::string, std::string>>& environment);
/// The same for a file of routes on its own (no other key of the file is checked).
/// \throws ConfigError also when the file cannot be read or parsed.
[[nodiscard]] std::optional<SinkConfig> load_sink_config(
    const std::string& file, const std::vector<std::pair<std::string, std::string>>& environment);

}  // namespace idem::sinks
