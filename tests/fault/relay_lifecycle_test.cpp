// The stop of `idem relay` and `idem consume` with what they depend on gone, as real
// processes: SIGTERM ends the process within its stop timeout (plus
// the second the CLI's watchdog allows for teardown), exits 1 and says what was not done
// and what happens to it. The broker is gone when its process was SIGKILLed; the
// database is gone when its server stops answering (every PostgreSQL process of a
// private cluster SIGSTOPped: connections stay open and nothing answers, which is what a
// network partition looks like and what no error path notices). Before the bound the
// relay waited for acknowledgements for relay.shutdown_timeout and then exited 0 as if
// everything had been published, and a relay or consumer stuck in a call to a frozen
// server never exited.
#include <gtest/gtest.h>
#include <signal.h>

#include <charconv>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "idem/store.hpp"
#include "support/cli_run.hpp"
#include "support/consumer_scenario.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/mock_group.hpp"
#include "support/process.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem {
namespace relay_lifecycle_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Progress = std::map<std::string, std::int64_t, std::less<>>;

constexpr std::string_view kStopTimeout = "3s";
// The bound a test asserts: the stop timeout plus the watchdog's second plus slack for
// a loaded 2-core machine. A hang is what it catches; before the fix it was minutes.
constexpr auto kBound = 3s + 1s + 2s;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// "progress published=1 batches=1 ... in_flight=0" -> {published: 1, ...}
Progress parse_progress(std::string_view line) {
  Progress out;
  std::size_t at = line.find(' ');
  while (at != std::string_view::npos) {
    const std::size_t start = at + 1;
    at = line.find(' ', start);
    const std::string_view field =
        line.substr(start, at == std::string_view::npos ? at : at - start);
    const std::size_t eq = field.find('=');
    if (eq == std::string_view::npos) continue;
    std::int64_t value = 0;
    std::from_chars(field.data() + eq + 1, field.data() + field.size(), value);
    out.emplace(std::string(field.substr(0, eq)), value);
  }
  return out;
}

// Reads the relay's progress lines until one satisfies `done`.
bool progress_until(test::ChildProcess& relay, const std::function<bool(const Progress&)>& done,
                    std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const auto line = test::read_line_starting_with(relay, "progress ", left);
    if (!line) return false;
    if (done(parse_progress(*line))) return true;
  }
  return false;
}

int run_cli(const std::vector<std::string>& args) {
  const test::CliResult r = test::run_to_completion(IDEM_CLI_PATH, args, {}, 120s);
  EXPECT_EQ(r.status, 0) << r.output;
  return r.status;
}

struct Stopped {
  std::optional<int> status;
  std::chrono::milliseconds took{0};
  std::string stderr_text;
};

// SIGTERM, then waits (60 s only detects a hang) and reads what the process said.
Stopped sigterm(test::ChildProcess& child, const std::string& stderr_path, std::string_view what) {
  const auto signalled = Clock::now();
  child.kill(SIGTERM);
  Stopped s;
  s.status = child.wait_for(60s);
  s.took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - signalled);
  if (!s.status) child.kill(SIGKILL);
  s.stderr_text = read_file(stderr_path);
  std::cout << fmt::format("{}: SIGTERM to exit {} ms (stop timeout {}), status {}\n", what,
                           s.took.count(), kStopTimeout, s.status ? *s.status : -999);
  return s;
}

std::vector<std::string> relay_args(const std::string& db, const std::string& bootstrap) {
  return {"relay",
          "--db",
          db,
          "--brokers",
          bootstrap,
          "--stop-timeout",
          std::string(kStopTimeout),
          "--progress-interval",
          "100",
          "--kafka",
          "log_level=3"};
}

std::string scratch_file(std::string_view prefix) {
  return (test::scratch_dir() / test::unique_name(prefix)).string();
}

// The broker dies while rows are on their way: they are produced and never acknowledged
// (the relay sets no message timeout, so librdkafka would wait for ever).
TEST(RelayLifecycle, SigtermWithTheBrokerGoneEndsWithinTheStopTimeoutAndSaysWhy) {
  IDEM_REQUIRE_CLI();
  const std::string topic = test::unique_name("relay-stop");
  auto broker = test::ChildProcess::spawn(IDEM_CLI_PATH,
                                          {"dev-broker", "--no-stdin", "--topic", topic + ":3"});
  const std::string bootstrap = broker.read_line(30s).value_or("");
  ASSERT_FALSE(bootstrap.empty());
  const std::string db = test::fresh_sqlite_url();
  ASSERT_EQ(
      run_cli({"orders", "create", "--db", db, "--count", "50", "--topic", topic, "--migrate"}), 0);
  const std::string stderr_path = scratch_file("relay-stderr");
  auto relay = test::ChildProcess::spawn(IDEM_CLI_PATH, relay_args(db, bootstrap), {}, stderr_path);
  ASSERT_TRUE(progress_until(
      relay, [](const Progress& p) { return p.at("published") == 50; }, 60s))
      << read_file(stderr_path);

  broker.kill(SIGKILL);
  ASSERT_EQ(broker.wait(30s), -SIGKILL);
  ASSERT_EQ(run_cli({"orders", "create", "--db", db, "--count", "50", "--topic", topic}), 0);
  ASSERT_TRUE(progress_until(
      relay, [](const Progress& p) { return p.at("in_flight") > 0; }, 60s))
      << "the new rows were never produced. " << read_file(stderr_path);

  const Stopped s = sigterm(relay, stderr_path, "relay, broker gone");
  ASSERT_TRUE(s.status.has_value()) << "idem relay still running 60 s after SIGTERM";
  EXPECT_LE(s.took, kBound);
  EXPECT_EQ(*s.status, 1) << s.stderr_text;
  EXPECT_NE(s.stderr_text.find("rows produced but not acknowledged by the broker within 3s"),
            std::string::npos)
      << s.stderr_text;
  EXPECT_NE(s.stderr_text.find("sent again by the next relay"), std::string::npos) << s.stderr_text;
  EXPECT_NE(s.stderr_text.find("at-least-once publication"), std::string::npos) << s.stderr_text;
}

std::optional<std::string> postgres_bin() {
  auto bin = test::PrivatePostgres::find_bin_dir();
  if (!bin) test::skip_or_fail("no PostgreSQL server binaries (initdb, pg_ctl) are installed");
  return bin;
}

// Puts a process's thread inside a call to the database that does not return: the test
// takes a lock on `table` that the process's next write needs, waits until the server
// shows one of its sessions waiting for it, then freezes the server. The lock makes the
// moment observable; the freeze makes the server not answer anything any more.
class FrozenInACall {
 public:
  FrozenInACall(test::PrivatePostgres& pg, const std::string& table) : pg_(pg) {
    locker_ = open_store(pg.url());
    lock_ = locker_->begin();
    static_cast<void>(lock_->execute("LOCK TABLE " + table + " IN EXCLUSIVE MODE"));
    observer_ = open_store(pg.url());
  }
  FrozenInACall(const FrozenInACall&) = delete;
  FrozenInACall& operator=(const FrozenInACall&) = delete;
  ~FrozenInACall() {
    if (frozen_) pg_.thaw();
    try {
      lock_->rollback();
    } catch (...) {
    }
  }

  // True once another session waits for the lock (then the server is frozen).
  bool freeze_once_waiting(std::chrono::milliseconds timeout) {
    const bool waiting = test::eventually(
        [&] {
          return test::TransactionalReader::read_scalar(
                     *observer_,
                     "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND "
                     "pid <> pg_backend_pid()") > 0;
        },
        timeout, 20ms);
    if (waiting) {
      pg_.freeze();
      frozen_ = true;
    }
    return waiting;
  }

 private:
  test::PrivatePostgres& pg_;
  std::unique_ptr<Store> locker_;
  std::unique_ptr<Transaction> lock_;
  std::unique_ptr<Store> observer_;
  bool frozen_ = false;
};

// The database stops answering while rows are in flight: the relay's claim or mark (on
// its claim and mark threads) or its own thread's query never returns. Whichever it
// is, the process ends within the bound, non-zero, saying that the rows not marked are
// sent again.
TEST(RelayLifecycle, SigtermWithTheDatabaseFrozenEndsWithinTheStopTimeoutAndSaysWhy) {
  IDEM_REQUIRE_CLI();
  const auto bin = postgres_bin();
  if (!bin) return;
  test::PrivatePostgres pg(*bin);  // its own: freezing the shared server would stall others
  const std::string topic = test::unique_name("relay-dbstop");
  test::DevBrokerProcess broker(IDEM_CLI_PATH);
  broker.create_topic(topic, 3);
  ASSERT_EQ(run_cli({"orders", "create", "--db", pg.url(), "--count", "50", "--topic", topic,
                     "--migrate"}),
            0);
  const std::string stderr_path = scratch_file("relay-stderr");
  auto relay = test::ChildProcess::spawn(IDEM_CLI_PATH, relay_args(pg.url(), broker.bootstrap()),
                                         {}, stderr_path);
  ASSERT_TRUE(progress_until(
      relay, [](const Progress& p) { return p.at("published") == 50; }, 60s))
      << read_file(stderr_path);
  // Acknowledgements a second late, so the next rows are still in flight when the test
  // takes the lock; their marks then wait for it (and a claim would too).
  ASSERT_EQ(broker.control("rtt 1 1000"), "ok");
  ASSERT_EQ(run_cli({"orders", "create", "--db", pg.url(), "--count", "50", "--topic", topic}), 0);
  ASSERT_TRUE(progress_until(
      relay, [](const Progress& p) { return p.at("in_flight") > 0; }, 60s))
      << read_file(stderr_path);
  FrozenInACall frozen(pg, "idem_outbox");
  ASSERT_TRUE(frozen.freeze_once_waiting(60s)) << read_file(stderr_path);

  const Stopped s = sigterm(relay, stderr_path, "relay, database frozen");
  ASSERT_TRUE(s.status.has_value()) << "idem relay still running 60 s after SIGTERM";
  EXPECT_LE(s.took, kBound);
  EXPECT_EQ(*s.status, 1) << s.stderr_text;
  EXPECT_NE(s.stderr_text.find("relay stop"), std::string::npos) << s.stderr_text;
  EXPECT_NE(s.stderr_text.find("sent again by the next relay"), std::string::npos) << s.stderr_text;
}

// The consumer with its database frozen while its thread is inside a batch's
// transaction: the bound still holds, and it says the batch's events are redelivered.
TEST(ConsumerLifecycle, SigtermWithTheDatabaseFrozenEndsWithinTheStopTimeoutAndSaysWhy) {
  IDEM_REQUIRE_CLI();
  const auto bin = postgres_bin();
  if (!bin) return;
  test::PrivatePostgres pg(*bin);
  const std::string topic = test::unique_name("consume-dbstop");
  const std::string group = test::unique_name("consume-dbstop");
  test::DevBrokerProcess broker(IDEM_CLI_PATH);
  broker.create_topic(topic, 1);
  static_cast<void>(test::produce_order_events(broker.bootstrap(), topic, 20));
  const std::string stderr_path = scratch_file("consume-stderr");
  auto consumer = test::ChildProcess::spawn(
      IDEM_CLI_PATH,
      test::with_mock_group({"consume", "--db", pg.url(), "--brokers", broker.bootstrap(),
                             "--topic", topic, "--group", group, "--handler", "count", "--batch",
                             "10", "--stop-timeout", std::string(kStopTimeout)}),
      {}, stderr_path);
  ASSERT_TRUE(test::read_line_starting_with(consumer, "consuming ", 30s));
  ASSERT_TRUE(
      test::eventually([&] { return test::effect_rows(pg.url(), group) == 20; }, 60s, 50ms));
  FrozenInACall frozen(pg, "effect_log");
  static_cast<void>(test::produce_order_events(broker.bootstrap(), topic, 20));
  ASSERT_TRUE(frozen.freeze_once_waiting(60s)) << read_file(stderr_path);

  const Stopped s = sigterm(consumer, stderr_path, "consumer, database frozen");
  ASSERT_TRUE(s.status.has_value()) << "idem consume still running 60 s after SIGTERM";
  EXPECT_LE(s.took, kBound);
  EXPECT_EQ(*s.status, 1) << s.stderr_text;
  EXPECT_NE(s.stderr_text.find("consumer stop not finished within 3s"), std::string::npos)
      << s.stderr_text;
  EXPECT_NE(s.stderr_text.find("redelivered and deduplicated"), std::string::npos) << s.stderr_text;
}

}  // namespace relay_lifecycle_test
}  // namespace idem
