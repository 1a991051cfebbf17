// One configuration path: `idem config check` lists every key of every command with
// its value and origin, and each command's own flags reach their keys (checked with
// `idem <command> ... --print-config`, which loads exactly as the command does).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <string>
#include <vector>

#include "support/cli_run.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"

namespace idem {
namespace config_check_test {

// The line of `key` in a describe() listing: `key = value  # origin`.
std::string line_of(const std::string& output, const std::string& key) {
  const std::string start = key + " = ";
  for (std::size_t at = 0; at < output.size();) {
    const std::size_t end = std::min(output.find('\n', at), output.size());
    const std::string line = output.substr(at, end - at);
    if (line.starts_with(start)) return line;
    at = end + 1;
  }
  return {};
}

// `key = value` with the origin described as `origin`.
void expect_key(const std::string& output, const std::string& key, const std::string& value,
                const std::string& origin) {
  const std::string line = line_of(output, key);
  ASSERT_FALSE(line.empty()) << key << " not listed in:\n" << output;
  EXPECT_TRUE(line.starts_with(key + " = " + value + " ")) << line;
  EXPECT_TRUE(line.ends_with("# " + origin)) << line;
}

TEST(ConfigCheck, ListsAKeyOfEveryCommandWithItsOrigin) {
  IDEM_REQUIRE_CLI();
  const auto file = test::scratch_dir() / "every-command.toml";
  std::ofstream(file) << "[consumer]\nstale_events = \"skip\"\n"  // consume
                         "[dev_broker]\nbrokers = 3\n"            // dev-broker
                         "[dedup]\npartitioned = true\n";         // migrate
  const test::CliResult r = test::run_to_completion(
      IDEM_CLI_PATH,
      {"config", "check", "--config", file.string(), "--set", "dlq.timeout=5s", "--set",
       "demo.orders=50"},
      {{"IDEM_RELAY_STOP_TIMEOUT", "3s"}, {"IDEM_PROVIDER_KEY_RETENTION", "2h"}});
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string in_file = "file " + file.string();
  expect_key(r.output, "consumer.stale_events", "skip", in_file + ":2");
  expect_key(r.output, "dev_broker.brokers", "3", in_file + ":4");
  expect_key(r.output, "dedup.partitioned", "true", in_file + ":6");
  expect_key(r.output, "relay.stop_timeout", "3s", "env IDEM_RELAY_STOP_TIMEOUT");
  expect_key(r.output, "provider.key_retention", "2h", "env IDEM_PROVIDER_KEY_RETENTION");
  expect_key(r.output, "dlq.timeout", "5s", "flag --set");
  expect_key(r.output, "demo.orders", "50", "flag --set");
  expect_key(r.output, "maintenance.batch_size", "5000", "default");
  expect_key(r.output, "dedup.retention", "7d", "default");
  // Unset keys are listed too, so the listing shows everything a command could read.
  expect_key(r.output, "dlq.topic", "", "default");
}

// IDEM-4: the provider must remember a key for as long as the consumer
// may still execute a redelivery of its event.
TEST(ConfigCheck, TheReferenceProviderKeepsKeysLongerThanTheDedupRetentionByDefault) {
  IDEM_REQUIRE_CLI();
  const test::CliResult r = test::run_to_completion(
      IDEM_CLI_PATH, {"config", "check", "--set", "consumer.handler=billing"});
  ASSERT_EQ(r.status, 0) << r.output;
  expect_key(r.output, "provider.key_retention", "8d", "default");
  expect_key(r.output, "dedup.retention", "7d", "default");
  EXPECT_EQ(r.output.find("# warning"), std::string::npos) << r.output;
}

TEST(ConfigCheck, WarnsWhenTheProviderOfTheSameConfigForgetsKeysBeforeTheDedupRetention) {
  IDEM_REQUIRE_CLI();
  // One file for `idem consume --handler billing` and `idem provider`, as a deployment
  // of the reference system would have it.
  const auto file = test::scratch_dir() / "billing-and-provider.toml";
  std::ofstream(file) << "[consumer]\nhandler = \"billing\"\n"
                         "[provider]\nkey_retention = \"24h\"\n";
  const test::CliResult r =
      test::run_to_completion(IDEM_CLI_PATH, {"config", "check", "--config", file.string()});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("# warning: billing: provider.key_retention = 24h (file " +
                          file.string() + ":4) is shorter than dedup.retention = 7d (default)"),
            std::string::npos)
      << r.output;
  // The consumer says the same when it starts with that file.
  const test::CliResult consume = test::run_to_completion(
      IDEM_CLI_PATH, {"consume", "--config", file.string(), "--print-config"});
  EXPECT_NE(consume.output.find("# warning: billing: provider.key_retention = 24h"),
            std::string::npos)
      << consume.output;
}

TEST(ConfigCheck, ChecksTheKeyRetentionStatedForAnOutsideProvider) {
  IDEM_REQUIRE_CLI();
  const test::CliResult short_one = test::run_to_completion(
      IDEM_CLI_PATH, {"config", "check", "--set", "consumer.handler=billing", "--set",
                      "billing.provider_key_retention=2d", "--set", "dedup.retention=72h"});
  ASSERT_EQ(short_one.status, 0) << short_one.output;
  EXPECT_NE(short_one.output.find("# warning: billing: billing.provider_key_retention = 2d (flag "
                                  "--set) is shorter than dedup.retention = 72h (flag --set)"),
            std::string::npos)
      << short_one.output;

  const test::CliResult covering = test::run_to_completion(
      IDEM_CLI_PATH, {"config", "check", "--set", "consumer.handler=billing", "--set",
                      "billing.provider_key_retention=30d", "--set", "dedup.retention=72h"});
  ASSERT_EQ(covering.status, 0) << covering.output;
  EXPECT_EQ(covering.output.find("# warning"), std::string::npos) << covering.output;

  // Not stated, and the dedup retention changed: the check cannot tell and says so.
  const test::CliResult unknown = test::run_to_completion(
      IDEM_CLI_PATH,
      {"config", "check", "--set", "consumer.handler=billing", "--set", "dedup.retention=10d"});
  EXPECT_NE(unknown.output.find("the provider's Idempotency-Key retention is unknown"),
            std::string::npos)
      << unknown.output;
}

TEST(ConfigCheck, ReportsEveryProblemOfEveryCommandTogether) {
  IDEM_REQUIRE_CLI();
  const test::CliResult r = test::run_to_completion(
      IDEM_CLI_PATH,
      {"config", "check", "--set", "dedup.retention=90m", "--set", "demo.faults=meteor"},
      {{"IDEM_DLQ_TIMEOUT", "soon"}});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("configuration has 3 problems"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("dedup.retention (flag --set): must be a whole number of hours"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("demo.faults (flag --set): 'meteor' is not one of"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("dlq.timeout (env IDEM_DLQ_TIMEOUT): expected a duration"),
            std::string::npos)
      << r.output;
}

TEST(ConfigCheck, TheCommandsOwnKeysAreValidatedLikeEveryOther) {
  IDEM_REQUIRE_CLI();
  // consumer.handler (idem consume) and demo.* (idem demo) are declared by the CLI's
  // commands themselves, not by the library.
  const test::CliResult r = test::run_to_completion(
      IDEM_CLI_PATH, {"config", "check", "--set", "consumer.handler=email", "--set",
                      "demo.faults=all,resend", "--set", "demo.timeout=5s"});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("configuration has 3 problems"), std::string::npos) << r.output;
  for (const auto* expected :
       {"consumer.handler (flag --set): expected one of count, billing, analytics",
        "demo.faults (flag --set): all and none stand alone, not in a list",
        "demo.timeout (flag --set): expected a duration from 10s to 1h"}) {
    EXPECT_NE(r.output.find(expected), std::string::npos) << expected << " not in\n" << r.output;
  }
}

struct CommandFlag {
  std::vector<std::string> args;  ///< the command line, without --print-config
  std::string key;
  std::string value;
  std::string flag;
};

class CommandFlags : public testing::TestWithParam<CommandFlag> {};

// Each command's flags are bound to keys: the flag is the top layer and names itself
// as the origin; bare numbers of the old flags named by a unit (kept as old names of the
// renamed ones) get the flag's unit.
TEST_P(CommandFlags, ReachTheirKeyAsTheTopLayer) {
  IDEM_REQUIRE_CLI();
  const CommandFlag& c = GetParam();
  std::vector<std::string> args = c.args;
  args.emplace_back("--print-config");
  const test::CliResult r = test::run_to_completion(IDEM_CLI_PATH, args);
  ASSERT_EQ(r.status, 0) << r.output;
  expect_key(r.output, c.key, c.value, "flag " + c.flag);
}

INSTANTIATE_TEST_SUITE_P(
    EveryCommand, CommandFlags,
    testing::Values(
        CommandFlag{{"consume", "--dedup-retention-hours", "48"},
                    "dedup.retention",
                    "48h",
                    "--dedup-retention-hours"},
        CommandFlag{{"consume", "--retry-delays", "1s,10s"},
                    "consumer.retry_topics.delays",
                    "1s,10s",
                    "--retry-delays"},
        CommandFlag{{"consume", "--maintain-every-s", "60"},
                    "maintenance.interval",
                    "60s",
                    "--maintain-every-s"},
        CommandFlag{
            {"consume", "--dedup-retention", "2d"}, "dedup.retention", "2d", "--dedup-retention"},
        CommandFlag{
            {"consume", "--batch-window", "75"}, "consumer.batch_window", "75", "--batch-window"},
        CommandFlag{{"consume", "--maintain-every", "15m"},
                    "maintenance.interval",
                    "15m",
                    "--maintain-every"},
        CommandFlag{{"relay", "--retention", "36"}, "relay.retention", "36", "--retention"},
        CommandFlag{
            {"relay", "--retention-hours", "36"}, "relay.retention", "36h", "--retention-hours"},
        CommandFlag{
            {"relay", "--poll-interval", "1s"}, "relay.poll_interval", "1s", "--poll-interval"},
        CommandFlag{{"relay", "--progress-interval", "0"},
                    "relay.progress_interval",
                    "0",
                    "--progress-interval"},
        CommandFlag{{"relay", "--rebalance-interval", "500ms"},
                    "relay.rebalance_interval",
                    "500ms",
                    "--rebalance-interval"},
        CommandFlag{{"relay", "--rebalance-ms", "500"},
                    "relay.rebalance_interval",
                    "500ms",
                    "--rebalance-ms"},
        CommandFlag{
            {"consume", "--stale", "process"}, "consumer.stale_events", "process", "--stale"},
        CommandFlag{{"relay", "--no-listen"}, "relay.listen", "false", "--no-listen"},
        CommandFlag{{"relay", "--stop-timeout", "2500ms"},
                    "relay.stop_timeout",
                    "2500ms",
                    "--stop-timeout"},
        CommandFlag{{"dlq", "list", "--topic", "orders.dlq"}, "dlq.topic", "orders.dlq", "--topic"},
        CommandFlag{{"dlq", "replay", "--timeout-s", "5"}, "dlq.timeout", "5s", "--timeout-s"},
        CommandFlag{{"dlq", "list", "--timeout", "5s"}, "dlq.timeout", "5s", "--timeout"},
        CommandFlag{{"dlq", "replay", "--retention", "3d"}, "dedup.retention", "3d", "--retention"},
        CommandFlag{{"dlq", "replay", "--retention-hours", "72"},
                    "dedup.retention",
                    "72h",
                    "--retention-hours"},
        CommandFlag{
            {"maintain", "--batch-size", "100"}, "maintenance.batch_size", "100", "--batch-size"},
        CommandFlag{{"maintain", "--outbox-retention-hours", "0.5"},
                    "maintenance.outbox_retention",
                    "0.5h",
                    "--outbox-retention-hours"},
        CommandFlag{{"maintain", "--outbox-retention", "30m"},
                    "maintenance.outbox_retention",
                    "30m",
                    "--outbox-retention"},
        CommandFlag{{"maintain", "--batch-pause", "10ms"},
                    "maintenance.batch_pause",
                    "10ms",
                    "--batch-pause"},
        CommandFlag{{"maintain", "--partition-period", "12h"},
                    "dedup.partition_period",
                    "12h",
                    "--partition-period"},
        CommandFlag{{"migrate", "--partition-period", "2d"},
                    "dedup.partition_period",
                    "2d",
                    "--partition-period"},
        CommandFlag{{"migrate", "--partitioned"}, "dedup.partitioned", "true", "--partitioned"},
        CommandFlag{{"provider", "--key-retention", "2h"},
                    "provider.key_retention",
                    "2h",
                    "--key-retention"},
        CommandFlag{{"provider", "--latency-ms", "20"}, "provider.latency", "20ms", "--latency-ms"},
        CommandFlag{{"provider", "--latency", "2s"}, "provider.latency", "2s", "--latency"},
        CommandFlag{{"demo", "--provider-latency", "5ms"},
                    "demo.provider_latency",
                    "5ms",
                    "--provider-latency"},
        CommandFlag{
            {"provider", "--retry-after", "4"}, "provider.retry_after", "4s", "--retry-after"},
        CommandFlag{{"provider", "--client-header", "X-Client"},
                    "provider.client_header",
                    "X-Client",
                    "--client-header"},
        CommandFlag{{"dev-broker", "--brokers", "3"}, "dev_broker.brokers", "3", "--brokers"},
        CommandFlag{{"dev-broker", "--no-stdin"}, "dev_broker.read_stdin", "false", "--no-stdin"},
        CommandFlag{{"demo", "--orders", "50"}, "demo.orders", "50", "--orders"},
        CommandFlag{{"demo", "--timeout", "30"}, "demo.timeout", "30s", "--timeout"}),
    [](const testing::TestParamInfo<CommandFlag>& param_info) {
      std::string name;
      for (const auto& a : param_info.param.args) {
        for (const char ch : a) {
          if (std::isalnum(static_cast<unsigned char>(ch))) name.push_back(ch);
        }
        name.push_back('_');
      }
      return name + std::to_string(param_info.index);
    });

// A flag or key whose name carried a unit still works under its old name, with one
// warning naming the new one; the old and the new name together are refused.
TEST(ConfigCheck, OldNamesOfRenamedFlagsAndKeysWarnAndBothNamesFail) {
  IDEM_REQUIRE_CLI();
  const test::CliResult r =
      test::run_to_completion(IDEM_CLI_PATH, {"relay", "--retention-hours", "48", "--print-config"},
                              {{"IDEM_RELAY_POLL_INTERVAL_MS", "250"}});
  ASSERT_EQ(r.status, 0) << r.output;
  expect_key(r.output, "relay.retention", "48h", "flag --retention-hours");
  expect_key(r.output, "relay.poll_interval", "250", "env IDEM_RELAY_POLL_INTERVAL_MS");
  EXPECT_TRUE(line_of(r.output, "relay.retention_hours").empty()) << r.output;
  for (const auto* expected :
       {"idem: warning: flag --retention-hours is the old name of --retention (relay.retention)",
        "idem: warning: relay.poll_interval_ms (env IDEM_RELAY_POLL_INTERVAL_MS) is the old name "
        "of relay.poll_interval"}) {
    EXPECT_NE(r.output.find(expected), std::string::npos) << expected << " not in\n" << r.output;
  }
  // Hidden from --help: the new name is the one to learn.
  const test::CliResult help = test::run_to_completion(IDEM_CLI_PATH, {"relay", "--help"});
  EXPECT_NE(help.output.find("--retention "), std::string::npos) << help.output;
  EXPECT_EQ(help.output.find("--retention-hours"), std::string::npos) << help.output;

  const test::CliResult both = test::run_to_completion(
      IDEM_CLI_PATH,
      {"maintain", "--retention", "2d", "--retention-hours", "48", "--print-config"});
  EXPECT_NE(both.status, 0) << both.output;
  EXPECT_NE(both.output.find("--retention and its old name --retention-hours both given"),
            std::string::npos)
      << both.output;
  const test::CliResult both_keys = test::run_to_completion(
      IDEM_CLI_PATH, {"relay", "--set", "relay.retention=2d", "--print-config"},
      {{"IDEM_RELAY_RETENTION_HOURS", "48"}});
  EXPECT_NE(both_keys.status, 0) << both_keys.output;
  EXPECT_NE(both_keys.output.find("relay.retention (flag --set): also set as its old name "
                                  "relay.retention_hours (env IDEM_RELAY_RETENTION_HOURS)"),
            std::string::npos)
      << both_keys.output;
}

TEST(ConfigCheck, AFlagWinsOverTheEnvironmentAndAnInvalidFlagFailsTheCommand) {
  IDEM_REQUIRE_CLI();
  const test::CliResult r =
      test::run_to_completion(IDEM_CLI_PATH, {"maintain", "--batch-size", "10", "--print-config"},
                              {{"IDEM_MAINTENANCE_BATCH_SIZE", "20"}});
  ASSERT_EQ(r.status, 0) << r.output;
  expect_key(r.output, "maintenance.batch_size", "10", "flag --batch-size");

  const test::CliResult bad =
      test::run_to_completion(IDEM_CLI_PATH, {"dev-broker", "--brokers", "99", "--no-stdin"});
  EXPECT_NE(bad.status, 0) << bad.output;
  EXPECT_NE(
      bad.output.find("dev_broker.brokers (flag --brokers): expected an integer from 1 to 32"),
      std::string::npos)
      << bad.output;
}

}  // namespace config_check_test
}  // namespace idem
