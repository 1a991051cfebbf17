// `idem consume` takes its settings from the configuration loader: everything from a
// TOML file (no flags), and with `admin.listen` it serves /metrics, /healthz and /readyz
// for the consumer it runs.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <fstream>
#include <string>

#include <fmt/format.h>

#include "idem/reference/order_confirmed.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "support/consumer_scenario.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/mock_group.hpp"
#include "support/process.hpp"
#include "support/shared_broker.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem {
namespace consume_config_test {

using namespace std::chrono_literals;

TEST(ConsumeConfig, RunsFromAConfigFileAndServesTheAdminPort) {
  IDEM_REQUIRE_CLI();
  test::SharedBroker& broker = test::shared_broker();
  const std::string topic = test::unique_name("configured");
  broker.create_topic(topic, 1);
  broker.create_topic(topic + ".dlq", 1);
  const std::string db = test::fresh_sqlite_url();
  const std::string group = test::unique_name("from-file");
  {
    test::KafkaTestProducer producer(broker.bootstrap_servers());
    for (std::int64_t order = 1; order <= 3; ++order) {
      OrderConfirmed e;
      e.event_id = new_uuid_v7();
      e.occurred_at =
          std::chrono::time_point_cast<std::chrono::microseconds>(std::chrono::system_clock::now());
      e.order_id = order;
      e.customer_id = 5;
      e.total_amount = Amount::from_hundredths(100 * order);
      producer.send({topic, std::to_string(order), to_json(e), {}});
    }
    producer.flush();
  }
  const auto config_path = test::scratch_dir() / "consume.toml";
  std::ofstream(config_path) << fmt::format(
      "[store]\nurl = \"{}\"\n"
      "[consumer]\ngroup = \"{}\"\ntopics = [\"{}\"]\nbatch_size = 2\n"
      "[kafka]\n\"bootstrap.servers\" = \"{}\"\n\"auto.offset.reset\" = \"earliest\"\n"
      "\"session.timeout.ms\" = \"{}\"\n\"log_level\" = \"3\"\n"
      "[admin]\nlisten = \"127.0.0.1:0\"\n",
      db, group, topic, broker.bootstrap_servers(), test::kMockSessionTimeoutMs);

  test::ChildProcess cli =
      test::ChildProcess::spawn(IDEM_CLI_PATH, {"consume", "--config", config_path.string()});
  const auto admin_line = test::read_line_starting_with(cli, "admin server on port ", 30s);
  ASSERT_TRUE(admin_line) << "no admin port line";
  const int port = std::stoi(admin_line->substr(std::string("admin server on port ").size()));
  ASSERT_TRUE(test::expect_line(cli, fmt::format("consuming {} as {}", topic, group), 30s));
  ASSERT_TRUE(test::eventually([&] { return test::effect_rows(db, group) == 3; }, 60s));

  httplib::Client http("127.0.0.1", port);
  const std::string processed =
      fmt::format("idem_consumer_events_processed_total{{group=\"{}\"}} 3", group);
  std::string metrics;
  ASSERT_TRUE(test::eventually(
      [&] {
        const auto res = http.Get("/metrics");
        metrics = res ? res->body : "";
        return res && res->status == 200 && metrics.find(processed) != std::string::npos;
      },
      30s))
      << processed << " not in:\n"
      << metrics;
  const auto healthz = http.Get("/healthz");
  ASSERT_TRUE(healthz);
  EXPECT_EQ(healthz->status, 200);
  ASSERT_TRUE(test::eventually(
      [&] {
        const auto res = http.Get("/readyz");
        return res && res->status == 200;
      },
      30s))
      << "consumer and store never ready";

  cli.kill(SIGTERM);
  EXPECT_EQ(cli.wait(60s), 0);
  EXPECT_EQ(test::effect_rows(db, group), 3);
}

}  // namespace consume_config_test
}  // namespace idem
