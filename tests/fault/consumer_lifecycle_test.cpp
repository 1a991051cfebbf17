// The lifecycle of `idem consume` as real processes: a SIGTERM
// after the broker died still ends the process within consumer.stop_timeout, non-zero and
// saying what it could not do; a consumer restarted after a SIGKILL with the same
// consumer.instance_id gets its partitions back without waiting for the dead member's
// session timeout.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "idem/reference/count_handler.hpp"
#include "idem/store.hpp"
#include "support/cli_run.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/mock_group.hpp"
#include "support/process.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem {
namespace consumer_lifecycle_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct DevBroker {
  test::ChildProcess process;
  std::string bootstrap;
};

DevBroker start_dev_broker(const std::string& topic) {
  auto broker = test::ChildProcess::spawn(IDEM_CLI_PATH,
                                          {"dev-broker", "--no-stdin", "--topic", topic + ":1"});
  std::string bootstrap = broker.read_line(30s).value_or("");
  return {std::move(broker), std::move(bootstrap)};
}

std::vector<std::string> consume_args(const std::string& db, const std::string& bootstrap,
                                      const std::string& topic, const std::string& group) {
  return test::with_mock_group({"consume", "--db", db, "--brokers", bootstrap, "--topic", topic,
                                "--group", group, "--handler", "count", "--batch", "10"});
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::int64_t effects(const std::string& db, const std::string& group) {
  const std::unique_ptr<Store> store = open_store(db);
  return test::SqliteBackend::read_scalar(
      *store, fmt::format("SELECT count(*) FROM effect_log WHERE consumer_group = '{}'", group));
}

// The final offset commit cannot reach a broker that is gone. Before the bound,
// rd_kafka_commit (sync) and rd_kafka_consumer_close waited for it for more than ten
// minutes; now the process ends within the stop timeout and says what was not done.
TEST(ConsumerLifecycle, SigtermWithTheBrokerGoneEndsWithinTheStopTimeoutAndSaysWhy) {
  IDEM_REQUIRE_CLI();
  const std::string topic = test::unique_name("stop-topic");
  const std::string group = test::unique_name("stop-group");
  DevBroker broker = start_dev_broker(topic);
  ASSERT_FALSE(broker.bootstrap.empty());
  static_cast<void>(test::produce_order_events(broker.bootstrap, topic, 20));

  const std::string db = test::fresh_sqlite_url();
  const std::string stderr_path = (test::scratch_dir() / test::unique_name("consume")).string();
  std::vector<std::string> args = consume_args(db, broker.bootstrap, topic, group);
  args.insert(args.end(), {"--stop-timeout", "3s"});
  auto consumer = test::ChildProcess::spawn(IDEM_CLI_PATH, args, {}, stderr_path);
  ASSERT_TRUE(test::read_line_starting_with(consumer, "consuming ", 30s));
  ASSERT_TRUE(test::eventually([&] { return effects(db, group) == 20; }, 60s, 50ms));

  broker.process.kill(SIGKILL);
  ASSERT_EQ(broker.process.wait(30s), -SIGKILL);
  const auto signalled = Clock::now();
  consumer.kill(SIGTERM);
  // 60 s only detects a hang; the stop timeout is 3 s.
  const std::optional<int> status = consumer.wait_for(60s);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - signalled);
  ASSERT_TRUE(status.has_value()) << "idem consume still running 60 s after SIGTERM";
  RecordProperty("stop_ms", std::to_string(took.count()));
  std::cout << fmt::format("SIGTERM to exit with the broker gone: {} ms (stop timeout 3s)\n",
                           took.count());
  EXPECT_EQ(*status, 1);
  const std::string err = read_file(stderr_path);
  EXPECT_NE(err.find("final offset commit not made within 3s"), std::string::npos) << err;
  EXPECT_NE(err.find("redelivered and deduplicated"), std::string::npos) << err;
}

// A consumer SIGKILLed and started again with the same consumer.instance_id
// (group.instance.id). With dynamic membership the new process waits for the dead
// member's session timeout (45 s by default, the tests' mock_group_flags() here) before
// it gets the partition. The figure is printed; librdkafka 2.0.2's mock cluster is what
// serves the group here, so it shows what that broker does with a static member (see
// docs/consumer.md).
TEST(ConsumerLifecycle, RestartWithTheSameInstanceIdProcessesAgain) {
  IDEM_REQUIRE_CLI();
  const std::string topic = test::unique_name("static-topic");
  const std::string group = test::unique_name("static-group");
  DevBroker broker = start_dev_broker(topic);
  ASSERT_FALSE(broker.bootstrap.empty());
  const std::string db = test::fresh_sqlite_url();
  std::vector<std::string> args = consume_args(db, broker.bootstrap, topic, group);
  args.insert(args.end(), {"--instance-id", "billing-0"});

  static_cast<void>(test::produce_order_events(broker.bootstrap, topic, 5));
  {
    auto first = test::ChildProcess::spawn(IDEM_CLI_PATH, args);
    ASSERT_TRUE(test::read_line_starting_with(first, "consuming ", 30s));  // migrated
    ASSERT_TRUE(test::eventually([&] { return effects(db, group) == 5; }, 60s, 50ms));
    first.kill(SIGKILL);
    ASSERT_EQ(first.wait(30s), -SIGKILL);
  }
  // New events (new ids) for the restarted process: its first effect is one of them.
  static_cast<void>(test::produce_order_events(broker.bootstrap, topic, 5));
  const auto started = Clock::now();
  auto second = test::ChildProcess::spawn(IDEM_CLI_PATH, args);
  ASSERT_TRUE(test::eventually([&] { return effects(db, group) > 5; }, 120s, 20ms))
      << "the restarted consumer processed nothing within 120 s";
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
  RecordProperty("restart_to_first_effect_ms", std::to_string(took.count()));
  std::cout << fmt::format("restart to first effect with consumer.instance_id: {} ms\n",
                           took.count());
  second.kill(SIGTERM);
  EXPECT_EQ(second.wait(60s), 0);
}

}  // namespace consumer_lifecycle_test
}  // namespace idem
