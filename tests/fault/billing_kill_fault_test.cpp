// Billing through the concurrent path, as real processes, with the
// consumer SIGKILLed 10 times at random points and the provider breaking off answers
// after storing the charge and answering 503 before storing anything.
//
// `idem dev-broker`; `idem provider --latency 20ms --reset-after-commit P --unavailable P`
// on a store of its own; `idem consume --handler billing --max-in-flight 512` (restarted
// after each SIGKILL). 5,000 orders over 200 keys (record key customer-<id % 200>, the
// billing effect's ordering key). Each kill comes once the ledger has reached a random
// threshold (ten of them, spread over the run), so it lands with charges in flight.
//
// Afterwards:
//  - the provider made exactly one charge per order, under the order's event id as
//    Idempotency-Key, and no other charge;
//  - billing_ledger holds one row per order, naming that charge's payment id;
//  - each key's charges reached the provider in offset order. With SIGKILLs a charge
//    may be sent again by the next consumer: with the same key, that is a replay (or a
//    409 while the first is still in flight) and makes no charge. So the order is
//    defined on first arrivals: per key, the charges in the order the provider made them
//    (payment_id, a UUIDv7 of its store thread) are the key's orders in offset order, and
//    the request that made each charge was accepted (its key claimed) no earlier than
//    the key's previous charge committed, i.e. a key's charges never overlapped;
//  - the group committed every partition to its end.
//
// A second scenario runs the same checks with non-blocking retry topics on and the
// provider down for a while in the middle (SIGKILLed, restarted on its port and store once
// retry letters have piled up), and the consumer SIGKILLed while retried records are
// pending. Retry topics give up offset order within a key (a later order of a key may be
// charged before a retried one); what stays is that a key's charges never overlap, and
// offset order among the key's orders that were never retried. That scenario turns the
// provider's circuit breaker off (consumer.breaker_failures = 0): with it on, the outage
// would send nothing to the retry topics.
//
// A third runs the outage with the breaker on, as `idem consume` does by default: 3,000
// orders over 100 keys, 256 calls in flight, retry topics 1s,3s, the provider SIGKILLed a
// quarter of the way and back 30 s later on the same port. Meanwhile the consumer reports
// the route paused (/readyz, idem_route_paused) and nothing moves on to a retry topic or
// the DLQ; afterwards every order was charged once, in key order.
// Waits are conditions with deadlines, never sleeps.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "support/billing_processes.hpp"
#include "support/consumer_scenario.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/mock_group.hpp"
#include "support/ports.hpp"
#include "support/process.hpp"
#include "support/provider_process.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem::test {
namespace billing_kill_fault_test {

using namespace std::chrono_literals;

constexpr int kOrders = 5000;
constexpr int kKeys = 200;
constexpr int kPartitions = 8;
constexpr int kKills = 10;

template <class Backend>
class BillingKillFault : public BillingProcessesTest {
 protected:
  BillingKillFault() : BillingProcessesTest(kPartitions, &Backend::fresh_url) {}

  ChildProcess start_consumer(const std::string& provider_url,
                              const std::vector<std::string>& extra_args = {}) {
    std::vector<std::string> args{"consume",
                                  "--brokers",
                                  broker_->bootstrap(),
                                  "--topic",
                                  topic_,
                                  "--group",
                                  group_,
                                  "--db",
                                  billing_db_,
                                  "--handler",
                                  "billing",
                                  "--provider-url",
                                  provider_url,
                                  "--max-in-flight",
                                  "512",
                                  "--batch",
                                  "500"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    ChildProcess child = ChildProcess::spawn(IDEM_CLI_PATH, with_mock_group(std::move(args)));
    if (!read_line_starting_with(child, "consuming ", 30s))
      ADD_FAILURE() << "idem consume did not say it is consuming";
    return child;
  }

  std::int64_t ledger_rows() {
    return Backend::read_scalar(*observer_, "SELECT count(*) FROM billing_ledger");
  }

  /// The checks of the file's header comment, once every order went through: one charge
  /// per order under its event id, one ledger row naming it, a key's charges in offset
  /// order (leaving out the orders in `retried`, which went through a retry topic) and
  /// never overlapping. `faults`: the provider injected resets and 503s (which must have
  /// fired, and made replays).
  void expect_each_order_charged_once(const KeyedOrderEvents& orders,
                                      const std::string& provider_url,
                                      const std::set<std::int64_t>& retried, bool faults = true) {
    const std::size_t order_count = orders.event_ids.size();
    // The provider: one charge per order, under its event id; faults fired and replays
    // answered the repeats.
    const JsonAnswer summary = http_get(provider_url, "/payments/summary");
    ASSERT_EQ(summary.status, 200);
    std::cout << "provider summary: " << summary.body.dump() << std::endl;
    if (faults) {
      EXPECT_GT(summary.body.value("resets_after_commit", 0), 0) << "the reset fault never fired";
      EXPECT_GT(summary.body.value("unavailable", 0), 0) << "the 503 fault never fired";
      EXPECT_GT(summary.body.value("replays", 0), 0);
    }
    const std::vector<ProviderCharge> charges = provider_charges(provider_db_);
    EXPECT_EQ(charges.size(), order_count);
    std::map<std::int64_t, const ProviderCharge*> charge_of;
    int doubled = 0;
    int wrong_key = 0;
    for (const ProviderCharge& c : charges) {
      if (!charge_of.emplace(c.order_id, &c).second) ++doubled;
      const auto id = orders.event_ids.find(c.order_id);
      if (id == orders.event_ids.end() || id->second.to_string() != c.idempotency_key) ++wrong_key;
    }
    EXPECT_EQ(doubled, 0) << "orders charged more than once";
    EXPECT_EQ(wrong_key, 0) << "charges of unknown orders or under another key than the event id";
    EXPECT_EQ(charge_of.size(), order_count);

    // First arrivals per ordering key: offset order, and no overlap.
    std::map<std::string, std::vector<const ProviderCharge*>> by_key;
    for (const ProviderCharge& c : charges)
      by_key[orders.key_of_order.at(c.order_id)].push_back(&c);
    int out_of_order = 0;
    int overlapping = 0;
    for (const auto& [key, expected] : orders.order_ids_by_key) {
      std::vector<std::int64_t> seen;
      const auto& list = by_key[key];
      for (std::size_t i = 0; i < list.size(); ++i) {
        seen.push_back(list[i]->order_id);
        if (i > 0 && list[i]->claimed_at_ms < list[i - 1]->charged_at_ms) {
          if (overlapping++ < 5)
            ADD_FAILURE() << fmt::format(
                "key {}: order {} was accepted at {} ms, before order {} was charged at {} ms", key,
                list[i]->order_id, list[i]->claimed_at_ms, list[i - 1]->order_id,
                list[i - 1]->charged_at_ms);
        }
      }
      std::vector<std::int64_t> expected_order;
      std::copy_if(expected.begin(), expected.end(), std::back_inserter(expected_order),
                   [&](std::int64_t id) { return !retried.contains(id); });
      std::erase_if(seen, [&](std::int64_t id) { return retried.contains(id); });
      if (seen != expected_order && out_of_order++ < 5)
        ADD_FAILURE() << fmt::format("key {}: the provider charged {} but the offsets say {}", key,
                                     fmt::join(seen, ","), fmt::join(expected_order, ","));
    }
    EXPECT_EQ(out_of_order, 0) << "keys whose charges reached the provider out of offset order";
    EXPECT_EQ(overlapping, 0) << "charges of one key that overlapped";

    // The billing database: one ledger row per order, naming the provider's one charge.
    auto tx = observer_->begin_read();
    const Rows ledger =
        tx->execute("SELECT order_id, event_id, provider_payment_id FROM billing_ledger");
    tx->commit();
    std::map<std::int64_t, int> rows_per_order;
    int mismatched = 0;
    for (const RowView row : ledger) {
      const std::int64_t order = row.int64(0);
      ++rows_per_order[order];
      const auto charge = charge_of.find(order);
      if (charge == charge_of.end() || charge->second->payment_id != row.text(2) ||
          charge->second->idempotency_key != row.uuid(1).to_string())
        ++mismatched;
    }
    EXPECT_EQ(ledger.size(), order_count);
    EXPECT_EQ(rows_per_order.size(), order_count);
    EXPECT_TRUE(std::all_of(rows_per_order.begin(), rows_per_order.end(), [](const auto& entry) {
      return entry.second == 1;
    })) << "an order has more than one ledger row";
    EXPECT_EQ(mismatched, 0) << "ledger rows that do not name the provider's charge of their order";
  }
};

TYPED_TEST_SUITE(BillingKillFault, AllBackends, BackendName);

TYPED_TEST(BillingKillFault, TenKillsAndProviderFaultsChargeEachOrderOnceInKeyOrder) {
  if (this->IsSkipped() || this->HasFatalFailure()) return;
  IDEM_REQUIRE_CLI();
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE(fmt::format("seed {}", seed));
  this->RecordProperty("seed", std::to_string(seed));
  std::mt19937_64 rng(seed);

  const KeyedOrderEvents orders = produce_keyed_order_events(
      this->broker_->bootstrap(), this->topic_, kOrders,
      [](std::int64_t id) { return fmt::format("customer-{}", id % kKeys); });
  ProviderProcess provider(IDEM_CLI_PATH, this->provider_db_,
                           {"--latency", "20ms", "--reset-after-commit", "0.05", "--unavailable",
                            "0.05", "--seed", std::to_string(seed % 1000)});

  // Kill k comes once the ledger has at least threshold[k] rows: one random point in each
  // tenth of the run (after its first 50 rows), so every generation has work and calls
  // in flight when it dies.
  std::vector<std::int64_t> thresholds;
  constexpr std::int64_t kSlice = kOrders / (kKills + 1);
  for (int k = 0; k < kKills; ++k) {
    thresholds.push_back(k * kSlice +
                         std::uniform_int_distribution<std::int64_t>(50, kSlice - 1)(rng));
  }
  const auto started = std::chrono::steady_clock::now();
  int kills = 0;
  for (const std::int64_t threshold : thresholds) {
    ChildProcess consumer = this->start_consumer(provider.url());
    ASSERT_TRUE(eventually([&] { return this->ledger_rows() >= threshold; }, 90s, 5ms))
        << "the ledger did not reach " << threshold << " rows (has " << this->ledger_rows()
        << ") before kill " << kills + 1;
    consumer.kill(SIGKILL);
    ASSERT_EQ(consumer.wait(30s), -SIGKILL);
    ++kills;
  }
  ChildProcess last = this->start_consumer(provider.url());
  const auto end = end_offsets(this->broker_->bootstrap(), this->topic_, kPartitions);
  ASSERT_TRUE(eventually(
      [&] { return group_caught_up(this->broker_->bootstrap(), this->group_, this->topic_, end); },
      120s, 200ms))
      << "the last consumer did not commit every partition; ledger rows " << this->ledger_rows();
  last.kill(SIGTERM);
  EXPECT_EQ(last.wait(60s), 0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::cout << fmt::format("{} orders, {} kills, {:.1f} s from the first start to caught up",
                           kOrders, kills, seconds)
            << std::endl;

  this->expect_each_order_charged_once(orders, provider.url(), {});
  EXPECT_EQ(provider.stop(), 0);
}

TYPED_TEST(BillingKillFault, RetryTopicsAndAProviderOutageChargeEachOrderOnce) {
  if (this->IsSkipped() || this->HasFatalFailure()) return;
  IDEM_REQUIRE_CLI();
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE(fmt::format("seed {}", seed));
  this->RecordProperty("seed", std::to_string(seed));
  constexpr int kRetryLevels = 2;
  const auto retry_topic = [&](int level) {
    return fmt::format("{}.retry.{}.{}", this->topic_, this->group_, level);
  };
  for (int level = 1; level <= kRetryLevels; ++level)
    this->broker_->create_topic(retry_topic(level), kPartitions);
  // Calls that fail for a whole retry round go to the first retry topic (due 2 s later),
  // then to the second (10 s): the outage must end within that, or they are dead letters.
  const std::vector<std::string> retry_args{"--retry-delays", "2s,10s", "--set",
                                            "consumer.breaker_failures=0"};

  const KeyedOrderEvents orders = produce_keyed_order_events(
      this->broker_->bootstrap(), this->topic_, kOrders,
      [](std::int64_t id) { return fmt::format("customer-{}", id % kKeys); });
  const std::string listen = fmt::format("127.0.0.1:{}", unused_listen_port());
  const std::vector<std::string> provider_args{
      "--latency", "20ms",   "--reset-after-commit",     "0.05", "--unavailable",
      "0.05",      "--seed", std::to_string(seed % 1000)};
  auto provider =
      std::make_unique<ProviderProcess>(IDEM_CLI_PATH, this->provider_db_, provider_args, listen);
  const std::string provider_url = provider->url();

  ChildProcess consumer = this->start_consumer(provider_url, retry_args);
  ASSERT_TRUE(eventually([&] { return this->ledger_rows() >= kOrders / 4; }, 90s, 5ms))
      << "the ledger did not reach a quarter of the orders (has " << this->ledger_rows() << ")";
  // The outage: the provider is gone (connections refused) until calls have failed for a
  // whole retry round and their records wait in the first retry topic.
  provider->crash();
  const auto retry_letters = [&] {
    const auto end = end_offsets(this->broker_->bootstrap(), retry_topic(1), kPartitions);
    return std::accumulate(end.begin(), end.end(), std::int64_t{0});
  };
  ASSERT_TRUE(eventually([&] { return retry_letters() >= 50; }, 60s, 20ms))
      << "no calls went to the first retry topic during the outage (" << retry_letters() << ")";
  const std::int64_t ledger_in_outage = this->ledger_rows();
  provider =
      std::make_unique<ProviderProcess>(IDEM_CLI_PATH, this->provider_db_, provider_args, listen);
  // The consumer dies while retried records are pending, and a new one takes over.
  ASSERT_TRUE(
      eventually([&] { return this->ledger_rows() >= ledger_in_outage + kOrders / 4; }, 90s, 5ms))
      << "the ledger did not grow after the outage (has " << this->ledger_rows() << ")";
  consumer.kill(SIGKILL);
  ASSERT_EQ(consumer.wait(30s), -SIGKILL);
  ChildProcess last = this->start_consumer(provider_url, retry_args);
  const auto source_end = end_offsets(this->broker_->bootstrap(), this->topic_, kPartitions);
  ASSERT_TRUE(eventually(
      [&] {
        if (!group_caught_up(this->broker_->bootstrap(), this->group_, this->topic_, source_end))
          return false;
        // A retry topic's partition that never held a record has nothing committed (-1).
        for (int level = 1; level <= kRetryLevels; ++level) {
          auto end = end_offsets(this->broker_->bootstrap(), retry_topic(level), kPartitions);
          std::replace(end.begin(), end.end(), std::int64_t{0}, std::int64_t{-1});
          if (!group_caught_up(this->broker_->bootstrap(), this->group_, retry_topic(level), end))
            return false;
        }
        return true;
      },
      180s, 200ms))
      << "the last consumer did not commit every partition; ledger rows " << this->ledger_rows();
  last.kill(SIGTERM);
  EXPECT_EQ(last.wait(60s), 0);

  // Which orders went through a retry topic: their records, read back.
  std::set<std::int64_t> retried;
  for (int level = 1; level <= kRetryLevels; ++level) {
    const auto end = end_offsets(this->broker_->bootstrap(), retry_topic(level), kPartitions);
    const auto count = static_cast<std::size_t>(std::accumulate(end.begin(), end.end(), 0LL));
    for (const KafkaRecord& r :
         read_topic(this->broker_->bootstrap(), retry_topic(level), kPartitions, count, 30s))
      retried.insert(nlohmann::json::parse(r.payload).at("order_id").get<std::int64_t>());
  }
  const auto dead_letters = end_offsets(this->broker_->bootstrap(), this->topic_ + ".dlq", 1);
  std::cout << fmt::format(
                   "{} orders, {} through a retry topic, ledger {} when the provider "
                   "came back, {} dead letters",
                   kOrders, retried.size(), ledger_in_outage, dead_letters.at(0))
            << std::endl;
  EXPECT_GT(retried.size(), 0u);
  EXPECT_EQ(dead_letters.at(0), 0) << "calls given up during the outage";
  this->expect_each_order_charged_once(orders, provider_url, retried);
  EXPECT_EQ(provider->stop(), 0);
}

TYPED_TEST(BillingKillFault, AProviderOutageWaitsBehindTheBreakerWithNothingRetriedOrDeadLettered) {
  if (this->IsSkipped() || this->HasFatalFailure()) return;
  IDEM_REQUIRE_CLI();
  constexpr int kOutageOrders = 3000;
  constexpr int kOutageKeys = 100;
  constexpr auto kOutage = 30s;
  constexpr int kRetryLevels = 2;
  const auto retry_topic = [&](int level) {
    return fmt::format("{}.retry.{}.{}", this->topic_, this->group_, level);
  };
  for (int level = 1; level <= kRetryLevels; ++level)
    this->broker_->create_topic(retry_topic(level), kPartitions);
  const auto letters = [&](const std::string& topic, int partitions) {
    const auto end = end_offsets(this->broker_->bootstrap(), topic, partitions);
    return std::accumulate(end.begin(), end.end(), std::int64_t{0});
  };
  const auto retried_or_dead = [&] {
    return letters(retry_topic(1), kPartitions) + letters(retry_topic(2), kPartitions) +
           letters(this->topic_ + ".dlq", 1);
  };

  const KeyedOrderEvents orders = produce_keyed_order_events(
      this->broker_->bootstrap(), this->topic_, kOutageOrders,
      [](std::int64_t id) { return fmt::format("customer-{}", id % kOutageKeys); });
  const std::string listen = fmt::format("127.0.0.1:{}", unused_listen_port());
  const std::vector<std::string> provider_args{"--latency", "20ms"};
  auto provider =
      std::make_unique<ProviderProcess>(IDEM_CLI_PATH, this->provider_db_, provider_args, listen);
  const std::string provider_url = provider->url();

  std::vector<std::string> args{"consume",
                                "--brokers",
                                this->broker_->bootstrap(),
                                "--topic",
                                this->topic_,
                                "--group",
                                this->group_,
                                "--db",
                                this->billing_db_,
                                "--handler",
                                "billing",
                                "--provider-url",
                                provider_url,
                                "--max-in-flight",
                                "256",
                                "--retry-delays",
                                "1s,3s",
                                "--set",
                                "admin.listen=127.0.0.1:0"};
  ChildProcess consumer = ChildProcess::spawn(IDEM_CLI_PATH, with_mock_group(std::move(args)));
  const auto admin_line = read_line_starting_with(consumer, "admin server on port ", 30s);
  ASSERT_TRUE(admin_line) << "idem consume did not say where its admin server is";
  httplib::Client admin("127.0.0.1",
                        std::stoi(admin_line->substr(std::string("admin server on port ").size())));
  // /readyz's status and body (0 and empty when the admin server did not answer).
  const auto get = [&admin](const std::string& path) {
    const auto res = admin.Get(path);
    return res ? std::pair<int, std::string>(res->status, res->body)
               : std::pair<int, std::string>(0, std::string());
  };
  ASSERT_TRUE(read_line_starting_with(consumer, "consuming ", 30s));
  ASSERT_TRUE(eventually([&] { return this->ledger_rows() >= kOutageOrders / 4; }, 90s, 5ms))
      << "the ledger did not reach a quarter of the orders (has " << this->ledger_rows() << ")";

  provider->crash();
  // The route reports paused while the provider is down.
  std::string readyz;
  ASSERT_TRUE(eventually(
      [&] {
        const auto [status, body] = get("/readyz");
        readyz = body;
        return status == 503 && body.find("billing: paused: endpoint") != std::string::npos;
      },
      30s, 20ms))
      << "/readyz did not report the route paused: " << readyz;
  const std::string metrics = get("/metrics").second;
  EXPECT_NE(metrics.find(
                fmt::format(R"(idem_route_paused{{group="{}",route="billing"}} 1)", this->group_)),
            std::string::npos)
      << metrics;
  // The outage lasts kOutage, checked all along: nothing is retried or dead-lettered.
  const std::int64_t ledger_in_outage = this->ledger_rows();
  EXPECT_FALSE(eventually([&] { return retried_or_dead() > 0; }, kOutage, 100ms))
      << "records moved on to a retry topic or the DLQ during the outage";
  EXPECT_LE(this->ledger_rows(), ledger_in_outage + 256)
      << "charges applied with the provider down";

  provider =
      std::make_unique<ProviderProcess>(IDEM_CLI_PATH, this->provider_db_, provider_args, listen);
  const auto source_end = end_offsets(this->broker_->bootstrap(), this->topic_, kPartitions);
  ASSERT_TRUE(eventually(
      [&] {
        return group_caught_up(this->broker_->bootstrap(), this->group_, this->topic_, source_end);
      },
      120s, 200ms))
      << "the consumer did not commit every partition; ledger rows " << this->ledger_rows();
  EXPECT_TRUE(eventually([&] { return get("/readyz").first == 200; }, 30s, 20ms))
      << "the route did not resume";
  consumer.kill(SIGTERM);
  EXPECT_EQ(consumer.wait(60s), 0);

  std::cout << fmt::format("{} orders, ledger {} when the provider went down, down {} s",
                           kOutageOrders, ledger_in_outage, kOutage.count())
            << std::endl;
  EXPECT_EQ(letters(retry_topic(1), kPartitions), 0) << "records sent to the first retry topic";
  EXPECT_EQ(letters(retry_topic(2), kPartitions), 0) << "records sent to the second retry topic";
  EXPECT_EQ(letters(this->topic_ + ".dlq", 1), 0) << "dead letters";
  this->expect_each_order_charged_once(orders, provider_url, {}, /*faults=*/false);
  EXPECT_EQ(provider->stop(), 0);
}

}  // namespace billing_kill_fault_test
}  // namespace idem::test
