// As real processes: the provider deduplicates a charge only while it
// remembers the Idempotency-Key, so a redelivery that reaches it after it forgot the
// key, of an event whose first transaction never committed, is charged twice (IDEM-4).
//
// `idem dev-broker`, `idem provider` on a store of its own, `idem consume --handler
// billing`, sharing one configuration file as a deployment of the reference system
// would. The consumer is SIGKILLed between the provider's charge and the ledger commit:
// the test holds the billing database's write lock (SQLite), waits until the provider
// shows the charge, kills the consumer and releases the lock, so the first transaction
// certainly never committed. Once the charge is older than the provider's key retention
// would allow (2 s in the misconfigured run), a new consumer gets the redelivery.
//  - provider.key_retention = 2s, shorter than the dedup retention (7 d): the old
//    relation (24 h against 7 d) scaled down. The redelivery is charged a second time,
//    and both `idem config check` and the consumer at start say so.
//  - the reference default (8 d, longer than the dedup retention): the same redelivery,
//    after the same delay, is replayed by the provider: one charge, and no warning.
// Waits are conditions with deadlines (the charge's age included), never sleeps.
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "support/cli_run.hpp"
#include "support/consumer_scenario.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/mock_group.hpp"
#include "support/process.hpp"
#include "support/provider_process.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem::test {
namespace provider_key_retention_test {

using namespace std::chrono_literals;

constexpr std::int64_t kWarmUpOrder = 1;
constexpr std::int64_t kOrder = 2;
// How old the charge is when the redelivery comes: past the misconfigured retention.
constexpr auto kRedeliveryAge = 2s + 500ms;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Outcome {
  std::size_t charges = 0;          // of kOrder, at the provider
  std::int64_t ledger_rows = 0;     // of kOrder
  std::int64_t ledger_at_kill = 0;  // of kOrder, right after the SIGKILL
  std::string first_consumer_stderr;
  std::string config_check;
};

class ProviderKeyRetention : public ::testing::Test {
 protected:
  void SetUp() override {
    billing_db_ = fresh_sqlite_url();
    provider_db_ = fresh_sqlite_url();
    migrate_reference_system(*open_store(billing_db_));
    broker_ = std::make_unique<DevBrokerProcess>(IDEM_CLI_PATH);
    topic_ = unique_name("orders");
    group_ = unique_name("billing");
    broker_->create_topic(topic_, 1);
    broker_->create_topic(topic_ + ".dlq", 1);
  }

  ChildProcess start_consumer(const std::string& config, const std::string& provider_url,
                              const std::string& stderr_path) {
    ChildProcess child = ChildProcess::spawn(
        IDEM_CLI_PATH,
        with_mock_group({"consume", "--config", config, "--brokers", broker_->bootstrap(),
                         "--topic", topic_, "--group", group_, "--db", billing_db_,
                         "--provider-url", provider_url, "--batch", "1"}),
        {}, stderr_path);
    if (!read_line_starting_with(child, "consuming ", 30s))
      ADD_FAILURE() << "idem consume did not say it is consuming: " << read_file(stderr_path);
    return child;
  }

  void produce(std::int64_t order_id) {
    OrderConfirmed e;
    e.event_id = new_uuid_v7();
    e.occurred_at =
        std::chrono::time_point_cast<std::chrono::microseconds>(std::chrono::system_clock::now());
    e.order_id = order_id;
    e.customer_id = 42;
    e.total_amount = Amount::from_hundredths(1999);
    KafkaTestProducer producer(broker_->bootstrap());
    producer.send(
        {topic_, std::to_string(order_id), to_json(e), {{"event_id", e.event_id.to_string()}}, 0});
    producer.flush();
  }

  std::int64_t ledger_rows(std::int64_t order_id) {
    auto store = open_store(billing_db_);
    return SqliteBackend::read_scalar(
        *store, fmt::format("SELECT count(*) FROM billing_ledger WHERE order_id = {}", order_id));
  }

  std::vector<ProviderCharge> charges(std::int64_t order_id) {
    std::vector<ProviderCharge> out;
    for (ProviderCharge& c : provider_charges(provider_db_))
      if (c.order_id == order_id) out.push_back(std::move(c));
    return out;
  }

  // The scenario, with `config_text` as the file both the provider and the consumer read.
  Outcome run(const std::string& config_text) {
    Outcome out;
    const std::string config = (scratch_dir() / (unique_name("billing") + ".toml")).string();
    std::ofstream(config) << config_text;
    out.config_check =
        run_to_completion(IDEM_CLI_PATH, {"config", "check", "--config", config}, {}, 30s).output;
    ProviderProcess provider(IDEM_CLI_PATH, provider_db_, {"--config", config});

    const std::string first_stderr = (scratch_dir() / unique_name("consume-1")).string();
    {
      ChildProcess first = start_consumer(config, provider.url(), first_stderr);
      // A first order all the way to the ledger: the consumer is up, has its partition
      // and wrote what it writes at start, before the test takes the write lock.
      produce(kWarmUpOrder);
      EXPECT_TRUE(eventually([&] { return ledger_rows(kWarmUpOrder) == 1; }, 90s))
          << read_file(first_stderr);

      auto locker = open_store(billing_db_);
      auto write_lock = locker->begin();  // SQLite: BEGIN IMMEDIATE, the write lock
      produce(kOrder);
      EXPECT_TRUE(eventually([&] { return charges(kOrder).size() == 1; }, 60s))
          << "the provider never charged order " << kOrder << ": " << read_file(first_stderr);
      first.kill(SIGKILL);  // charged, and the ledger transaction waits for the lock
      EXPECT_EQ(first.wait(30s), -SIGKILL);
      write_lock->rollback();
    }
    out.first_consumer_stderr = read_file(first_stderr);
    out.ledger_at_kill = ledger_rows(kOrder);

    const std::vector<ProviderCharge> first_charge = charges(kOrder);
    if (first_charge.size() != 1) return out;
    const std::int64_t due = first_charge.front().charged_at_ms + kRedeliveryAge.count();
    EXPECT_TRUE(eventually([&] { return now_ms() >= due; }, 30s, 20ms));

    const std::string second_stderr = (scratch_dir() / unique_name("consume-2")).string();
    ChildProcess second = start_consumer(config, provider.url(), second_stderr);
    EXPECT_TRUE(eventually([&] { return ledger_rows(kOrder) == 1; }, 120s))
        << "the redelivery was never billed: " << read_file(second_stderr);
    out.charges = charges(kOrder).size();
    out.ledger_rows = ledger_rows(kOrder);
    second.kill(SIGTERM);
    EXPECT_EQ(second.wait(60s), 0) << read_file(second_stderr);
    std::cout << fmt::format("order {}: {} charge(s), {} ledger row(s) after the redelivery\n",
                             kOrder, out.charges, out.ledger_rows);
    return out;
  }

  std::string billing_db_;
  std::string provider_db_;
  std::unique_ptr<DevBrokerProcess> broker_;
  std::string topic_;
  std::string group_;
};

TEST_F(ProviderKeyRetention, ShorterThanTheDedupRetentionChargesARedeliveryTwiceAndIsReported) {
  IDEM_REQUIRE_CLI();
  const Outcome out =
      run("[consumer]\nhandler = \"billing\"\n[provider]\nkey_retention = \"2s\"\n");
  const std::string warning =
      "billing: provider.key_retention = 2s (file ";  // then the path and the line
  EXPECT_NE(out.config_check.find("# warning: " + warning), std::string::npos) << out.config_check;
  EXPECT_NE(out.config_check.find("is shorter than dedup.retention = 7d (default)"),
            std::string::npos)
      << out.config_check;
  EXPECT_NE(out.first_consumer_stderr.find("idem consume: warning: " + warning), std::string::npos)
      << out.first_consumer_stderr;
  EXPECT_EQ(out.ledger_at_kill, 0) << "the first transaction must not have committed";
  // What the warning is about: the provider forgot the key, and charged again.
  EXPECT_EQ(out.charges, 2u);
  EXPECT_EQ(out.ledger_rows, 1);
}

TEST_F(ProviderKeyRetention, TheReferenceRetentionChargesTheSameRedeliveryOnce) {
  IDEM_REQUIRE_CLI();
  const Outcome out = run("[consumer]\nhandler = \"billing\"\n");
  EXPECT_EQ(out.config_check.find("# warning"), std::string::npos) << out.config_check;
  EXPECT_EQ(out.first_consumer_stderr.find("warning: billing"), std::string::npos)
      << out.first_consumer_stderr;
  EXPECT_EQ(out.ledger_at_kill, 0) << "the first transaction must not have committed";
  EXPECT_EQ(out.charges, 1u) << "the provider replays the charge it still remembers";
  EXPECT_EQ(out.ledger_rows, 1);
}

}  // namespace provider_key_retention_test
}  // namespace idem::test
