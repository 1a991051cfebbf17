// The outbox relay end to end, on SQLite and PostgreSQL, with the in-process dev broker:
// every confirmed order on the topic exactly once (keyed by order_id, with its event_id
// in payload and header); a rolled-back confirmation publishes nothing; per-key order
// with many events per key; a broker that goes down and comes back; and on PostgreSQL
// two relays at once. Waits are conditions with deadlines, never sleeps.
#include "idem/relay.hpp"

#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/dev_broker.hpp"
#include "idem/error.hpp"
#include "idem/events/order_confirmed.hpp"
#include "idem/outbox.hpp"
#include "idem/reference/order_service.hpp"
#include "idem/store.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/store_backends.hpp"

namespace idem {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

std::string unique_topic(std::string_view prefix) {
  static std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}-{:012x}", prefix, rng() & 0xffffffffffffULL);
}

DevBroker& broker() {
  static DevBroker b;
  return b;
}

/// Waits for `cond` up to `timeout`, checking every few milliseconds.
template <class F>
bool eventually(F cond, std::chrono::milliseconds timeout) {
  const auto deadline = SteadyClock::now() + timeout;
  while (SteadyClock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(10ms);  // polling a condition, bounded by the deadline
  }
  return cond();
}

RelayConfig relay_config(const std::string& url) {
  RelayConfig c;
  c.store_url = url;
  c.producer.bootstrap_servers = broker().bootstrap_servers();
  c.producer.kafka = {{"log_level", "2"}, {"reconnect.backoff.max.ms", "500"}};
  c.batch_size = 100;
  c.rebalance_interval = 200ms;
  c.poll_interval = 50ms;
  c.progress_interval = 0ms;
  return c;
}

std::size_t topic_size(const std::string& topic, int partitions) {
  std::size_t n = 0;
  for (const auto o : test::end_offsets(broker().bootstrap_servers(), topic, partitions)) {
    n += static_cast<std::size_t>(o);
  }
  return n;
}

template <class Backend>
class RelayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = Backend::fresh_url();
    if (url_.empty()) return;  // skipped (or failed under CI)
    store_ = open_store(url_);
    store_->migrate();
    topic_ = unique_topic("relay-orders");
    broker().create_topic(topic_, 3);
  }

  /// Creates and confirms `n` orders; returns order id -> event id.
  std::map<std::int64_t, Uuid> confirm_orders(std::int64_t first, std::int64_t n) {
    OrderServiceConfig config;
    config.topic = topic_;
    OrderService service(outbox_, config);
    std::map<std::int64_t, Uuid> out;
    for (std::int64_t id = first; id < first + n; ++id) {
      {
        auto tx = store_->begin();
        service.create(*tx, id, 1 + id % 13, Amount::from_hundredths(100 + id));
        tx->commit();
      }
      const auto c = service.confirm(*store_, id);
      EXPECT_TRUE(c.has_value());
      if (c) out[id] = c->event_id;
    }
    return out;
  }

  std::int64_t unpublished() {
    return Backend::read_scalar(*store_, "SELECT count(*) FROM outbox WHERE published_at IS NULL");
  }

  /// Reads the whole topic and checks every message against `expected`: key = order id,
  /// event_id header = payload event_id = the outbox row's id. Returns first occurrences
  /// per order id, and counts all messages per order in `copies`.
  void check_topic(const std::map<std::int64_t, Uuid>& expected, bool exactly_once) {
    const std::size_t total = topic_size(topic_, 3);
    if (exactly_once) {
      EXPECT_EQ(total, expected.size()) << "exactly one message per confirmed order";
    }
    const auto records = test::read_topic(broker().bootstrap_servers(), topic_, 3, total, 30s);
    ASSERT_EQ(records.size(), total);
    std::map<std::int64_t, int> copies;
    for (const auto& r : records) {
      const auto event = parse_order_confirmed(r.payload);
      ASSERT_TRUE(event.ok()) << r.payload;
      const OrderConfirmed& e = event.value();
      EXPECT_EQ(r.key, std::to_string(e.order_id)) << "keyed by order_id";
      EXPECT_EQ(r.header("event_id").value_or(""), e.event_id.to_string());
      const auto it = expected.find(e.order_id);
      ASSERT_NE(it, expected.end()) << "an order that was never confirmed: " << e.order_id;
      EXPECT_EQ(e.event_id, it->second) << "a resend must carry the id born with the event";
      ++copies[e.order_id];
    }
    for (const auto& [order, id] : expected) {
      EXPECT_GE(copies[order], 1) << "confirmed order " << order << " is missing";
    }
  }

  std::string url_;
  std::string topic_;
  std::unique_ptr<Store> store_;
  Outbox outbox_;
};

TYPED_TEST_SUITE(RelayTest, test::AllBackends, test::BackendName);

TYPED_TEST(RelayTest, PublishesEveryConfirmedOrderExactlyOnceKeyedByOrderId) {
  if (this->url_.empty()) return;
  const auto expected = this->confirm_orders(1, 500);
  Relay relay(relay_config(this->url_));
  ASSERT_TRUE(relay.run_until_empty(60s));
  EXPECT_EQ(this->unpublished(), 0);
  EXPECT_EQ(relay.progress().published, 500U);
  this->check_topic(expected, /*exactly_once=*/true);
}

TYPED_TEST(RelayTest, RolledBackConfirmationLeavesNoRowAndNoMessage) {
  if (this->url_.empty()) return;
  auto kept = this->confirm_orders(1, 3);
  OrderServiceConfig config;
  config.topic = this->topic_;
  OrderService service(this->outbox_, config);
  {
    auto tx = this->store_->begin();
    service.create(*tx, 100, 5, Amount::from_hundredths(999));
    tx->commit();
  }
  {
    auto tx = this->store_->begin();
    ASSERT_TRUE(service.confirm(*tx, 100).has_value());
    tx->rollback();  // the business transaction fails after the enqueue
  }
  EXPECT_EQ(TypeParam::read_scalar(*this->store_, "SELECT count(*) FROM outbox"), 3);
  Relay relay(relay_config(this->url_));
  ASSERT_TRUE(relay.run_until_empty(60s));
  this->check_topic(kept, /*exactly_once=*/true);  // order 100 would fail "never confirmed"
}

TYPED_TEST(RelayTest, KeepsOrderPerKeyAcrossBatches) {
  if (this->url_.empty()) return;
  // 20 keys x 30 events, interleaved; payload "key:seq".
  constexpr int kKeys = 20;
  constexpr int kPerKey = 30;
  for (int seq = 0; seq < kPerKey; ++seq) {
    auto tx = this->store_->begin();
    for (int k = 0; k < kKeys; ++k) {
      this->outbox_.enqueue(*tx, [&](const Uuid&) {
        return OutboxMessage{"thing", fmt::format("k{}", k), this->topic_,
                             fmt::format("k{}:{}", k, seq), {}, {}};
      });
    }
    tx->commit();
  }
  RelayConfig c = relay_config(this->url_);
  c.batch_size = 37;  // batches cut keys at odd places
  Relay relay(c);
  ASSERT_TRUE(relay.run_until_empty(60s));
  const auto records = test::read_topic(broker().bootstrap_servers(), this->topic_, 3,
                                        kKeys * kPerKey, 30s);
  ASSERT_EQ(records.size(), static_cast<std::size_t>(kKeys * kPerKey));
  std::map<std::string, int> next;
  for (const auto& r : records) {
    const auto colon = r.payload.find(':');
    EXPECT_EQ(r.key, r.payload.substr(0, colon));
    EXPECT_EQ(std::stoi(r.payload.substr(colon + 1)), next[r.key]++) << "key " << r.key;
  }
}

TYPED_TEST(RelayTest, CatchesUpAfterTheBrokerWasDown) {
  if (this->url_.empty()) return;
  auto expected = this->confirm_orders(1, 100);
  std::atomic<int> produced{0};
  RelayObserver observer;
  observer.on_step = [&](RelayStep step, std::size_t) {
    if (step == RelayStep::Produced) ++produced;
  };
  Relay relay(relay_config(this->url_), observer);
  std::thread runner([&] { relay.run(); });
  ASSERT_TRUE(eventually([&] { return this->unpublished() == 0; }, 60s));

  broker().set_broker_down(1);
  const int before = produced.load();
  const auto more = this->confirm_orders(101, 200);
  expected.insert(more.begin(), more.end());
  // The relay claims and sends while the broker is down; nothing can be acknowledged.
  EXPECT_TRUE(eventually([&] { return produced.load() > before; }, 30s));
  EXPECT_GT(this->unpublished(), 0);
  broker().set_broker_up(1);
  EXPECT_TRUE(eventually([&] { return this->unpublished() == 0; }, 90s))
      << "the relay did not catch up after the broker came back";
  relay.request_stop();
  runner.join();
  this->check_topic(expected, /*exactly_once=*/false);
}

#ifdef IDEM_TEST_HAVE_POSTGRES_BACKEND
class RelayPostgres : public RelayTest<test::PostgresBackend> {};

TEST_F(RelayPostgres, TwoRelaysAtOnceLoseNothingAndKeepPerKeyOrder) {
  if (url_.empty()) return;
  constexpr int kKeys = 50;
  constexpr int kPerKey = 40;
  RelayConfig c = relay_config(url_);
  c.batch_size = 50;
  Relay a(c);
  Relay b(c);
  std::thread ta([&] { a.run(); });
  std::thread tb([&] { b.run(); });
  // Enqueue while both relays run and rebalance shards between them.
  for (int seq = 0; seq < kPerKey; ++seq) {
    auto tx = store_->begin();
    for (int k = 0; k < kKeys; ++k) {
      outbox_.enqueue(*tx, [&](const Uuid&) {
        return OutboxMessage{"thing", fmt::format("k{}", k), topic_, fmt::format("k{}:{}", k, seq),
                             {}, {}};
      });
    }
    tx->commit();
    if (seq % 8 == 0) std::this_thread::sleep_for(100ms);  // let rebalancing happen mid-stream
  }
  EXPECT_TRUE(eventually([&] { return unpublished() == 0; }, 60s));
  a.request_stop();
  b.request_stop();
  ta.join();
  tb.join();
  EXPECT_GT(a.progress().published, 0U) << "both relays should have taken shards";
  EXPECT_GT(b.progress().published, 0U) << "both relays should have taken shards";
  const std::size_t total = topic_size(topic_, 3);
  const auto records = test::read_topic(broker().bootstrap_servers(), topic_, 3, total, 30s);
  ASSERT_EQ(records.size(), total);
  std::map<std::string, int> next;  // next expected first occurrence per key
  std::set<std::string> payloads;
  for (const auto& r : records) {
    const auto colon = r.payload.find(':');
    const int seq = std::stoi(r.payload.substr(colon + 1));
    if (!payloads.insert(r.payload).second) continue;  // a duplicate: harmless
    EXPECT_EQ(seq, next[r.key]++) << "key " << r.key << " out of order";
  }
  EXPECT_EQ(payloads.size(), static_cast<std::size_t>(kKeys * kPerKey)) << "nothing lost";
}
#endif

}  // namespace
}  // namespace idem
