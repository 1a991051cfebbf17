// The relay under crashes and broker outages, as real processes: `idem dev-broker`, the
// relay_child program (idem::Relay that SIGKILLs itself at a chosen step of a chosen
// batch) and the real `idem relay`, SIGKILLed by the test at random moments.
//
// The assertion is always about the topic: no confirmed order missing, and every copy of
// an order's event carries the event_id born with it (so duplicates are harmless).
#include <signal.h>

#include <chrono>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/outbox.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/order_service.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/process.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem {
namespace relay_crash_test {

using test::eventually;

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;
using test::ChildProcess;

constexpr const char* kTopic = "order-service.order.confirmed";

/// `idem dev-broker` with the reference topic; its stdin is the control channel.
struct BrokerProcess {
  ChildProcess child;
  std::string bootstrap;

  static BrokerProcess start() {
    ChildProcess c =
        ChildProcess::spawn(IDEM_CLI_PATH, {"dev-broker", "--topic", std::string(kTopic) + ":3"});
    const auto line = c.read_line(30s);
    if (!line) throw std::runtime_error("dev-broker printed no bootstrap line");
    return BrokerProcess{std::move(c), *line};
  }
  bool control(const std::string& command) {
    child.write_line(command);
    const auto answer = child.read_line(10s);
    return answer && *answer == "ok";
  }
};

template <class Backend>
class RelayFault : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = Backend::fresh_url();
    if (url_.empty()) return;
    store_ = open_store(url_);
    idem::migrate_reference_system(*store_);
  }

  std::map<std::int64_t, Uuid> confirm_orders(std::int64_t first, std::int64_t n) {
    OrderService service(outbox_);
    std::map<std::int64_t, Uuid> out;
    for (std::int64_t id = first; id < first + n; ++id) {
      {
        auto tx = store_->begin();
        service.create(*tx, id, 1 + id % 17, Amount::from_hundredths(500 + id));
        tx->commit();
      }
      if (const auto c = service.confirm(*store_, id)) out[id] = c->event_id;
    }
    return out;
  }

  std::int64_t unpublished() {
    return Backend::read_scalar(*store_,
                                "SELECT count(*) FROM idem_outbox WHERE published_at IS NULL");
  }

  /// Every confirmed order on the topic at least once; every copy with its born id.
  /// Returns the number of duplicate copies.
  std::size_t check_topic(const std::string& bootstrap,
                          const std::map<std::int64_t, Uuid>& expected) {
    std::size_t total = 0;
    for (const auto o : test::end_offsets(bootstrap, kTopic, 3))
      total += static_cast<std::size_t>(o);
    const auto records = test::read_topic(bootstrap, kTopic, 3, total, 60s);
    EXPECT_EQ(records.size(), total);
    std::map<std::int64_t, int> copies;
    for (const auto& r : records) {
      const auto event = parse_order_confirmed(r.payload);
      EXPECT_TRUE(event.ok()) << r.payload;
      if (!event.ok()) continue;
      const OrderConfirmed& e = event.value();
      EXPECT_EQ(r.key, std::to_string(e.order_id));
      EXPECT_EQ(r.header("event_id").value_or(""), e.event_id.to_string());
      const auto it = expected.find(e.order_id);
      EXPECT_NE(it, expected.end()) << "never confirmed: " << e.order_id;
      if (it != expected.end()) {
        EXPECT_EQ(e.event_id, it->second) << "a duplicate with a NEW event_id (mistake MISTAKES)";
      }
      ++copies[e.order_id];
    }
    std::size_t missing = 0;
    for (const auto& [order, id] : expected) {
      if (copies[order] == 0) ++missing;
    }
    EXPECT_EQ(missing, 0U) << "confirmed orders missing from the topic";
    return total - copies.size();
  }

  std::string url_;
  std::unique_ptr<Store> store_;
  Outbox outbox_;
};

TYPED_TEST_SUITE(RelayFault, test::AllBackends, test::BackendName);

TYPED_TEST(RelayFault, KilledAtRandomPointsManyTimesLosesNoConfirmedOrder) {
  IDEM_REQUIRE_CLI();
  if (this->url_.empty()) return;
  BrokerProcess broker = BrokerProcess::start();
  // Orders keep arriving between the kills: 1000 first, then 100 after every round.
  auto expected = this->confirm_orders(1, 1000);
  std::int64_t next_order = 1001;
  const auto more_orders = [&] {
    const auto more = this->confirm_orders(next_order, 100);
    expected.insert(more.begin(), more.end());
    next_order += 100;
  };
  std::mt19937 rng{std::random_device{}()};
  const std::vector<std::string> steps = {"claimed", "produced", "acked", "marked"};
  int self_kills = 0;
  // 12 kills at chosen points (the crucial one: acked but not yet marked) of a chosen
  // batch of 50 rows...
  // A round whose relay drained before reaching its kill point does not count; up to 40.
  for (int round = 0; round < 40 && self_kills < 12; ++round) {
    const std::string step = steps[static_cast<std::size_t>(round) % steps.size()];
    // Acked/Marked fire once per group of batches settled together, so count to 2 at most.
    const int batch = 1 + static_cast<int>(rng() % 2);
    ChildProcess relay =
        ChildProcess::spawn(test::child_program("relay_child"),
                            {this->url_, broker.bootstrap, "50", step, std::to_string(batch)});
    const int status = relay.wait(60s);
    if (status == -SIGKILL) ++self_kills;
    ASSERT_TRUE(status == -SIGKILL || status == 0) << "relay_child status " << status;
    more_orders();
  }
  EXPECT_EQ(self_kills, 12);
  // ...then 6 SIGKILLs of the real `idem relay` at random moments.
  for (int round = 0; round < 6; ++round) {
    ChildProcess relay = ChildProcess::spawn(
        IDEM_CLI_PATH, {"relay", "--db", this->url_, "--brokers", broker.bootstrap, "--batch-size",
                        "100", "--progress-interval", "0", "--kafka", "log_level=2"});
    ASSERT_TRUE(test::expect_line(relay, "ready", 30s));
    // Fault injection timing, not synchronisation: kill somewhere in 0..300 ms.
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 300));
    relay.kill(SIGKILL);
    EXPECT_EQ(relay.wait(10s), -SIGKILL);
    more_orders();
  }
  EXPECT_GT(this->unpublished(), 0) << "the kills should have left work for the last relay";
  ChildProcess last = ChildProcess::spawn(
      IDEM_CLI_PATH, {"relay", "--db", this->url_, "--brokers", broker.bootstrap, "--until-empty",
                      "--timeout-s", "120", "--progress-interval", "0"});
  ASSERT_EQ(last.wait(150s), 0);
  EXPECT_EQ(this->unpublished(), 0);
  const std::size_t duplicates = this->check_topic(broker.bootstrap, expected);
  ::testing::Test::RecordProperty("duplicates", static_cast<int>(duplicates));
  EXPECT_GT(duplicates, 0U) << "kills after the ack and before the mark must resend";
}

TYPED_TEST(RelayFault, BrokerDownForAWhileThenTheRelayCatchesUp) {
  IDEM_REQUIRE_CLI();
  if (this->url_.empty()) return;
  BrokerProcess broker = BrokerProcess::start();
  auto expected = this->confirm_orders(1, 200);
  ChildProcess relay = ChildProcess::spawn(
      IDEM_CLI_PATH, {"relay", "--db", this->url_, "--brokers", broker.bootstrap, "--batch-size",
                      "50", "--progress-interval", "100", "--poll-interval", "50", "--kafka",
                      "reconnect.backoff.max.ms=500", "--kafka", "log_level=2"});
  ASSERT_TRUE(test::expect_line(relay, "ready", 30s));
  ASSERT_TRUE(eventually([&] { return this->unpublished() == 0; }, 60s));

  ASSERT_TRUE(broker.control("broker-down 1"));
  const auto more = this->confirm_orders(201, 300);
  expected.insert(more.begin(), more.end());
  // The relay reports a backlog it cannot publish while the broker is down.
  bool stuck = false;
  const auto deadline = SteadyClock::now() + 30s;
  while (!stuck && SteadyClock::now() < deadline) {
    const auto line = relay.read_line(10s);
    ASSERT_TRUE(line.has_value());
    stuck = line->starts_with("progress") && line->find("backlog=0 ") == std::string::npos;
  }
  EXPECT_TRUE(stuck);
  EXPECT_GT(this->unpublished(), 0);
  ASSERT_TRUE(broker.control("broker-up 1"));
  EXPECT_TRUE(eventually([&] { return this->unpublished() == 0; }, 90s))
      << "the relay did not catch up after broker-up";
  relay.kill(SIGTERM);
  EXPECT_EQ(relay.wait(30s), 0);
  this->check_topic(broker.bootstrap, expected);
}

}  // namespace relay_crash_test
}  // namespace idem
