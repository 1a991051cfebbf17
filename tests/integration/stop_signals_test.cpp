// The long-running commands stop through one helper (cli/stop_signals.hpp): SIGTERM and
// SIGINT end each of them cleanly with exit 0, and a second signal during shutdown does
// not kill the process.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <vector>

#include "support/cli_run.hpp"
#include "support/process.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"

namespace idem {
namespace stop_signals_test {

using namespace std::chrono_literals;

struct Serving {
  std::vector<std::string> args;
  std::string ready_prefix;  ///< start of the stdout line printed once it serves
};

// A dev broker for the commands that need one (relay); started through the CLI too.
test::ChildProcess start_dev_broker(std::string& bootstrap) {
  auto broker = test::ChildProcess::spawn(IDEM_CLI_PATH, {"dev-broker", "--no-stdin"});
  bootstrap = broker.read_line(30s).value_or("");
  return broker;
}

TEST(StopSignals, EveryServingCommandExitsCleanlyOnSigtermAndSigint) {
  IDEM_REQUIRE_CLI();
  std::string bootstrap;
  auto broker = start_dev_broker(bootstrap);
  ASSERT_FALSE(bootstrap.empty());
  const std::string relay_db = test::fresh_sqlite_url();
  ASSERT_EQ(test::run_to_completion(IDEM_CLI_PATH, {"migrate", "--db", relay_db}).status, 0);

  const std::vector<Serving> commands = {
      {{"dev-broker", "--no-stdin"}, "127.0.0.1:"},
      {{"provider", "--db", test::fresh_sqlite_url()}, "listening http://"},
      {{"relay", "--db", relay_db, "--brokers", bootstrap, "--progress-interval", "0"}, "ready"},
  };
  for (const int sig : {SIGTERM, SIGINT}) {
    for (const Serving& c : commands) {
      SCOPED_TRACE(c.args.front() + " signal " + std::to_string(sig));
      auto child = test::ChildProcess::spawn(IDEM_CLI_PATH, c.args);
      ASSERT_TRUE(test::read_line_starting_with(child, c.ready_prefix, 30s));
      child.kill(sig);
      child.kill(sig);  // a second one, as an impatient operator sends: still a clean exit
      EXPECT_EQ(child.wait(30s), 0);
    }
  }
  broker.kill(SIGTERM);
  EXPECT_EQ(broker.wait(30s), 0);
}

}  // namespace stop_signals_test
}  // namespace idem
