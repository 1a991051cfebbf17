#pragma once
/// \file
/// Tests written in the configuration file itself (the `[[tests]]` array, after Vector's
/// `vector test`): sample events with the outcome each must have, the rows the routes'
/// statements must leave and the calls they must make. `idem config test` runs them in a
/// transaction that is rolled back, on the configured store or a throwaway one, with every
/// call sent to a stub endpoint on loopback instead of its real URL, so a route can be
/// checked before it touches production (docs/configured-sinks.md, "Testing routes").
///
///     [[tests]]
///     name = "a payment raises the balance"
///     setup = ["INSERT INTO account (id, balance) VALUES ('acct-1', 0)"]
///     [[tests.events]]
///     json = { event_id = "0190b5d2-...", account = "acct-1", amount = "12.30", ... }
///     [[tests.expect_rows]]
///     query = "SELECT balance FROM account WHERE id = 'acct-1'"
///     rows = [["12.30"]]

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "idem/sinks/configured_sinks.hpp"
#include "idem/sinks/sink_config.hpp"
#include "idem/store.hpp"

namespace idem::sinks {

/// What must become of one sample event, as the consumer would decide it.
enum class TestOutcome {
  Applied,     ///< its route's call (if any) succeeded and its statements ran
  Duplicate,   ///< an earlier event of the test had the same id: nothing ran
  Skipped,     ///< no route for its type, and the topic skips such events
  DeadLetter,  ///< it would go to the DLQ (`reason`: the error class)
  Retry,       ///< it would be retried (a 409, 429 or 5xx answer, the store busy)
  Paused,      ///< its route would pause (401, 403 or 404 with no success before)
  Stopped,     ///< its statement is refused for good: the consumer would stop
};

[[nodiscard]] std::string_view to_string(TestOutcome outcome) noexcept;

/// The stub endpoint's answer to one event's call (`respond = { ... }`).
struct StubAnswer {
  int status = 200;
  std::string body = "{}";
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
};

/// One sample event (`[[tests.events]]`): a Kafka record as a producer would send it.
struct TestEvent {
  std::string topic;  ///< default: the only topic the routes read
  std::string key;
  std::vector<std::pair<std::string, std::string>> headers;  ///< e.g. CloudEvents ce_*
  std::string value;  ///< the record value (`value`, or `json` written as JSON)
  TestOutcome expect = TestOutcome::Applied;
  std::string reason;   ///< with DeadLetter: the error class it must carry (exact), if set
  std::string message;  ///< text the reason's message must contain, if set
  StubAnswer respond;   ///< what the stub answers this event's call
  SinkKey where;
};

/// Rows a query must return after the test's events (`[[tests.expect_rows]]`), in the
/// same transaction. A cell matches its column's text as the database gives it (numeric
/// `12.30`, an integer `1230`, a boolean `t`/`true`/`1`), or NULL when written `"NULL"`.
struct ExpectedRows {
  std::string query;
  std::vector<std::vector<std::string>> rows;
  SinkKey where;
};

/// One call the stub must have received (`[[tests.expect_calls]]`), in order.
struct ExpectedCall {
  std::string method;                                        ///< if set
  std::string path;                                          ///< path and query, if set
  std::vector<std::pair<std::string, std::string>> headers;  ///< each present with this value
  std::optional<std::string> body;  ///< compared as JSON when both sides are JSON
  SinkKey where;
};

/// One test (`[[tests]]`).
struct RouteTest {
  std::string name;
  std::vector<std::string> setup;  ///< statements run first, in the test's transaction
  std::vector<TestEvent> events;
  std::vector<ExpectedRows> expect_rows;
  /// Set when the test declares `expect_calls` (even empty): the calls must match in
  /// number and order.
  std::optional<std::vector<ExpectedCall>> expect_calls;
  SinkKey where;
};

/// Reads the `[[tests]]` array of the configuration file `document` (Config::document;
/// empty when it has none), checking each event's topic against `routes`.
/// \throws ConfigError listing every problem with its file, line and key.
[[nodiscard]] std::vector<RouteTest> load_route_tests(const ConfigDocument& document,
                                                      const SinkConfig& routes);

/// What one test gave.
struct RouteTestReport {
  std::string name;
  std::vector<std::string> failures;  ///< empty: passed
  [[nodiscard]] bool passed() const noexcept { return failures.empty(); }
};

/// Runs route tests on `store`: each in one transaction that is rolled back (a PostgreSQL
/// sequence still advances), events in order (an id seen earlier in the test is a
/// duplicate, as the dedup mark would make it), every call of a route sent to a stub
/// HTTP endpoint on 127.0.0.1 (the URL's path and query kept, its scheme and host
/// replaced), with one attempt and the route's own answer handling.
class RouteTester {
 public:
  /// `sinks` and `store` must outlive the tester. `group` is the `$consumer_group` value.
  /// \throws Error when the stub endpoint cannot listen.
  RouteTester(ConfiguredSinks& sinks, Store& store, std::string group);
  ~RouteTester();
  RouteTester(const RouteTester&) = delete;
  RouteTester& operator=(const RouteTester&) = delete;

  /// The stub endpoint's base URL (`http://127.0.0.1:PORT`).
  [[nodiscard]] std::string stub_url() const;

  /// Runs `test`; never commits anything. \throws Error when the store cannot be used.
  [[nodiscard]] RouteTestReport run(const RouteTest& test);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idem::sinks
