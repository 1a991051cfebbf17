// RouteTester: the tests of a configuration file (`idem config test`) run through the
// parts `idem consume` runs (the topic's EventReader, the route's RouteCalls with
// http::ResponsePolicy, apply_statements), on the configured store in a transaction that
// is rolled back, with calls answered by a stub endpoint: what a test shows is what the
// consumer would do with the same records.
#include "idem/sinks/route_tests.hpp"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "idem/error.hpp"
#include "sinks/configured_sinks_impl.hpp"

namespace idem::sinks {

namespace {

using detail::CallAnswer;
using detail::SinkEvent;

constexpr auto kCallDeadline = std::chrono::seconds(30);

/// A request the stub received.
struct ReceivedCall {
  std::string method;
  std::string path;  // with the query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

/// Where the test's one call completes: the consumer's CompletionPort, waited on.
class CallWaiter final : public idem::detail::CompletionPort {
 public:
  void complete(std::uint64_t /*ticket*/, Outcome outcome, std::shared_ptr<void> result,
                std::string reason) noexcept override {
    std::lock_guard lock(mutex_);
    outcome_ = outcome;
    result_ = std::move(result);
    reason_ = std::move(reason);
    done_ = true;
    completed_.notify_all();
  }
  /// False when the call did not complete in time.
  bool wait() {
    std::unique_lock lock(mutex_);
    return completed_.wait_for(lock, kCallDeadline, [&] { return done_; });
  }
  [[nodiscard]] Outcome outcome() const { return outcome_; }
  [[nodiscard]] const CallAnswer* answer() const {
    return static_cast<const CallAnswer*>(result_.get());
  }
  [[nodiscard]] const std::string& reason() const { return reason_; }

 private:
  std::mutex mutex_;
  std::condition_variable completed_;
  bool done_ = false;
  Outcome outcome_ = Outcome::Retry;
  std::shared_ptr<void> result_;
  std::string reason_;
};

// `https://host:port/a/b?c` -> `/a/b?c`.
std::string path_of(const std::string& url) {
  const std::size_t scheme = url.find("://");
  const std::size_t slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  return slash == std::string::npos ? "/" : url.substr(slash);
}

bool same_text_ci(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  });
}

bool same_body(const std::string& expected, const std::string& got) {
  const auto a = nlohmann::json::parse(expected, nullptr, false);
  const auto b = nlohmann::json::parse(got, nullptr, false);
  if (!a.is_discarded() && !b.is_discarded()) return a == b;
  return expected == got;
}

// A cell as the database gave it against the file's text for it.
bool same_cell(const std::string& expected, const std::optional<std::string>& got) {
  if (!got) return expected == "NULL";
  if (*got == expected) return true;
  if (expected == "true") return *got == "t" || *got == "1";
  if (expected == "false") return *got == "f" || *got == "0";
  return false;
}

std::string shown_rows(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::string> out;
  out.reserve(rows.size());
  for (const auto& row : rows) out.push_back(fmt::format("[{}]", fmt::join(row, ", ")));
  return fmt::format("[{}]", fmt::join(out, ", "));
}

/// What became of one event.
struct Decided {
  TestOutcome outcome = TestOutcome::Applied;
  std::string reason;  // error class
  std::string message;
  CallAnswer answer{};  // of a call that succeeded
};

}  // namespace

struct RouteTester::Impl {
  ConfiguredSinks& sinks;
  Store& store;
  std::string group;
  SinkObservers no_observers;
  http::AsyncClient client;
  httplib::Server stub;
  int port = 0;
  std::thread serving;

  std::mutex mutex;        // guards what the stub's thread reads and writes
  StubAnswer stub_answer;  // what the stub answers the next call
  std::vector<ReceivedCall> received;

  Impl(ConfiguredSinks& s, Store& st, std::string g)
      : sinks(s), store(st), group(std::move(g)), client(client_config()) {}

  static http::ClientConfig client_config() {
    http::ClientConfig config;
    config.max_attempts = 1;  // a test sees each answer's meaning, not the retries it starts
    config.breaker.failures_to_open = 0;  // nor an outage's wait: a stub that is down fails
    return config;
  }

  Decided call(SinkEvent& event, detail::RouteCalls& calls, const TestEvent& sample);
  Decided apply(const SinkEvent& event, const CallAnswer* answer, Transaction& tx);
  Decided decide(const TestEvent& sample, std::size_t offset, std::set<std::string>& seen,
                 std::map<const detail::CompiledRoute*, std::unique_ptr<detail::RouteCalls>>& calls,
                 Transaction& tx);
};

RouteTester::RouteTester(ConfiguredSinks& sinks, Store& store, std::string group)
    : impl_(std::make_unique<Impl>(sinks, store, std::move(group))) {
  Impl& m = *impl_;
  const auto handle = [&m](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(m.mutex);
    ReceivedCall call{req.method, req.target, {}, req.body};
    for (const auto& [name, value] : req.headers) call.headers.emplace_back(name, value);
    m.received.push_back(std::move(call));
    res.status = m.stub_answer.status;
    for (const auto& [name, value] : m.stub_answer.headers) res.set_header(name, value);
    res.set_content(m.stub_answer.body, m.stub_answer.content_type);
  };
  m.stub.Get(".*", handle);
  m.stub.Post(".*", handle);
  m.stub.Put(".*", handle);
  m.stub.Patch(".*", handle);
  m.stub.Delete(".*", handle);
  m.port = m.stub.bind_to_any_port("127.0.0.1");
  if (m.port <= 0)
    throw Error(ErrorCode::Connection, ErrorSource::Http,
                "idem config test: the stub endpoint cannot listen on 127.0.0.1");
  // One request per connection: stop() then never waits out a kept-alive connection.
  m.stub.set_keep_alive_max_count(1);
  m.serving = std::thread([&m] { m.stub.listen_after_bind(); });
  // stop() before the loop runs would not end it (cpp-httplib stops a running server
  // only): wait for it, briefly.
  while (!m.stub.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

RouteTester::~RouteTester() {
  impl_->stub.stop();
  impl_->serving.join();
}

std::string RouteTester::stub_url() const {
  return fmt::format("http://127.0.0.1:{}", impl_->port);
}

Decided RouteTester::Impl::call(SinkEvent& event, detail::RouteCalls& calls,
                                const TestEvent& sample) {
  {
    std::lock_guard lock(mutex);
    stub_answer = sample.respond;
  }
  event.request->url = fmt::format("http://127.0.0.1:{}{}", port, path_of(event.request->url));
  auto waiter = std::make_shared<CallWaiter>();
  calls.start(client, event,
              CallCompletion<CallAnswer>(std::make_shared<idem::detail::CallTicket>(
                  waiter, std::uint64_t{0}, std::shared_ptr<const void>())));
  if (!waiter->wait()) return {TestOutcome::Retry, "test.no_answer", "the call did not end"};
  switch (waiter->outcome()) {
    case Outcome::Done: return {TestOutcome::Applied, {}, {}, *waiter->answer()};
    case Outcome::Retry:
      return {calls.paused_reason().empty() ? TestOutcome::Retry : TestOutcome::Paused,
              "handler.retry", waiter->reason()};
    case Outcome::DeadLetter:
      return {TestOutcome::DeadLetter, "handler.dead_letter", waiter->reason()};
  }
  return {};
}

Decided RouteTester::Impl::apply(const SinkEvent& event, const CallAnswer* answer,
                                 Transaction& tx) {
  // As the consumer's isolated pass: the event's statements in a savepoint of their own,
  // synced, so their failure is this event's.
  Savepoint sp(tx);
  try {
    (void)detail::apply_statements(event, answer, tx);
    tx.sync();
    sp.release();
    return {TestOutcome::Applied, {}, {}};
  } catch (const Error& e) {
    // What the consumer would do (idem::effect_error_outcome, by the error's scope).
    switch (idem::effect_error_outcome(e)) {
      case idem::StoreErrorOutcome::Stop: return {TestOutcome::Stopped, "stopped", e.what()};
      case idem::StoreErrorOutcome::Retry:
        return {TestOutcome::Retry, "handler.exception", e.what()};
      case idem::StoreErrorOutcome::DeadLetter:
        return {TestOutcome::DeadLetter, "handler.exception", e.what()};
    }
    return {TestOutcome::Stopped, "stopped", e.what()};
  } catch (const std::exception& e) {
    return {TestOutcome::DeadLetter, "handler.exception", e.what()};
  }
}

Decided RouteTester::Impl::decide(
    const TestEvent& sample, std::size_t offset, std::set<std::string>& seen,
    std::map<const detail::CompiledRoute*, std::unique_ptr<detail::RouteCalls>>& calls,
    Transaction& tx) {
  std::vector<RecordHeader> headers;
  for (const auto& [name, value] : sample.headers) headers.push_back({name, value});
  RecordInfo record;
  record.topic = sample.topic;
  record.offset = static_cast<std::int64_t>(offset);
  record.key = sample.key;
  record.headers = headers;
  record.payload = sample.value;
  record.consumer_group = group;
  Validated<SinkEvent> parsed = sinks.impl_->readers.at(sample.topic)->read(record, ParseLimits{});
  if (!parsed.ok())
    return {TestOutcome::DeadLetter, fmt::format("validation.{}", to_string(parsed.error().reason)),
            parsed.error().message};
  SinkEvent event = std::move(parsed).value();
  // The dedup mark: an id applied earlier in this test is a duplicate (dead letters are
  // unmarked, so a copy of one runs again, as in the consumer).
  const std::string id = event.id.to_string();
  if (seen.contains(id)) return {TestOutcome::Duplicate, {}, {}};
  if (event.route == nullptr) {
    seen.insert(id);
    return {TestOutcome::Skipped, {}, {}};
  }
  Decided called;
  if (event.request) {
    auto& route_calls = calls[event.route];
    if (!route_calls)
      route_calls = std::make_unique<detail::RouteCalls>(*event.route->config, sinks.impl_->backend,
                                                         no_observers);
    called = call(event, *route_calls, sample);
    if (called.outcome != TestOutcome::Applied) return called;
  }
  Decided applied = apply(event, event.request ? &called.answer : nullptr, tx);
  if (applied.outcome == TestOutcome::Applied) seen.insert(id);
  return applied;
}

RouteTestReport RouteTester::run(const RouteTest& test) {
  Impl& m = *impl_;
  RouteTestReport report;
  report.name = test.name;
  {
    std::lock_guard lock(m.mutex);
    m.received.clear();
  }
  const auto tx = m.store.begin();
  for (std::size_t i = 0; i < test.setup.size(); ++i) {
    try {
      (void)tx->execute(test.setup[i]);
    } catch (const Error& e) {
      report.failures.push_back(fmt::format("{}.setup[{}]: {}", test.where.key, i, e.what()));
      return report;
    }
  }
  std::set<std::string> seen;
  std::map<const detail::CompiledRoute*, std::unique_ptr<detail::RouteCalls>> calls;
  for (std::size_t i = 0; i < test.events.size(); ++i) {
    const TestEvent& sample = test.events[i];
    const Decided got = m.decide(sample, i, seen, calls, *tx);
    const bool outcome_ok = got.outcome == sample.expect;
    const bool reason_ok = sample.reason.empty() || got.reason == sample.reason;
    const bool message_ok =
        sample.message.empty() || got.message.find(sample.message) != std::string::npos;
    if (outcome_ok && reason_ok && message_ok) continue;
    std::string expected(to_string(sample.expect));
    if (!sample.reason.empty()) expected += " (" + sample.reason + ")";
    if (!sample.message.empty()) expected += fmt::format(" saying '{}'", sample.message);
    std::string actual(to_string(got.outcome));
    if (!got.reason.empty()) actual += " (" + got.reason + ")";
    if (!got.message.empty()) actual += ": " + got.message;
    report.failures.push_back(fmt::format("{} ({}): expected {}, got {}", sample.where.key,
                                          sample.where.origin.where, expected, actual));
  }
  for (const ExpectedRows& rows : test.expect_rows) {
    std::vector<std::vector<std::string>> got;
    bool same = true;
    try {
      const Rows result = tx->execute(rows.query);
      same = result.size() == rows.rows.size();
      for (std::size_t r = 0; r < result.size(); ++r) {
        std::vector<std::string> row;
        for (std::size_t c = 0; c < result.columns(); ++c) {
          const auto& cell = result.cell(r, c);
          row.push_back(cell ? *cell : "NULL");
          if (same &&
              (rows.rows[r].size() != result.columns() || !same_cell(rows.rows[r][c], cell)))
            same = false;
        }
        got.push_back(std::move(row));
      }
    } catch (const Error& e) {
      report.failures.push_back(fmt::format("{} ({}): {}: the query failed: {}", rows.where.key,
                                            rows.where.origin.where, rows.query, e.what()));
      continue;
    }
    if (!same)
      report.failures.push_back(fmt::format("{} ({}): {}: expected {}, got {}", rows.where.key,
                                            rows.where.origin.where, rows.query,
                                            shown_rows(rows.rows), shown_rows(got)));
  }
  tx->rollback();
  if (!test.expect_calls) return report;
  std::vector<ReceivedCall> received;
  {
    std::lock_guard lock(m.mutex);
    received = m.received;
  }
  const auto& expected = *test.expect_calls;
  if (received.size() != expected.size())
    report.failures.push_back(fmt::format("{}.expect_calls: expected {} call(s), the stub got {}",
                                          test.where.key, expected.size(), received.size()));
  for (std::size_t i = 0; i < std::min(received.size(), expected.size()); ++i) {
    const ExpectedCall& want = expected[i];
    const ReceivedCall& got = received[i];
    const auto fail = [&](const std::string& what) {
      report.failures.push_back(
          fmt::format("{} ({}): {}", want.where.key, want.where.origin.where, what));
    };
    if (!want.method.empty() && want.method != got.method)
      fail(fmt::format("method: expected {}, got {}", want.method, got.method));
    if (!want.path.empty() && want.path != got.path)
      fail(fmt::format("path: expected {}, got {}", want.path, got.path));
    for (const auto& header : want.headers) {
      const std::string& name = header.first;  // not a structured binding: the lambda uses it
      const std::string& value = header.second;
      const auto h = std::find_if(got.headers.begin(), got.headers.end(),
                                  [&](const auto& kv) { return same_text_ci(kv.first, name); });
      if (h == got.headers.end()) {
        fail(fmt::format("header {}: missing", name));
      } else if (h->second != value) {
        fail(fmt::format("header {}: expected '{}', got '{}'", name, value, h->second));
      }
    }
    if (want.body && !same_body(*want.body, got.body))
      fail(fmt::format("body: expected {}, got {}", *want.body, got.body));
  }
  return report;
}

}  // namespace idem::sinks
