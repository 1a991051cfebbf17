// `idem dev-broker` as a separate process: other processes (this test) produce and
// consume through it, inject faults over its stdin control channel, and stop it with
// a signal, after which it exits 0.
#include <librdkafka/rdkafka.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/kafka_handle.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

#include "support/process.hpp"

namespace idem {
namespace dev_broker_process_test {

using test::unique_name;

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using Props = test::KafkaProps;
using test::ChildProcess;

using Handle = test::KafkaHandle;

/// Produces `count` messages `prefix-i` to `topic` and waits for their delivery
/// reports (up to 10 s). Returns how many were delivered successfully.
int produce(const std::string& bootstrap, const std::string& topic, const std::string& prefix,
            int count) {
  int delivered = 0;
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set_opaque(conf, &delivered);
  rd_kafka_conf_set_dr_msg_cb(conf, [](rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) ++*static_cast<int*>(opaque);
  });
  const Handle producer = test::make_kafka_handle(
      RD_KAFKA_PRODUCER, conf, {{"bootstrap.servers", bootstrap}, {"linger.ms", "5"}});
  for (int i = 0; i < count; ++i) {
    std::string value = fmt::format("{}-{}", prefix, i);
    rd_kafka_vu_t vus[3]{};
    vus[0].vtype = RD_KAFKA_VTYPE_TOPIC;
    vus[0].u.cstr = topic.c_str();
    vus[1].vtype = RD_KAFKA_VTYPE_VALUE;
    vus[1].u.mem = {value.data(), value.size()};
    vus[2].vtype = RD_KAFKA_VTYPE_MSGFLAGS;
    vus[2].u.i = RD_KAFKA_MSG_F_COPY;
    if (rd_kafka_error_t* error = rd_kafka_produceva(producer.get(), vus, 3)) {
      rd_kafka_error_destroy(error);  // not delivered: the count returned shows it
    }
  }
  rd_kafka_flush(producer.get(), 10'000);
  rd_kafka_poll(producer.get(), 0);
  return delivered;
}

/// Consumes with a fresh group until `count` messages arrived or 30 s passed, then
/// commits and leaves the group. Returns the values received.
std::vector<std::string> consume(const std::string& bootstrap, const std::string& topic,
                                 std::size_t count) {
  const Handle consumer = test::make_kafka_handle(RD_KAFKA_CONSUMER, rd_kafka_conf_new(),
                                                  {{"bootstrap.servers", bootstrap},
                                                   {"group.id", unique_name("group")},
                                                   {"enable.auto.commit", "false"},
                                                   {"auto.offset.reset", "earliest"},
                                                   {"session.timeout.ms", "6000"},
                                                   {"heartbeat.interval.ms", "1000"}});
  rd_kafka_poll_set_consumer(consumer.get());
  rd_kafka_topic_partition_list_t* topics = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(topics, topic.c_str(), RD_KAFKA_PARTITION_UA);
  rd_kafka_subscribe(consumer.get(), topics);
  rd_kafka_topic_partition_list_destroy(topics);

  std::vector<std::string> values;
  const auto deadline = Clock::now() + 30s;
  while (values.size() < count && Clock::now() < deadline) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(consumer.get(), 200);
    if (m == nullptr) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      values.emplace_back(static_cast<const char*>(m->payload), m->len);
    }
    rd_kafka_message_destroy(m);
  }
  if (!values.empty()) {
    EXPECT_EQ(rd_kafka_commit(consumer.get(), nullptr, 0), RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  rd_kafka_consumer_close(consumer.get());
  return values;
}

/// Partition count per topic, from a Metadata request.
std::map<std::string, int> topic_partitions(const std::string& bootstrap) {
  const Handle client = test::make_kafka_handle(RD_KAFKA_PRODUCER, rd_kafka_conf_new(),
                                                {{"bootstrap.servers", bootstrap}});
  const rd_kafka_metadata_t* md = nullptr;
  if (rd_kafka_metadata(client.get(), 1, nullptr, &md, 10'000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return {};
  }
  std::map<std::string, int> out;
  for (int i = 0; i < md->topic_cnt; ++i) out[md->topics[i].topic] = md->topics[i].partition_cnt;
  rd_kafka_metadata_destroy(md);
  return out;
}

/// Starts `idem dev-broker` and reads its bootstrap line (deadline 15 s).
std::pair<ChildProcess, std::string> start_dev_broker(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"dev-broker"};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess child = ChildProcess::spawn(IDEM_CLI_PATH, argv);
  std::optional<std::string> line = child.read_line(15s);
  return {std::move(child), line.value_or("")};
}

TEST(DevBrokerProcess, ServesOtherProcessesAndAnswersControlCommands) {
  IDEM_REQUIRE_CLI();
  auto [broker, bootstrap] = start_dev_broker({"--topic", "t:4"});
  ASSERT_EQ(bootstrap.rfind("127.0.0.1:", 0), 0U) << "bootstrap line: '" << bootstrap << "'";

  EXPECT_EQ(topic_partitions(bootstrap)["t"], 4);
  ASSERT_EQ(produce(bootstrap, "t", "m", 20), 20);
  const std::vector<std::string> got = consume(bootstrap, "t", 20);
  ASSERT_EQ(got.size(), 20U);
  const std::set<std::string> distinct(got.begin(), got.end());
  EXPECT_EQ(distinct.size(), 20U);

  broker.write_line("create-topic x 2");
  EXPECT_EQ(broker.read_line(10s), "ok");
  EXPECT_EQ(topic_partitions(bootstrap)["x"], 2);

  // Each command gets exactly one answer line, in order.
  broker.write_line("create-topic x 2");
  EXPECT_EQ(broker.read_line(10s).value_or("").rfind("error: ", 0), 0U);
  broker.write_line("broker-down 1");
  EXPECT_EQ(broker.read_line(10s), "ok");
  broker.write_line("broker-up 1");
  EXPECT_EQ(broker.read_line(10s), "ok");
  broker.write_line("rtt 1 0");
  EXPECT_EQ(broker.read_line(10s), "ok");
  broker.write_line("request-errors 0 6,7");  // NOT_LEADER, REQUEST_TIMED_OUT: retried
  EXPECT_EQ(broker.read_line(10s), "ok");
  broker.write_line("broker-down 2");
  EXPECT_EQ(broker.read_line(10s).value_or(""),
            "error: dev broker: no broker with id 2 (ids are 1..1)");
  broker.write_line("no-such-command");
  EXPECT_EQ(broker.read_line(10s).value_or("").rfind("error: unknown command", 0), 0U);

  // Still serving after the down/up cycle and the injected errors.
  EXPECT_EQ(produce(bootstrap, "x", "after", 5), 5);

  broker.kill(SIGTERM);
  EXPECT_EQ(broker.wait(15s), 0);
  EXPECT_FALSE(broker.read_line(1s).has_value()) << "unexpected output after the answers";
}

TEST(DevBrokerProcess, KeepsServingAfterStdinClosesAndStopsOnSigint) {
  IDEM_REQUIRE_CLI();
  auto [broker, bootstrap] = start_dev_broker({"--brokers", "2", "--topic", "solo"});
  ASSERT_EQ(std::count(bootstrap.begin(), bootstrap.end(), ','), 1) << bootstrap;

  broker.close_stdin();
  EXPECT_FALSE(broker.wait_for(1s).has_value()) << "dev-broker exited on EOF on stdin";
  EXPECT_EQ(topic_partitions(bootstrap)["solo"], 3);  // NAME alone: 3 partitions
  EXPECT_EQ(produce(bootstrap, "solo", "m", 3), 3);

  broker.kill(SIGINT);
  EXPECT_EQ(broker.wait(15s), 0);
}

TEST(DevBrokerProcess, RejectsBadTopicSpecWithoutPrintingBootstrap) {
  IDEM_REQUIRE_CLI();
  auto [broker, line] = start_dev_broker({"--topic", "t:many"});
  EXPECT_EQ(line, "");
  EXPECT_NE(broker.wait(15s), 0);
}

}  // namespace dev_broker_process_test
}  // namespace idem
