// load_route_tests(): the `[[tests]]` array of idem's TOML file, read from the loader's
// parse of it (ConfigDocument) as load_sink_config() reads `routes`, every problem
// reported with its file, line and key.
#include <array>
#include <fstream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "idem/config_document.hpp"
#include "idem/sinks/route_tests.hpp"

namespace idem::sinks {

namespace {

constexpr std::string_view kTests = "tests";

constexpr std::array<std::pair<std::string_view, TestOutcome>, 7> kOutcomes = {{
    {"applied", TestOutcome::Applied},
    {"duplicate", TestOutcome::Duplicate},
    {"skipped", TestOutcome::Skipped},
    {"dead_letter", TestOutcome::DeadLetter},
    {"retry", TestOutcome::Retry},
    {"paused", TestOutcome::Paused},
    {"stopped", TestOutcome::Stopped},
}};

struct Reader {
  std::string file;
  std::vector<ConfigProblem> problems;

  [[nodiscard]] SinkKey at(const std::string& key, const toml::node& node) const {
    return {key, {ConfigLayer::File, fmt::format("{}:{}", file, node.source().begin.line)}};
  }
  void add(const std::string& key, const toml::node& node, std::string message) {
    SinkKey where = at(key, node);
    problems.push_back({std::move(where.key), std::move(where.origin), std::move(message)});
  }
  std::optional<std::string> string(const std::string& key, const toml::node& node) {
    if (const auto* s = node.as_string()) return s->get();
    add(key, node, "expected a string");
    return std::nullopt;
  }
  /// A table of names to strings (headers).
  std::vector<std::pair<std::string, std::string>> pairs(const std::string& key,
                                                         const toml::node& node) {
    std::vector<std::pair<std::string, std::string>> out;
    const auto* table = node.as_table();
    if (table == nullptr) {
      add(key, node, "expected a table of names and strings");
      return out;
    }
    for (const auto& [name, value] : *table) {
      if (auto text = string(fmt::format("{}.{}", key, name.str()), value))
        out.emplace_back(std::string(name.str()), std::move(*text));
    }
    return out;
  }
  std::vector<std::string> strings(const std::string& key, const toml::node& node) {
    std::vector<std::string> out;
    const auto* list = node.as_array();
    if (list == nullptr) {
      if (auto one = string(key, node)) out.push_back(std::move(*one));
      return out;
    }
    for (std::size_t i = 0; i < list->size(); ++i) {
      if (auto text = string(fmt::format("{}[{}]", key, i), *list->get(i)))
        out.push_back(std::move(*text));
    }
    return out;
  }
  /// A list of tables (`[[tests.events]]`), each handed to `each` with its key.
  template <class Each>
  void tables(const std::string& key, const toml::node& node, Each each) {
    const auto* list = node.as_array();
    if (list == nullptr) {
      add(key, node, "expected an array of tables ([[" + key + "]])");
      return;
    }
    for (std::size_t i = 0; i < list->size(); ++i) {
      const std::string sub = fmt::format("{}[{}]", key, i);
      if (const auto* table = list->get(i)->as_table()) {
        each(sub, *table);
      } else {
        add(sub, *list->get(i), "expected a table");
      }
    }
  }
};

// A TOML table written as the JSON a producer would send (`json = { ... }`).
std::string as_json(const toml::table& table) {
  std::ostringstream out;
  out << toml::json_formatter(table, toml::format_flags::none);
  return out.str();
}

StubAnswer read_answer(Reader& r, const std::string& key, const toml::table& table) {
  StubAnswer answer;
  for (const auto& [k, value] : table) {
    const std::string sub = fmt::format("{}.{}", key, k.str());
    if (k == "status") {
      const auto* n = value.as_integer();
      if (n == nullptr || n->get() < 100 || n->get() > 599) {
        r.add(sub, value, "expected an HTTP status from 100 to 599");
      } else {
        answer.status = static_cast<int>(n->get());
      }
    } else if (k == "body") {
      if (auto text = r.string(sub, value)) answer.body = std::move(*text);
    } else if (k == "content_type") {
      if (auto text = r.string(sub, value)) answer.content_type = std::move(*text);
    } else if (k == "headers") {
      answer.headers = r.pairs(sub, value);
    } else {
      r.add(sub, value, "unknown key (status, body, content_type, headers)");
    }
  }
  return answer;
}

TestEvent read_event(Reader& r, const std::string& key, const toml::table& table,
                     const SinkConfig& routes) {
  TestEvent event;
  event.where = r.at(key, table);
  bool has_value = false;
  for (const auto& [k, value] : table) {
    const std::string sub = fmt::format("{}.{}", key, k.str());
    if (k == "topic") {
      if (auto text = r.string(sub, value)) event.topic = std::move(*text);
    } else if (k == "key") {
      if (auto text = r.string(sub, value)) event.key = std::move(*text);
    } else if (k == "headers") {
      event.headers = r.pairs(sub, value);
    } else if (k == "value" || k == "json") {
      if (has_value) r.add(sub, value, "give the record value once: `value` or `json`");
      has_value = true;
      if (k == "value") {
        if (auto text = r.string(sub, value)) event.value = std::move(*text);
      } else if (const auto* t = value.as_table()) {
        event.value = as_json(*t);
      } else {
        r.add(sub, value, "expected a table, written as the event's JSON object");
      }
    } else if (k == "expect") {
      const auto text = r.string(sub, value);
      if (!text) continue;
      bool known = false;
      for (const auto& [name, outcome] : kOutcomes) {
        if (name != *text) continue;
        event.expect = outcome;
        known = true;
      }
      if (!known)
        r.add(sub, value,
              fmt::format("unknown outcome '{}': applied, duplicate, skipped, dead_letter, retry, "
                          "paused or stopped",
                          *text));
    } else if (k == "reason") {
      if (auto text = r.string(sub, value)) event.reason = std::move(*text);
    } else if (k == "message") {
      if (auto text = r.string(sub, value)) event.message = std::move(*text);
    } else if (k == "respond") {
      if (const auto* t = value.as_table()) {
        event.respond = read_answer(r, sub, *t);
      } else {
        r.add(sub, value, "expected a table { status = 200, body = '...' }");
      }
    } else {
      r.add(sub, value,
            "unknown key (topic, key, headers, value, json, expect, reason, message, respond)");
    }
  }
  if (!has_value) r.add(key, table, "missing the record value: `value` (text) or `json` (a table)");
  const std::vector<std::string> topics = routes.topic_names();
  if (event.topic.empty() && topics.size() == 1) event.topic = topics.front();
  if (event.topic.empty()) {
    r.add(key, table,
          fmt::format("missing `topic`: the routes read several ({})", fmt::join(topics, ", ")));
  } else if (!routes.topics.contains(event.topic)) {
    r.add(key, table,
          fmt::format("topic '{}' is read by no route ({})", event.topic, fmt::join(topics, ", ")));
  }
  return event;
}

ExpectedRows read_rows(Reader& r, const std::string& key, const toml::table& table) {
  ExpectedRows rows;
  rows.where = r.at(key, table);
  bool has_rows = false;
  for (const auto& [k, value] : table) {
    const std::string sub = fmt::format("{}.{}", key, k.str());
    if (k == "query") {
      if (auto text = r.string(sub, value)) rows.query = std::move(*text);
    } else if (k == "rows") {
      has_rows = true;
      const auto* list = value.as_array();
      if (list == nullptr) {
        r.add(sub, value, "expected an array of rows, each an array of cells: [[\"12.30\", 1]]");
        continue;
      }
      for (std::size_t i = 0; i < list->size(); ++i) {
        const auto* row = list->get(i)->as_array();
        if (row == nullptr) {
          r.add(fmt::format("{}[{}]", sub, i), *list->get(i), "expected an array of cells");
          continue;
        }
        std::vector<std::string> cells;
        for (std::size_t c = 0; c < row->size(); ++c) {
          const toml::node& cell = *row->get(c);
          if (const auto* s = cell.as_string()) {
            cells.push_back(s->get());
          } else if (const auto* n = cell.as_integer()) {
            cells.push_back(std::to_string(n->get()));
          } else if (const auto* b = cell.as_boolean()) {
            cells.emplace_back(b->get() ? "true" : "false");
          } else {
            r.add(fmt::format("{}[{}][{}]", sub, i, c), cell,
                  "expected a string, an integer or a boolean (write decimals as strings: "
                  "\"12.30\")");
          }
        }
        rows.rows.push_back(std::move(cells));
      }
    } else {
      r.add(sub, value, "unknown key (query, rows)");
    }
  }
  if (rows.query.empty()) r.add(key, table, "missing `query`");
  if (!has_rows) r.add(key, table, "missing `rows` (`rows = []` for none)");
  return rows;
}

ExpectedCall read_call(Reader& r, const std::string& key, const toml::table& table) {
  ExpectedCall call;
  call.where = r.at(key, table);
  for (const auto& [k, value] : table) {
    const std::string sub = fmt::format("{}.{}", key, k.str());
    if (k == "method") {
      if (auto text = r.string(sub, value)) call.method = std::move(*text);
    } else if (k == "path") {
      if (auto text = r.string(sub, value)) call.path = std::move(*text);
    } else if (k == "headers") {
      call.headers = r.pairs(sub, value);
    } else if (k == "body") {
      if (auto text = r.string(sub, value)) call.body = std::move(*text);
    } else if (k == "json") {
      if (const auto* t = value.as_table()) {
        call.body = as_json(*t);
      } else {
        r.add(sub, value, "expected a table, written as the body's JSON object");
      }
    } else {
      r.add(sub, value, "unknown key (method, path, headers, body, json)");
    }
  }
  return call;
}

RouteTest read_test(Reader& r, const std::string& key, const toml::table& table,
                    const SinkConfig& routes) {
  RouteTest test;
  test.where = r.at(key, table);
  for (const auto& [k, value] : table) {
    const std::string sub = fmt::format("{}.{}", key, k.str());
    if (k == "name") {
      if (auto text = r.string(sub, value)) test.name = std::move(*text);
    } else if (k == "setup") {
      test.setup = r.strings(sub, value);
    } else if (k == "events") {
      r.tables(sub, value, [&](const std::string& at, const toml::table& t) {
        test.events.push_back(read_event(r, at, t, routes));
      });
    } else if (k == "expect_rows") {
      r.tables(sub, value, [&](const std::string& at, const toml::table& t) {
        test.expect_rows.push_back(read_rows(r, at, t));
      });
    } else if (k == "expect_calls") {
      test.expect_calls.emplace();
      if (const auto* list = value.as_array(); list != nullptr && list->empty()) continue;
      r.tables(sub, value, [&](const std::string& at, const toml::table& t) {
        test.expect_calls->push_back(read_call(r, at, t));
      });
    } else {
      r.add(sub, value, "unknown key (name, setup, events, expect_rows, expect_calls)");
    }
  }
  if (test.name.empty()) test.name = key;
  if (test.events.empty()) r.add(key, table, "no events ([[tests.events]])");
  return test;
}

}  // namespace

std::string_view to_string(TestOutcome outcome) noexcept {
  for (const auto& [name, o] : kOutcomes) {
    if (o == outcome) return name;
  }
  return "?";
}

std::vector<RouteTest> load_route_tests(const ConfigDocument& document, const SinkConfig& routes) {
  Reader r;
  r.file = document.file();
  std::vector<RouteTest> tests;
  const toml::table& doc = document.table();
  const toml::node* node = doc.get(kTests);
  if (node == nullptr) return tests;
  r.tables(std::string(kTests), *node, [&](const std::string& at, const toml::table& t) {
    tests.push_back(read_test(r, at, t, routes));
  });
  if (!r.problems.empty()) throw ConfigError(std::move(r.problems));
  return tests;
}

}  // namespace idem::sinks
