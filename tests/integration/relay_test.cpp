// The outbox relay end to end, on SQLite and PostgreSQL, with the shared dev broker:
// every confirmed order on the topic exactly once (keyed by order_id, with its event_id
// in payload and header); a rolled-back confirmation publishes nothing; per-key order
// with many events per key; a broker that goes down and comes back; produce requests
// the broker refuses; retention cleanup; progress and lag reports; and on PostgreSQL two
// relays at once and the LISTEN wake-up. Waits are conditions with deadlines, never
// sleeps.
#include "idem/relay.hpp"
#include "idem/reference/schema.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/devtools/dev_broker.hpp"
#include "idem/error.hpp"
#include "idem/outbox.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/order_service.hpp"
#include "idem/store.hpp"
#include "stores/postgres/pg_conninfo.hpp"
#include "stores/replication.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/shared_broker.hpp"
#include "support/store_backends.hpp"
#include "support/wait.hpp"

namespace idem {
namespace relay_test {

using test::eventually;

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

std::string unique_topic(std::string_view prefix) {
  static std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}-{:012x}", prefix, rng() & 0xffffffffffffULL);
}

/// A name for a table or role of this run: a plain SQL identifier (no '-' to quote).
std::string unique_identifier(std::string_view prefix) {
  std::string name = unique_topic(prefix);
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

RelayConfig relay_config(const std::string& url, const std::string& bootstrap) {
  RelayConfig c;
  c.store_url = url;
  c.producer.bootstrap_servers = bootstrap;
  c.producer.kafka = {{"log_level", "2"}, {"reconnect.backoff.max.ms", "500"}};
  c.batch_size = 100;
  c.rebalance_interval = 200ms;
  c.poll_interval = 50ms;
  c.progress_interval = 0ms;
  return c;
}

/// Takes broker 1 of `broker` down for a scope, so that a failing assertion cannot leave
/// it down for the rest of the test.
struct BrokerDownScope {
  explicit BrokerDownScope(DevBroker& broker) : broker_(broker) { broker_.set_broker_down(1); }
  ~BrokerDownScope() { up(); }
  BrokerDownScope(const BrokerDownScope&) = delete;
  BrokerDownScope& operator=(const BrokerDownScope&) = delete;
  void up() {
    if (down_) broker_.set_broker_up(1);
    down_ = false;
  }
  DevBroker& broker_;
  bool down_ = true;
};

std::size_t topic_size(const std::string& bootstrap, const std::string& topic, int partitions) {
  std::size_t n = 0;
  for (const auto o : test::end_offsets(bootstrap, topic, partitions)) {
    n += static_cast<std::size_t>(o);
  }
  return n;
}

template <class Backend>
class RelayTest : public ::testing::Test {
 protected:
  void SetUp() override { set_up(test::shared_broker()); }

  /// A store, and a topic on `broker`.
  template <class Broker>
  void set_up(Broker& broker) {
    bootstrap_ = broker.bootstrap_servers();
    url_ = Backend::fresh_url();
    if (url_.empty()) return;  // skipped (or failed under CI)
    store_ = open_store(url_);
    idem::migrate_reference_system(*store_);
    topic_ = unique_topic("relay-orders");
    broker.create_topic(topic_, 3);
  }

  [[nodiscard]] RelayConfig config() const { return relay_config(url_, bootstrap_); }

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
    return Backend::read_scalar(*store_,
                                "SELECT count(*) FROM idem_outbox WHERE published_at IS NULL");
  }

  void execute(const std::string& sql) {
    auto tx = store_->begin();
    tx->execute(sql);
    tx->commit();
  }

  /// Moves `column` (created_at or published_at) of the rows matching `where` two hours
  /// into the past. SQLite stores both as Unix milliseconds.
  void two_hours_earlier(const std::string& column, const std::string& where) {
    execute(
        Backend::kind == idem::Backend::Postgres
            ? fmt::format("UPDATE idem_outbox SET {0} = {0} - interval '2 hours' WHERE {1}", column,
                          where)
            : fmt::format("UPDATE idem_outbox SET {0} = {0} - 7200000 WHERE {1}", column, where));
  }

  /// Reads the whole topic and checks every message against `expected`: key = order id,
  /// event_id header = payload event_id = the outbox row's id. Returns first occurrences
  /// per order id, and counts all messages per order in `copies`.
  void check_topic(const std::map<std::int64_t, Uuid>& expected, bool exactly_once) {
    const std::size_t total = topic_size(bootstrap_, topic_, 3);
    if (exactly_once) {
      EXPECT_EQ(total, expected.size()) << "exactly one message per confirmed order";
    }
    const auto records = test::read_topic(this->bootstrap_, topic_, 3, total, 30s);
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

  std::string bootstrap_;
  std::string url_;
  std::string topic_;
  std::unique_ptr<Store> store_;
  Outbox outbox_;
};

TYPED_TEST_SUITE(RelayTest, test::AllBackends, test::BackendName);

/// On a broker of its own: these tests take it down or make it refuse produce requests,
/// which every other client of the shared broker would see.
template <class Backend>
class RelayBrokerFaultTest : public RelayTest<Backend> {
 protected:
  void SetUp() override { this->set_up(private_broker_); }
  DevBroker private_broker_;
};

TYPED_TEST_SUITE(RelayBrokerFaultTest, test::AllBackends, test::BackendName);

TYPED_TEST(RelayTest, PublishesEveryConfirmedOrderExactlyOnceKeyedByOrderId) {
  if (this->url_.empty()) return;
  const auto expected = this->confirm_orders(1, 500);
  Relay relay(this->config());
  ASSERT_TRUE(relay.run_until_empty(60s));
  EXPECT_EQ(this->unpublished(), 0);
  EXPECT_EQ(relay.progress().published, 500U);
  this->check_topic(expected, /*exactly_once=*/true);
}

TYPED_TEST(RelayTest, MarksEveryRowOnceWithMarksInlineOrOnSeveralConnections) {
  if (this->url_.empty()) return;
  // Small batches and a deep pipeline, so several marks are queued and (with more than
  // one mark connection) run at once. Each round publishes only the new orders.
  std::int64_t first = 1;
  std::map<std::int64_t, Uuid> expected;
  for (const std::size_t connections : {0UL, 1UL, 4UL}) {
    SCOPED_TRACE(fmt::format("mark_connections = {}", connections));
    expected.merge(this->confirm_orders(first, 300));
    first += 300;
    RelayConfig c = this->config();
    c.batch_size = 10;
    c.max_batches_in_flight = 16;
    c.mark_connections = connections;
    Relay relay(c);
    ASSERT_TRUE(relay.run_until_empty(60s));
    EXPECT_EQ(this->unpublished(), 0);
    EXPECT_EQ(relay.progress().published, 300U);
    EXPECT_EQ(relay.progress().batches, 30U);
  }
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
  EXPECT_EQ(TypeParam::read_scalar(*this->store_, "SELECT count(*) FROM idem_outbox"), 3);
  Relay relay(this->config());
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
        return OutboxMessage{
            "thing", fmt::format("k{}", k), this->topic_, fmt::format("k{}:{}", k, seq), {}, {}};
      });
    }
    tx->commit();
  }
  RelayConfig c = this->config();
  c.batch_size = 37;  // batches cut keys at odd places
  Relay relay(c);
  ASSERT_TRUE(relay.run_until_empty(60s));
  const auto records = test::read_topic(this->bootstrap_, this->topic_, 3, kKeys * kPerKey, 30s);
  ASSERT_EQ(records.size(), static_cast<std::size_t>(kKeys * kPerKey));
  std::map<std::string, int> next;
  for (const auto& r : records) {
    const auto colon = r.payload.find(':');
    EXPECT_EQ(r.key, r.payload.substr(0, colon));
    EXPECT_EQ(std::stoi(r.payload.substr(colon + 1)), next[r.key]++) << "key " << r.key;
  }
}

TYPED_TEST(RelayBrokerFaultTest, CatchesUpAfterTheBrokerWasDown) {
  if (this->url_.empty()) return;
  auto expected = this->confirm_orders(1, 100);
  std::atomic<int> produced{0};
  RelayObserver observer;
  observer.on_step = [&](RelayStep step, std::size_t) {
    if (step == RelayStep::Produced) ++produced;
  };
  Relay relay(this->config(), observer);
  std::thread runner([&] { relay.run(); });
  ASSERT_TRUE(eventually([&] { return this->unpublished() == 0; }, 60s));

  this->private_broker_.set_broker_down(1);
  const int before = produced.load();
  const auto more = this->confirm_orders(101, 200);
  expected.insert(more.begin(), more.end());
  // The relay claims and sends while the broker is down; nothing can be acknowledged.
  EXPECT_TRUE(eventually([&] { return produced.load() > before; }, 30s));
  EXPECT_GT(this->unpublished(), 0);
  this->private_broker_.set_broker_up(1);
  EXPECT_TRUE(eventually([&] { return this->unpublished() == 0; }, 90s))
      << "the relay did not catch up after the broker came back";
  relay.request_stop();
  runner.join();
  this->check_topic(expected, /*exactly_once=*/false);
}

TYPED_TEST(RelayBrokerFaultTest, RetriesProduceRequestsTheBrokerRefuses) {
  if (this->url_.empty()) return;
  const auto expected = this->confirm_orders(1, 100);
  // The next produce requests fail: first with a retriable error (librdkafka retries),
  // then with a permanent one: the rows of that request are set aside as rejected (or,
  // if librdkafka deems the error fatal, the producer is rebuilt and resends them), and
  // the relay goes on with the rest. Requeued, they are published.
  constexpr int kNotEnoughReplicas = 19;
  constexpr int kTopicAuthorizationFailed = 29;
  constexpr int kProduce = 0;
  const std::array<int, 4> errors = {kNotEnoughReplicas, kNotEnoughReplicas, kNotEnoughReplicas,
                                     kTopicAuthorizationFailed};
  this->private_broker_.push_request_errors(kProduce, errors);
  {
    Relay relay(this->config());
    ASSERT_TRUE(relay.run_until_empty(90s));
  }
  const std::vector<RejectedOutboxRow> rejected = list_rejected_outbox_rows(*this->store_);
  EXPECT_EQ(this->unpublished(), static_cast<std::int64_t>(rejected.size()));
  for (const RejectedOutboxRow& row : rejected) {
    EXPECT_NE(row.reason.find("TOPIC_AUTHORIZATION_FAILED"), std::string::npos) << row.reason;
    EXPECT_TRUE(requeue_rejected_outbox_row(*this->store_, row.id));
  }
  Relay relay(this->config());
  ASSERT_TRUE(relay.run_until_empty(90s));
  EXPECT_EQ(this->unpublished(), 0);
  this->check_topic(expected, /*exactly_once=*/false);
}

TYPED_TEST(RelayTest, RetentionDeletesOnlyOldPublishedRowsInBoundedBatches) {
  if (this->url_.empty()) return;
  auto expected = this->confirm_orders(1, 60);
  {
    Relay first(this->config());
    ASSERT_TRUE(first.run_until_empty(60s));
  }
  // 50 published rows become two hours old; 10 stay recent.
  this->two_hours_earlier("published_at",
                          "id IN (SELECT id FROM idem_outbox ORDER BY id LIMIT 50)");
  // 5 orders confirmed two hours ago and not published yet: old, but never deleted.
  const auto waiting = this->confirm_orders(61, 5);
  expected.insert(waiting.begin(), waiting.end());
  this->two_hours_earlier("created_at", "published_at IS NULL");

  RelayConfig c = this->config();
  c.retention = std::chrono::hours(1);
  c.cleanup_batch = 7;
  c.cleanup_interval = std::chrono::hours(1);  // one round, when the relay starts
  std::vector<std::string> logs;
  RelayObserver observer;
  observer.log = [&](std::string_view line) {
    logs.emplace_back(line);
  };  // relay thread = this one
  Relay relay(c, observer);
  ASSERT_TRUE(relay.run_until_empty(60s));
  EXPECT_EQ(relay.progress().cleaned, 50U);
  EXPECT_EQ(TypeParam::read_scalar(*this->store_, "SELECT count(*) FROM idem_outbox"), 15)
      << "the 10 recent published rows and the 5 old unpublished ones stay";
  EXPECT_EQ(this->unpublished(), 0);
  // 50 rows in DELETEs of at most 7: seven full batches and one of 1.
  bool batched = false;
  std::string all_logs;
  for (const auto& line : logs) {
    all_logs += line + "\n";
    if (line.find("cleanup deleted 50 ") != std::string::npos &&
        line.find("in 8 batch(es) of at most 7") != std::string::npos) {
      batched = true;
    }
  }
  EXPECT_TRUE(batched) << "no cleanup log line with 50 rows in 8 batches of at most 7:\n"
                       << all_logs;
  // The old unpublished rows were published after the cleanup, not deleted by it.
  this->check_topic(expected, /*exactly_once=*/true);
}

TYPED_TEST(RelayBrokerFaultTest, ReportsTheLagWhileRowsWaitAndNoneOnceDrained) {
  if (this->url_.empty()) return;
  const auto expected = this->confirm_orders(1, 20);
  this->two_hours_earlier("created_at", "true");
  BrokerDownScope down(this->private_broker_);  // nothing can be acknowledged: the rows wait
  RelayConfig c = this->config();
  c.progress_interval = 20ms;
  std::mutex mu;
  std::vector<RelayProgress> reports;
  RelayObserver observer;
  observer.on_progress = [&](const RelayProgress& p) {
    const std::lock_guard lock(mu);
    reports.push_back(p);
  };
  const auto last = [&] {
    const std::lock_guard lock(mu);
    return reports.empty() ? RelayProgress{} : reports.back();
  };
  Relay relay(c, observer);
  std::thread runner([&] { relay.run(); });
  ASSERT_TRUE(eventually([&] { return last().backlog == 20; }, 30s));
  const RelayProgress waiting = last();
  ASSERT_TRUE(waiting.oldest_unpublished_age.has_value()) << "rows wait: the lag must be reported";
  // The oldest row was created two hours ago (give or take this test's own runtime).
  EXPECT_GE(*waiting.oldest_unpublished_age, std::chrono::minutes(119));
  EXPECT_LE(*waiting.oldest_unpublished_age, std::chrono::minutes(130));

  down.up();
  EXPECT_TRUE(eventually([&] { return last().backlog == 0; }, 90s))
      << "the relay did not catch up after the broker came back";
  EXPECT_FALSE(last().oldest_unpublished_age.has_value()) << "drained: no lag to report";
  relay.request_stop();
  runner.join();
  this->check_topic(expected, /*exactly_once=*/false);
}

#ifdef IDEM_TEST_HAVE_POSTGRES_BACKEND
class RelayPostgres : public RelayTest<test::PostgresBackend> {};

TEST_F(RelayPostgres, TwoRelaysAtOnceLoseNothingAndKeepPerKeyOrder) {
  if (url_.empty()) return;
  constexpr int kKeys = 50;  // they fall in 46 distinct shards: more than either half
  constexpr int kPerKey = 40;
  RelayConfig c = config();
  c.batch_size = 50;
  c.progress_interval = 20ms;  // the reports say how many shards each relay owns
  std::atomic<int> owned_by_a{0};
  std::atomic<int> owned_by_b{0};
  const auto observe_ownership = [](std::atomic<int>& owned) {
    RelayObserver o;
    o.on_progress = [&owned](const RelayProgress& p) { owned = p.owned_shards; };
    return o;
  };
  Relay a(c, observe_ownership(owned_by_a));
  Relay b(c, observe_ownership(owned_by_b));
  const auto enqueue = [&](int from_seq, int to_seq) {
    for (int seq = from_seq; seq < to_seq; ++seq) {
      auto tx = store_->begin();
      for (int k = 0; k < kKeys; ++k) {
        outbox_.enqueue(*tx, [&](const Uuid&) {
          return OutboxMessage{
              "thing", fmt::format("k{}", k), topic_, fmt::format("k{}:{}", k, seq), {}, {}};
        });
      }
      tx->commit();
    }
  };
  // Relay a publishes the first half alone; b joins mid-stream, which moves shards
  // between them while rows wait and are in flight.
  std::thread ta([&] { a.run(); });
  enqueue(0, kPerKey / 2);
  std::thread tb([&] { b.run(); });
  // Once the shards are split evenly, each half holds some of the keys (46 distinct
  // shards do not fit in 32): each relay alone can publish its half of the rows enqueued
  // from now on. (EXPECT, not ASSERT: the relay threads must still be stopped and joined.)
  EXPECT_TRUE(eventually(
      [&] { return owned_by_a == kOutboxShards / 2 && owned_by_b == kOutboxShards / 2; }, 30s))
      << "the relays did not split the shards: a owns " << owned_by_a << ", b owns " << owned_by_b;
  enqueue(kPerKey / 2, kPerKey);
  EXPECT_TRUE(eventually([&] { return unpublished() == 0; }, 60s));
  a.request_stop();
  b.request_stop();
  ta.join();
  tb.join();
  EXPECT_GT(a.progress().published, 0U) << "both relays should have taken shards";
  EXPECT_GT(b.progress().published, 0U) << "both relays should have taken shards";
  const std::size_t total = topic_size(bootstrap_, topic_, 3);
  const auto records = test::read_topic(this->bootstrap_, topic_, 3, total, 30s);
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

TEST_F(RelayPostgres, NotifyWakesARelayThatWouldNotPollForAnHour) {
  if (url_.empty()) return;
  RelayConfig c = config();
  c.poll_interval = std::chrono::hours(1);
  c.rebalance_interval = std::chrono::hours(1);  // no other reason to wake up either
  std::atomic<bool> owns{false};
  RelayObserver observer;
  observer.log = [&](std::string_view line) {
    if (line.find(" owns ") != std::string_view::npos) owns = true;
  };
  Relay relay(c, observer);
  std::thread runner([&] { relay.run(); });
  // After its first rebalance the relay claims once (nothing is there) and waits an
  // hour, unless a NOTIFY on idem_outbox wakes it. (Should the confirmation commit
  // before that one claim, the claim would find the row: that can only make this test
  // pass without NOTIFY, never fail with it.)
  ASSERT_TRUE(eventually([&] { return owns.load(); }, 30s));
  const auto expected = confirm_orders(1, 1);
  EXPECT_TRUE(eventually([&] { return unpublished() == 0; }, 30s))
      << "an idle relay with a one-hour poll interval did not publish a new row: "
         "LISTEN/NOTIFY did not wake it";
  relay.request_stop();
  runner.join();
  check_topic(expected, /*exactly_once=*/true);
}

TEST_F(RelayPostgres, FlushingThePrimaryCoversTheWalAnOpenTransactionInserted) {
  if (url_.empty()) return;
  // The replication gate's way out when a batch's position lies in WAL that nobody
  // commits after: an open transaction writes WAL that no commit flushes.
  // (The WAL writer may flush it meanwhile too: this shows the flush suffices, not that
  // nothing else would.)
  const std::string table = unique_identifier("wal_filler");
  {
    auto tx = store_->begin();
    tx->execute(fmt::format("CREATE TABLE {} (n bigint)", table));
    tx->commit();
  }
  const auto writer = open_store(url_);
  auto open_tx = writer->begin();
  open_tx->execute(fmt::format("INSERT INTO {} SELECT g FROM generate_series(1, 20000) g", table));
  detail::WalPosition inserted;
  {
    auto tx = store_->begin_read();
    inserted = detail::wal_insert_position(*tx);
    tx->commit();
  }
  detail::flush_primary_wal(*store_);
  const detail::ReplicationView view = detail::read_replication(*store_);
  EXPECT_EQ(view.timeline, inserted.timeline);
  EXPECT_GE(view.primary_flush_lsn, inserted.lsn)
      << "the primary had not flushed what it had inserted before the flush";
  open_tx->rollback();
}

TEST_F(RelayPostgres, PublishingAfterReplicationNeedsARoleThatMaySeeTheStandbys) {
  if (url_.empty()) return;
  // A role that may read the outbox but not pg_stat_replication's positions.
  const std::string role = unique_identifier("idem_nomon");
  {
    auto tx = store_->begin();
    tx->execute(fmt::format("CREATE ROLE {} LOGIN", role));
    tx->execute(fmt::format("GRANT SELECT ON idem_schema_migrations TO {}", role));
    tx->commit();
  }
  const auto params = *detail::pg::parse_conninfo(url_);
  const std::string as_role =
      fmt::format("postgresql:host={} port={} dbname={} user={}", params.at("host"),
                  params.at("port"), params.at("dbname"), role);
  RelayConfig c = relay_config(as_role, bootstrap_);
  c.publish_after = PublishAfter::Replicated;
  try {
    Relay relay(c);
    ADD_FAILURE() << "a relay that cannot see the standbys' positions started";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("GRANT pg_monitor TO"), std::string::npos) << e.what();
  }
  {
    auto tx = store_->begin();
    tx->execute(fmt::format("GRANT pg_monitor TO {}", role));
    tx->commit();
  }
  // Sees them now, but without relay.standbys only the standbys the primary makes
  // synchronous count, and this server makes none: nothing would ever be published.
  try {
    Relay relay(c);
    ADD_FAILURE() << "a relay that could never count a standby started";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("synchronous_standby_names is empty"), std::string::npos)
        << e.what();
  }
  c.standbys = {"standby_a"};
  Relay relay(c);  // declared (not connected: nothing would be published yet)
}
#endif

TEST(RelaySqlite, RefusesToPublishAfterReplicationWithoutStandbys) {
  const std::string url = test::SqliteBackend::fresh_url();
  open_store(url)->migrate();  // a store the relay would otherwise accept
  RelayConfig c = relay_config(url, test::shared_broker().bootstrap_servers());
  c.publish_after = PublishAfter::Replicated;
  try {
    Relay relay(c);
    ADD_FAILURE() << "a SQLite relay accepted publish_after = replicated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a PostgreSQL store"), std::string::npos)
        << e.what();
  }
}

}  // namespace relay_test
}  // namespace idem
