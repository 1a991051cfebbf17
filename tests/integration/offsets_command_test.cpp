// `idem offsets show|reset` against `idem consume` with offsets in the store: show puts
// the store's and Kafka's offsets side by side; a reset made with Kafka's own tools is
// reported by the consumer (its log line and counter) and not followed; `idem offsets
// reset` writes both places, and the consumer follows it.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "idem/devtools/kafka_admin.hpp"
#include "support/cli_run.hpp"
#include "support/consumer_scenario.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/mock_group.hpp"
#include "support/process.hpp"
#include "support/shared_broker.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem {
namespace offsets_command_test {

using namespace std::chrono_literals;

constexpr int kEvents = 30;

class OffsetsCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    bootstrap_ = test::shared_broker().bootstrap_servers();
    topic_ = test::unique_name("offsets");
    group_ = test::unique_name("offsets-group");
    db_ = test::fresh_sqlite_url();
    test::shared_broker().create_topic(topic_, 1);
    static_cast<void>(test::produce_order_events(bootstrap_, topic_, kEvents));
  }

  /// Runs `idem consume` until the group committed the end of the topic; returns its
  /// log (stderr).
  std::string consume_to_the_end() {
    const auto log_path = test::scratch_dir() / (test::unique_name("consume") + ".log");
    test::ChildProcess cli = test::ChildProcess::spawn(
        IDEM_CLI_PATH,
        test::with_mock_group({"consume", "--brokers", bootstrap_, "--topic", topic_, "--group",
                               group_, "--db", db_, "--batch", "7"}),
        {}, log_path.string());
    EXPECT_TRUE(test::expect_line(cli, fmt::format("consuming {} as {}", topic_, group_), 30s));
    EXPECT_TRUE(test::eventually(
        [&] {
          try {
            return committed_offsets(bootstrap_, group_, topic_, 1).at(0) == kEvents;
          } catch (const std::exception&) {
            return false;  // the coordinator is busy: ask again
          }
        },
        60s, 50ms))
        << "the group did not commit the end of the topic";
    cli.kill(SIGTERM);
    EXPECT_EQ(cli.wait(60s), 0);
    std::ifstream in(log_path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  test::CliResult offsets(std::vector<std::string> args) {
    std::vector<std::string> all{"offsets"};
    all.insert(all.end(), args.begin(), args.end());
    for (const std::string& a : {std::string("--db"), db_, std::string("--brokers"), bootstrap_,
                                 std::string("--group"), group_})
      all.push_back(a);
    // The members' session timeout for the reset's join (the mock cluster can leave the
    // next member's join unanswered when they differ).
    for (std::string& flag : test::mock_group_flags()) all.push_back(std::move(flag));
    return test::run_to_completion(IDEM_CLI_PATH, all);
  }

  std::string bootstrap_, topic_, group_, db_;
};

TEST_F(OffsetsCommand, ShowsBothPlacesReportsAKafkaOnlyResetAndResetsBoth) {
  IDEM_REQUIRE_CLI();
  static_cast<void>(consume_to_the_end());
  ASSERT_EQ(test::effect_rows(db_, group_), kEvents);
  const std::string row = fmt::format("{}\t0\t{}\t{}\t+0\t-", topic_, kEvents, kEvents);
  test::CliResult shown = offsets({"show"});
  ASSERT_EQ(shown.status, 0) << shown.output;
  EXPECT_NE(shown.output.find(row), std::string::npos) << shown.output;

  // Kafka's own tools take the group back to 0: show sees the two disagree, and the
  // consumer goes by the store, says so, and reads nothing again.
  rewind_group(bootstrap_, group_, topic_, 1, 60s, test::mock_group_properties());
  shown = offsets({"show", "--topic", topic_});
  EXPECT_NE(shown.output.find(fmt::format("{}\t0\t{}\t0\t+{}\t-", topic_, kEvents, kEvents)),
            std::string::npos)
      << shown.output;
  const std::string log = consume_to_the_end();
  EXPECT_NE(log.find(fmt::format("the stored offset {} is ahead of Kafka's committed offset 0: "
                                 "going on from the store's, not reading again {} record(s)",
                                 kEvents, kEvents)),
            std::string::npos)
      << log;
  EXPECT_EQ(test::effect_rows(db_, group_), kEvents);

  // `idem offsets reset` writes both: the consumer reads everything again (duplicates).
  const test::CliResult reset = offsets({"reset", "--topic", topic_, "--to-earliest"});
  ASSERT_EQ(reset.status, 0) << reset.output;
  shown = offsets({"show"});
  EXPECT_NE(shown.output.find(fmt::format("{}\t0\t0\t0\t+0\t-", topic_)), std::string::npos)
      << shown.output;
  const std::string again = consume_to_the_end();
  EXPECT_EQ(again.find("is ahead of"), std::string::npos) << again;
  EXPECT_EQ(test::effect_rows(db_, group_), kEvents) << "a duplicate was applied again";
  shown = offsets({"show"});
  EXPECT_NE(shown.output.find(row), std::string::npos) << shown.output;

  // Exactly one target.
  const test::CliResult refused = offsets({"reset", "--topic", topic_});
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.output.find("exactly one of --to-offset, --to-earliest, --to-latest"),
            std::string::npos)
      << refused.output;
}

}  // namespace offsets_command_test
}  // namespace idem
