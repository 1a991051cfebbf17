// The web console in a real browser (Debian's headless Chromium through chromedriver),
// end to end with real processes: `idem dev-broker`, `idem consume` (count handler,
// SQLite store, admin server for throughput) and `idem console`. The test watches the
// lag table reach 0 as the consumer catches up, opens a dead letter whose payload and
// error carry <script> (shown as text, never run), does a dry run (nothing sent), then a
// replay with the token; the consumer applies the event exactly once (a second replay
// applies nothing) and both replays are in the audit list; the consumer, started with
// admin.console, serves the same pages on its admin port. Screenshots of each page go
// to IDEM_TEST_OUTPUT_DIR/console/ (two of them are docs/console-*.png).
#include <chrono>
#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "idem/store.hpp"
#include "support/cli_run.hpp"
#include "support/dead_letters.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/mock_group.hpp"
#include "support/process.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"
#include "support/webdriver.hpp"

namespace idem {
namespace console_browser_test {

using namespace std::chrono_literals;
using test::ChildProcess;

constexpr int kPartitions = 3;
constexpr int kEventsPerPartition = 100;

std::string after_prefix(const std::optional<std::string>& line, std::string_view prefix) {
  return line ? line->substr(prefix.size()) : std::string();
}

std::int64_t effects_of(Store& store, const std::string& group, const Uuid& event_id) {
  auto tx = store.begin_read();
  const Rows rows =
      tx->execute("SELECT count(*) FROM effect_log WHERE consumer_group = $1 AND event_id = $2",
                  group, event_id);
  tx->commit();
  return rows[0].int64(0);
}

// A JavaScript condition: the element matching `selector` exists and its text has `text`.
std::string has_text(const std::string& selector, const std::string& text) {
  return fmt::format(
      "const e = document.querySelector({}); return !!e && e.textContent.includes({});",
      nlohmann::json(selector).dump(), nlohmann::json(text).dump());
}

class ConsoleBrowserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    IDEM_REQUIRE_CLI();
    programs_ = test::find_browser();
    if (!programs_) {
      if (test::in_ci()) FAIL() << "chromium and chromium-driver are not installed, under CI=true";
      GTEST_SKIP()
          << "chromium / chromedriver not installed (scripts/install-deps.sh installs them)";
    }
    shots_ = std::filesystem::path(IDEM_TEST_OUTPUT_DIR) / "console";
    std::filesystem::create_directories(shots_);
  }

  void shot(test::WebDriver& browser, const std::string& name) {
    browser.screenshot((shots_ / (name + ".png")).string());
  }

  std::optional<test::BrowserPrograms> programs_;
  std::filesystem::path shots_;
};

TEST_F(ConsoleBrowserTest, LagReachesZeroADeadLetterIsShownAsTextAndReplayedExactlyOnce) {
  const std::string topic = "orders";
  const std::string dlq = topic + ".dlq";
  const std::string group = "console-it";
  const std::string token = "console-test-token";

  auto broker = ChildProcess::spawn(
      IDEM_CLI_PATH, {"dev-broker", "--no-stdin", "--topic",
                      fmt::format("{}:{}", topic, kPartitions), "--topic", dlq + ":1"});
  const std::string bootstrap = broker.read_line(30s).value_or("");
  ASSERT_FALSE(bootstrap.empty());
  const std::string db = test::fresh_sqlite_url();
  ASSERT_EQ(test::run_to_completion(IDEM_CLI_PATH, {"migrate", "--db", db, "--reference"}).status,
            0);

  // A backlog before the consumer starts, one malformed record carrying markup (the
  // consumer dead-letters it), and a letter from an earlier outage whose event no one applied.
  for (int p = 0; p < kPartitions; ++p)
    static_cast<void>(test::produce_order_events(bootstrap, topic, kEventsPerPartition, p));
  const OrderConfirmed lost = test::console_order(900'001);
  {
    test::KafkaTestProducer producer(bootstrap);
    producer.send(
        {topic,
         "evil",
         R"({"event_id":"<script>window.__xss=1</script>","note":"<img src=x onerror=\"window.__xss=1\">"})",
         {},
         0});
    producer.send(test::dead_letter_of(lost, dlq, topic, group, 7, "handler.dead_letter",
                                       "provider unavailable <script>window.__xss=2</script>"));
    producer.flush();
  }

  const std::string logs = (shots_ / "processes.log").string();
  auto consumer = ChildProcess::spawn(
      IDEM_CLI_PATH,
      test::with_mock_group({"consume", "--brokers", bootstrap, "--db", db, "--group", group,
                             "--topic", topic, "--set", "admin.listen=127.0.0.1:0", "--set",
                             "admin.console=true"}),
      {}, logs);
  const std::string admin_port =
      after_prefix(test::read_line_starting_with(consumer, "admin server on port ", 30s),
                   "admin server on port ");
  ASSERT_FALSE(admin_port.empty());

  auto console = ChildProcess::spawn(
      IDEM_CLI_PATH,
      {"console", "--brokers", bootstrap, "--db", db, "--listen", "127.0.0.1:0", "--refresh",
       "500ms", "--scrape", "127.0.0.1:" + admin_port, "--group", group},
      {{"IDEM_CONSOLE_TOKEN", token}}, logs);
  const auto line = test::read_line_starting_with(console, "console on ", 30s);
  ASSERT_TRUE(line);
  const std::string printed = line->substr(std::string_view("console on ").size());
  const std::string url = printed.substr(0, printed.find(' '));

  test::WebDriver browser(*programs_);
  browser.navigate(url + "#groups");

  // Lag: every partition of the topic listed, the group's total at 0 once caught up.
  const std::string card = fmt::format("[data-group=\"{}\"]", group);
  ASSERT_TRUE(browser.wait_until(
      fmt::format("return document.querySelectorAll('{} tr[data-topic=\"{}\"]').length === {};",
                  card, topic, kPartitions),
      60s))
      << browser.text("#status");
  ASSERT_TRUE(browser.wait_until(
      fmt::format(
          "const e = document.querySelector('{} .lag-total'); return !!e && e.dataset.lag === '0';",
          card),
      90s))
      << browser.text(card);
  EXPECT_TRUE(browser.wait_until(
      fmt::format(
          "return [...document.querySelectorAll('{} td.lag')].every(td => td.dataset.lag === '0');",
          card),
      10s));
  // Throughput comes from the consumer's /metrics: a rate is shown once two samples exist.
  EXPECT_TRUE(
      browser.wait_until(fmt::format("const e = document.querySelector('{} .rate-processed'); "
                                     "return !!e && e.textContent !== '–';",
                                     card),
                         30s));
  shot(browser, "groups");

  // Dead letters: both letters listed, the markup shown as text and never run.
  browser.navigate(url + "#dlq");
  browser.type("#operator", "ada");
  browser.type("#token", token);
  ASSERT_TRUE(browser.wait_until(
      "return document.querySelectorAll('#dlq-table tbody tr').length === 2;", 60s))
      << browser.text("#status");
  EXPECT_TRUE(browser.wait_until(has_text("#dlq-table", "<script>window.__xss=2</script>"), 5s));
  // The malformed record is a real dead letter of the consumer (offset 0 or 1 by arrival).
  const auto malformed_offset = browser.execute(
      "const rows = [...document.querySelectorAll('#dlq-table tbody tr')];"
      "const r = rows.find(r => r.textContent.includes('validation'));"
      "return r ? r.dataset.offset : null;");
  ASSERT_TRUE(malformed_offset.is_string()) << browser.text("#dlq-table");
  browser.click(fmt::format("#dlq-table tr[data-offset=\"{}\"] button.open",
                            malformed_offset.get<std::string>()));
  ASSERT_TRUE(browser.wait_until(has_text("#letter-payload", "<img src=x onerror"), 20s));
  EXPECT_TRUE(
      browser.wait_until(has_text("#letter-payload", "<script>window.__xss=1</script>"), 5s));
  EXPECT_EQ(browser.execute("return document.querySelectorAll('main script, main img').length;"),
            0);
  EXPECT_TRUE(browser.execute("return window.__xss === undefined;").get<bool>());

  const std::string other = malformed_offset.get<std::string>() == "0" ? "1" : "0";
  browser.click(fmt::format("#dlq-table tr[data-offset=\"{}\"] button.open", other));
  ASSERT_TRUE(browser.wait_until(has_text("#letter-payload", lost.event_id.to_string()), 20s));
  EXPECT_TRUE(
      browser.wait_until(has_text("#letter-message", "<script>window.__xss=2</script>"), 5s));
  EXPECT_TRUE(browser.execute("return document.getElementById('replay').disabled;").get<bool>())
      << "replay is offered only after a dry run";

  auto store = open_store(db);
  browser.click("#dry-run");
  ASSERT_TRUE(
      browser.wait_until(has_text("#dry-run-result", "would re-send 1 record to orders"), 30s))
      << browser.text("#dry-run-result");
  // The letter's end (payload, buttons, the dry run's answer) in view for the picture.
  browser.execute(
      "window.scrollTo(0, 0); document.getElementById('dry-run-result')"
      ".scrollIntoView({block: 'end'});");
  shot(browser, "dead-letters");
  EXPECT_EQ(effects_of(*store, group, lost.event_id), 0) << "a dry run sends nothing";

  const auto replay_once = [&] {
    ASSERT_TRUE(browser.wait_until("return !document.getElementById('replay').disabled;", 10s));
    browser.click("#replay");
    ASSERT_TRUE(browser.wait_until("return document.getElementById('confirm-dialog').open;", 10s));
    browser.click("#confirm-replay");
    ASSERT_TRUE(browser.wait_until(has_text("#replay-result", "Replayed to orders"), 30s))
        << browser.text("#replay-result");
  };
  replay_once();
  ASSERT_TRUE(
      test::eventually([&] { return effects_of(*store, group, lost.event_id) == 1; }, 60s, 100ms));

  // Again: the event keeps its id, so the consumer's dedup row makes it a no-op. Wait
  // until the consumer has committed past the second copy before counting.
  browser.click("#dry-run");
  ASSERT_TRUE(browser.wait_until(has_text("#dry-run-result", "would re-send"), 30s));
  replay_once();
  const auto ends = test::end_offsets(bootstrap, topic, kPartitions);
  ASSERT_TRUE(test::eventually(
      [&] { return test::committed_offsets(bootstrap, group, topic, kPartitions) == ends; }, 60s,
      200ms));
  EXPECT_EQ(effects_of(*store, group, lost.event_id), 1) << "the replayed event applied twice";

  // Audit: both replays, by ada, replayed.
  browser.navigate(url + "#audit");
  ASSERT_TRUE(
      browser.wait_until("return document.querySelectorAll('#audit-table tbody "
                         "tr[data-outcome=\"replayed\"]').length === 2;",
                         30s))
      << browser.text("#audit-table");
  EXPECT_TRUE(browser.wait_until(has_text("#audit-table", "ada"), 5s));
  EXPECT_TRUE(browser.wait_until(has_text("#audit-table", lost.event_id.to_string()), 5s));
  shot(browser, "audit");

  browser.navigate(url + "#dedup");
  ASSERT_TRUE(browser.wait_until(
      fmt::format("return !!document.querySelector('#dedup-groups tr[data-group=\"{}\"]');", group),
      30s))
      << browser.text("#status");
  shot(browser, "dedup");

  // admin.console: the consumer's own admin port serves the same pages (its /metrics fed
  // the console above all along).
  browser.navigate(fmt::format("http://127.0.0.1:{}/#groups", admin_port));
  EXPECT_TRUE(browser.wait_until(
      fmt::format(
          "const e = document.querySelector('{} .lag-total'); return !!e && e.dataset.lag === '0';",
          card),
      60s))
      << browser.text("#status");
  shot(browser, "consumer-admin-port");

  // Back on the lag page after the replays: still 0.
  browser.navigate(url + "#groups");
  ASSERT_TRUE(browser.wait_until(
      fmt::format(
          "const e = document.querySelector('{} .lag-total'); return !!e && e.dataset.lag === '0';",
          card),
      30s));
  EXPECT_TRUE(browser.execute("return window.__xss === undefined;").get<bool>());

  console.kill(SIGTERM);
  EXPECT_EQ(console.wait(30s), 0);
  consumer.kill(SIGTERM);
  EXPECT_EQ(consumer.wait(60s), 0);
  broker.kill(SIGTERM);
  EXPECT_EQ(broker.wait(30s), 0);
}

}  // namespace console_browser_test
}  // namespace idem
