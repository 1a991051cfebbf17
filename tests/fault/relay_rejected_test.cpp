// Outbox rows that Kafka refuses for good, with the real `idem relay`
// as a process of its own, on SQLite and PostgreSQL, against the in-process dev broker:
//
// - a payload over the relay producer's message.max.bytes (refused by librdkafka at
//   produce time);
// - a row for a topic that does not exist on a broker without auto-creation. The mock
//   cluster creates every unknown topic, so the broker is told to answer Metadata for
//   that topic with UNKNOWN_TOPIC_OR_PART (rd_kafka_mock_topic_set_error, as a real
//   broker with auto.create.topics.enable=false does); librdkafka fails the message with
//   "Local: Unknown topic" after topic.metadata.propagation.max.ms (1 s here).
//
// Either row is set aside as rejected with a reason, listed by `idem outbox rejected`,
// counted in /metrics, and every other row, the later rows of the same key included, is
// published. Before the fix the relay re-claimed and re-sent the batch every 500 ms and
// nothing behind the refused row was ever published. Waits are conditions with
// deadlines, never sleeps.
#include <signal.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "idem/devtools/dev_broker.hpp"
#include "idem/devtools/kafka_admin.hpp"
#include "idem/outbox.hpp"
#include "idem/store.hpp"
#include "support/cli_run.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/process.hpp"
#include "support/store_backends.hpp"
#include "support/wait.hpp"

namespace idem {
namespace relay_rejected_test {

using namespace std::chrono_literals;
using test::ChildProcess;
using test::eventually;

constexpr int kRows = 20;
constexpr int kRefusedRow = 7;  // 1-based position of the row Kafka refuses
constexpr int kPartitions = 3;
constexpr int kUnknownTopicOrPartition = 3;

DevBroker& broker() {
  static DevBroker b;
  return b;
}

template <class Backend>
class RelayRejected : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = Backend::fresh_url();
    if (url_.empty()) return;
    store_ = open_store(url_);
    store_->migrate();
    topic_ = test::unique_name("rejected-orders");
    broker().create_topic(topic_, kPartitions);
  }

  /// Enqueues kRows rows to topic_ with keys alternating between two aggregates, except
  /// that row kRefusedRow goes to `refused_topic` with `refused_payload`. Returns the
  /// outbox id of the refused row.
  std::int64_t enqueue_rows(const std::string& refused_topic, const std::string& refused_payload) {
    Outbox outbox;
    for (int i = 1; i <= kRows; ++i) {
      auto tx = store_->begin();
      const bool refused = i == kRefusedRow;
      // The refused row's key has later rows too: they must be published all the same.
      outbox.enqueue(*tx, [&](const Uuid& id) {
        return OutboxMessage{
            "order",
            fmt::format("agg-{}", i % 2),
            refused ? refused_topic : topic_,
            refused ? refused_payload : fmt::format(R"({{"event_id":"{}"}})", id.to_string()),
            {},
            {}};
      });
      tx->commit();
    }
    return Backend::read_scalar(
        *store_,
        fmt::format("SELECT id FROM idem_outbox ORDER BY id LIMIT 1 OFFSET {}", kRefusedRow - 1));
  }

  std::int64_t scalar(const std::string& sql) { return Backend::read_scalar(*store_, sql); }

  std::size_t on_topic() {
    std::size_t n = 0;
    for (const auto o : test::end_offsets(broker().bootstrap_servers(), topic_, kPartitions)) {
      n += static_cast<std::size_t>(o);
    }
    return n;
  }

  /// `idem relay` as a service with an admin server; returns once it said `ready`.
  ChildProcess start_relay(const std::vector<std::string>& kafka_properties) {
    std::vector<std::string> args = {"relay",
                                     "--db",
                                     url_,
                                     "--brokers",
                                     broker().bootstrap_servers(),
                                     "--poll-interval",
                                     "50",
                                     "--progress-interval",
                                     "100",
                                     "--set",
                                     "admin.listen=127.0.0.1:0",
                                     "--kafka",
                                     "log_level=2"};
    for (const auto& p : kafka_properties) {
      args.emplace_back("--kafka");
      args.push_back(p);
    }
    ChildProcess relay = ChildProcess::spawn(IDEM_CLI_PATH, args);
    const auto admin = test::read_line_starting_with(relay, "admin server on port ", 30s);
    if (!admin) throw std::runtime_error("idem relay printed no admin port");
    admin_port_ = std::stoi(admin->substr(std::string("admin server on port ").size()));
    if (!test::expect_line(relay, "ready", 30s)) throw std::runtime_error("idem relay not ready");
    return relay;
  }

  /// Waits until /metrics of the running relay contains `line`.
  bool metrics_show(const std::string& line, std::string& metrics) {
    httplib::Client http("127.0.0.1", admin_port_);
    return eventually(
        [&] {
          const auto res = http.Get("/metrics");
          metrics = res ? res->body : "";
          return res && res->status == 200 && metrics.find(line) != std::string::npos;
        },
        30s);
  }

  /// The scenario: every row but the refused one is published to topic_, the refused one
  /// is rejected with a reason containing `reason_part`, listed, counted; then, once
  /// `fix_cause` ran (and a relay with the default producer settings runs), `idem outbox
  /// requeue` puts it back and it is published too.
  void run_scenario(const std::string& refused_topic, const std::string& refused_payload,
                    const std::vector<std::string>& kafka_properties,
                    const std::string& reason_part, const std::function<void()>& fix_cause) {
    const std::int64_t refused_id = enqueue_rows(refused_topic, refused_payload);
    ChildProcess relay = start_relay(kafka_properties);

    const std::size_t others = kRows - 1;  // on topic_, wherever the refused row goes
    ASSERT_TRUE(eventually([&] { return on_topic() == others; }, 60s))
        << "rows after the refused one were not published: " << on_topic() << " of " << others;
    ASSERT_TRUE(eventually(
        [&] {
          return scalar("SELECT count(*) FROM idem_outbox WHERE published_at IS NOT NULL") ==
                 kRows - 1;
        },
        30s));
    EXPECT_EQ(scalar("SELECT count(*) FROM idem_outbox WHERE rejected_at IS NOT NULL"), 1);
    EXPECT_EQ(scalar(fmt::format(
                  "SELECT count(*) FROM idem_outbox WHERE id = {} AND rejected_at IS NOT NULL "
                  "AND published_at IS NULL",
                  refused_id)),
              1);

    std::string metrics;
    EXPECT_TRUE(metrics_show("idem_relay_outbox_rows_rejected_total 1", metrics)) << metrics;
    EXPECT_TRUE(metrics_show("idem_relay_outbox_rejected_rows 1", metrics)) << metrics;
    EXPECT_TRUE(metrics_show("idem_relay_outbox_backlog_rows 0", metrics))
        << "a rejected row does not wait for the relay\n"
        << metrics;
    EXPECT_EQ(on_topic(), others) << "the refused row is not sent";

    const test::CliResult listed =
        test::run_to_completion(IDEM_CLI_PATH, {"outbox", "rejected", "--db", url_});
    ASSERT_EQ(listed.status, 0) << listed.output;
    const std::string row_prefix = fmt::format("\n{}\t{}\tagg-{}\t{}\t", refused_id, refused_topic,
                                               kRefusedRow % 2, refused_payload.size());
    EXPECT_NE(listed.output.find(row_prefix), std::string::npos) << listed.output;
    EXPECT_NE(listed.output.find(reason_part), std::string::npos) << listed.output;

    relay.kill(SIGTERM);
    EXPECT_EQ(relay.wait(30s), 0);

    // The cause is fixed: the row is put back in line and published by the next relay.
    fix_cause();
    const test::CliResult requeued = test::run_to_completion(
        IDEM_CLI_PATH, {"outbox", "requeue", std::to_string(refused_id), "--db", url_});
    EXPECT_EQ(requeued.status, 0) << requeued.output;
    EXPECT_NE(requeued.output.find(fmt::format("requeued {}", refused_id)), std::string::npos);
    const test::CliResult again = test::run_to_completion(
        IDEM_CLI_PATH, {"outbox", "requeue", std::to_string(refused_id), "--db", url_});
    EXPECT_EQ(again.status, 1) << "no longer a rejected row: " << again.output;

    const test::CliResult drained = test::run_to_completion(
        IDEM_CLI_PATH,
        {"relay", "--db", url_, "--brokers", broker().bootstrap_servers(), "--poll-interval", "50",
         "--until-empty", "--timeout-s", "60", "--kafka", "log_level=2"},
        {}, 90s);
    EXPECT_EQ(drained.status, 0) << drained.output;
    EXPECT_EQ(scalar("SELECT count(*) FROM idem_outbox WHERE published_at IS NULL"), 0);
    const test::CliResult none =
        test::run_to_completion(IDEM_CLI_PATH, {"outbox", "rejected", "--db", url_});
    EXPECT_EQ(none.output, "id\ttopic\tkey\tbytes\trejected_at\treason\n");
  }

  std::string url_;
  std::string topic_;
  std::unique_ptr<Store> store_;
  int admin_port_ = 0;
};

TYPED_TEST_SUITE(RelayRejected, test::AllBackends, test::BackendName);

TYPED_TEST(RelayRejected, APayloadOverMessageMaxBytesIsSetAsideAndLaterRowsArePublished) {
  if (this->url_.empty()) return;
  // Requeued once the relay runs with the default limit again.
  this->run_scenario(this->topic_, std::string(5000, 'x'), {"message.max.bytes=2000"},
                     "message.max.bytes is 2000", [] {});
  EXPECT_EQ(this->on_topic(), static_cast<std::size_t>(kRows)) << "the requeued row is sent";
}

TYPED_TEST(RelayRejected, ARowForATopicThatDoesNotExistIsSetAsideAndLaterRowsArePublished) {
  if (this->url_.empty()) return;
  const std::string missing = this->topic_ + "-missing";
  broker().set_topic_error(missing, kUnknownTopicOrPartition);
  this->run_scenario(missing, R"({"order_id":7})", {"topic.metadata.propagation.max.ms=1000"},
                     "Unknown topic", [&] { broker().set_topic_error(missing, 0); });
  std::int64_t on_missing = 0;
  const int partitions = idem::partition_count(broker().bootstrap_servers(), missing);
  for (const auto o : test::end_offsets(broker().bootstrap_servers(), missing, partitions)) {
    on_missing += o;
  }
  EXPECT_EQ(on_missing, 1) << "the requeued row is sent once the topic exists";
  EXPECT_EQ(this->on_topic(), static_cast<std::size_t>(kRows - 1));
}

}  // namespace relay_rejected_test
}  // namespace idem
