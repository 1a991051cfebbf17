// Consumer::on_effect on every backend: call phases run outside any
// transaction and concurrently across keys, one after another within a key in offset
// order; each event is applied exactly once; a key whose calls keep failing holds back
// only itself. The call side is a DelayedCalls stand-in for an asynchronous HTTP client
// (a fixed latency per call). Waits are conditions with deadlines, never sleeps; nothing
// asserts on timing.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/consumer.hpp"
#include "idem/reference/count_handler.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "support/consumer_scenario.hpp"
#include "support/delayed_calls.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/store_backends.hpp"
#include "support/wait.hpp"

namespace idem::test {
namespace concurrent_effects_test {

using namespace std::chrono_literals;

constexpr int kPartitions = 4;

/// What the call side saw, per ordering key, and whether two calls of a key overlapped.
class CallLog {
 public:
  void started(const std::string& key, std::int64_t order_id) {
    std::lock_guard lock(mutex_);
    if (!in_flight_.insert(key).second) ++overlaps_;
    order_[key].push_back(order_id);
    ++calls_;
  }
  void ended(const std::string& key) {
    std::lock_guard lock(mutex_);
    in_flight_.erase(key);
  }
  std::map<std::string, std::vector<std::int64_t>> order() const {
    std::lock_guard lock(mutex_);
    return order_;
  }
  int overlaps() const {
    std::lock_guard lock(mutex_);
    return overlaps_;
  }
  int calls() const {
    std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  mutable std::mutex mutex_;
  std::set<std::string> in_flight_;
  std::map<std::string, std::vector<std::int64_t>> order_;
  int overlaps_ = 0;
  int calls_ = 0;
};

/// An effect whose call counts itself and answers after 1 ms, and whose apply records the
/// effect (and runs `also` in the same transaction).
EffectHandler<OrderConfirmed, bool> counted_effect(
    std::atomic<int>& calls, DelayedCalls& client,
    std::function<void(const OrderConfirmed&, Transaction&)> also = {}) {
  return {
      .call =
          [&calls, &client](const OrderConfirmed&, const RecordInfo&, CallCompletion<bool> done) {
            ++calls;
            client.after(1ms, [done] { done.done(true); });
          },
      .apply =
          [also](const OrderConfirmed& e, const RecordInfo& r, const bool&, Transaction& tx) {
            record_effect(tx, e.event_id, r);
            if (also) also(e, tx);
            return Outcome::Done;
          },
      .ordering_key = {}};
}

template <class Backend>
class ConcurrentEffectsTest : public DevBrokerSuite {
 protected:
  void SetUp() override {
    url_ = Backend::fresh_url();
    if (IsSkipped() || HasFatalFailure()) return;
    migrate_reference_system(*open_store(url_));
    observer_ = open_store(url_);
    topic_ = unique_name("orders");
    group_ = unique_name("g");
    broker_->create_topic(topic_, kPartitions);
    broker_->create_topic(topic_ + ".dlq", 1);
  }

  /// Produces `orders` events, order i keyed `key_of(i)`; remembers each key's order ids
  /// in offset order.
  void produce(int orders, const std::function<std::string(std::int64_t)>& key_of) {
    expected_ = produce_keyed_order_events(broker_->bootstrap_servers(), topic_, orders, key_of)
                    .order_ids_by_key;
    total_ = orders;
  }

  std::unique_ptr<Consumer> make_consumer(std::size_t max_in_flight, std::size_t window = 4096,
                                          ConsumerHooks hooks = {}) {
    ConsumerConfig c = mock_consumer_config(broker_->bootstrap_servers(), group_, {topic_});
    c.batch_size = 500;
    c.max_in_flight = max_in_flight;
    c.max_buffered_per_partition = window;
    return std::make_unique<Consumer>(c, open_store(url_), std::move(hooks));
  }

  struct RunOutcome {
    bool stopped = false;  ///< Consumer::stop() returned true
    bool done = false;     ///< `done` held before the deadline
    ConsumerStats stats;   ///< after the stop
  };
  /// Runs `consumer` until `done(stats)` holds (60 s at most), then stops it; rethrows
  /// what run() threw.
  RunOutcome run_until(std::unique_ptr<Consumer> consumer,
                       const std::function<bool(const ConsumerStats&)>& done) {
    const Consumer& observed = *consumer;
    RunningConsumer running(std::move(consumer));
    RunOutcome out;
    out.done = eventually([&] { return done(observed.stats()); }, 60s, 20ms);
    out.stopped = running.stop();
    if (running.error()) std::rethrow_exception(running.error());
    out.stats = observed.stats();
    return out;
  }

  /// effect_log rows of this group by the record's key (via order id -> key).
  std::int64_t effects() { return count_effects(*observer_, group_); }

  std::string url_;
  std::unique_ptr<Store> observer_;
  std::string topic_;
  std::string group_;
  int total_ = 0;
  std::map<std::string, std::vector<std::int64_t>> expected_;
};

TYPED_TEST_SUITE(ConcurrentEffectsTest, AllBackends, BackendName);

// (a) 5,000 orders over 200 keys, 20 ms per call, up to 512 in flight, at most 200 records
// held per partition.
TYPED_TEST(ConcurrentEffectsTest, CallsEachKeyInOffsetOrderAndAppliesEachOrderOnce) {
  if (this->IsSkipped()) return;
  constexpr int kOrders = 5000;
  constexpr int kKeys = 200;
  this->produce(kOrders, [](std::int64_t id) { return fmt::format("customer-{}", id % kKeys); });

  CallLog calls_seen;
  DelayedCalls client;
  // A window of 200 records per partition (of ~1,250 each): partitions pause and resume.
  std::unique_ptr<Consumer> consumer = this->make_consumer(512, 200);
  consumer->on_effect(
      this->topic_,
      EffectHandler<OrderConfirmed, std::int64_t>{
          .call =
              [&](const OrderConfirmed& e, const RecordInfo& r, CallCompletion<std::int64_t> done) {
                const std::string key(r.key);
                calls_seen.started(key, e.order_id);
                client.after(20ms, [&calls_seen, key, done, id = e.order_id] {
                  calls_seen.ended(key);
                  done.done(id);
                });
              },
          .apply =
              [](const OrderConfirmed& e, const RecordInfo& r, const std::int64_t& answered,
                 Transaction& tx) {
                if (answered != e.order_id) return Outcome::DeadLetter;
                record_effect(tx, e.event_id, r);
                return Outcome::Done;
              },
          .ordering_key = {}});
  const Consumer& observed = *consumer;
  RunningConsumer running(std::move(consumer));
  const bool all = eventually([&] { return observed.stats().processed >= kOrders; }, 120s, 50ms);
  const std::vector<std::int64_t> end =
      end_offsets(this->broker_->bootstrap_servers(), this->topic_, kPartitions);
  const bool committed = eventually(
      [&] {
        return group_caught_up(this->broker_->bootstrap_servers(), this->group_, this->topic_, end);
      },
      60s, 100ms);
  ASSERT_TRUE(running.stop());
  if (running.error()) std::rethrow_exception(running.error());
  ASSERT_TRUE(all) << "processed " << observed.stats().processed << " of " << kOrders;
  EXPECT_TRUE(committed) << "the group did not commit every partition to its end";

  EXPECT_EQ(calls_seen.overlaps(), 0) << "two calls of one key were in flight at once";
  EXPECT_EQ(calls_seen.order(), this->expected_) << "some key's calls did not run in offset order";
  EXPECT_EQ(this->effects(), kOrders);
  EXPECT_EQ(max_effects_per_event(*this->observer_, this->group_), 1);
  const ConsumerStats s = observed.stats();
  EXPECT_EQ(s.calls, static_cast<std::uint64_t>(kOrders));
  EXPECT_EQ(s.processed, static_cast<std::uint64_t>(kOrders));
}

// (c) One key's calls fail until the test lets them succeed: every other key is applied
// meanwhile; then that key's events are applied, in order.
TYPED_TEST(ConcurrentEffectsTest, AFailingKeyHoldsBackOnlyItself) {
  if (this->IsSkipped()) return;
  constexpr int kOrders = 600;
  constexpr int kKeys = 20;
  const std::string bad = "customer-3";
  this->produce(kOrders, [](std::int64_t id) { return fmt::format("customer-{}", id % kKeys); });
  const auto bad_count = static_cast<std::int64_t>(this->expected_.at(bad).size());

  std::atomic<bool> recovered{false};
  std::atomic<int> failed_calls{0};
  std::mutex applied_mutex;
  std::vector<std::int64_t> bad_applied;  // order ids of the bad key, in apply order
  DelayedCalls client;
  std::unique_ptr<Consumer> consumer = this->make_consumer(64);
  consumer->on_effect(
      this->topic_,
      EffectHandler<OrderConfirmed, bool>{
          .call =
              [&](const OrderConfirmed&, const RecordInfo& r, CallCompletion<bool> done) {
                const bool fail = r.key == bad && !recovered.load();
                client.after(5ms, [&failed_calls, fail, done] {
                  if (!fail) return done.done(true);
                  ++failed_calls;
                  done.retry("provider unavailable (test)");
                });
              },
          .apply =
              [&](const OrderConfirmed& e, const RecordInfo& r, const bool&, Transaction& tx) {
                if (r.key == bad) {
                  std::lock_guard lock(applied_mutex);
                  bad_applied.push_back(e.order_id);
                }
                record_effect(tx, e.event_id, r);
                return Outcome::Done;
              },
          .ordering_key = {}});
  const Consumer& observed = *consumer;
  RunningConsumer running(std::move(consumer));

  const bool others = eventually(
      [&] { return observed.stats().processed >= static_cast<std::uint64_t>(kOrders - bad_count); },
      120s, 50ms);
  EXPECT_TRUE(others) << "the other keys were not all applied while one key failed";
  EXPECT_GT(failed_calls.load(), 0);
  {
    std::lock_guard lock(applied_mutex);
    EXPECT_TRUE(bad_applied.empty()) << "the failing key was applied before it recovered";
  }
  recovered.store(true);
  const bool all =
      eventually([&] { return observed.stats().processed >= static_cast<std::uint64_t>(kOrders); },
                 120s, 50ms);
  ASSERT_TRUE(running.stop());
  if (running.error()) std::rethrow_exception(running.error());
  ASSERT_TRUE(all) << "processed " << observed.stats().processed << " of " << kOrders;

  // The apply phase may run twice for one event (a batch re-run isolated); the order of
  // first appearances is what must follow the offsets.
  std::vector<std::int64_t> first_seen;
  std::set<std::int64_t> seen;
  for (const auto id : bad_applied) {
    if (seen.insert(id).second) first_seen.push_back(id);
  }
  EXPECT_EQ(first_seen, this->expected_.at(bad));
  EXPECT_EQ(this->effects(), kOrders);
  EXPECT_EQ(max_effects_per_event(*this->observer_, this->group_), 1);
  EXPECT_GT(observed.stats().call_retries, 0u);
}

// A redelivered event (a resend: same event id, new offset) makes no second call. The
// apply transactions are reported to ConsumerHooks::on_batch (metrics) like batches.
TYPED_TEST(ConcurrentEffectsTest, ADuplicateMakesNoCall) {
  if (this->IsSkipped()) return;
  OrderConfirmed e;
  e.event_id = new_uuid_v7();
  e.occurred_at =
      std::chrono::time_point_cast<std::chrono::microseconds>(std::chrono::system_clock::now());
  e.order_id = 1;
  e.customer_id = 7;
  e.total_amount = Amount::from_hundredths(500);
  {
    KafkaTestProducer producer(this->broker_->bootstrap_servers());
    for (int i = 0; i < 3; ++i)  // the same record three times: one key, so one after another
      producer.send({this->topic_, "k", to_json(e), {{"event_id", e.event_id.to_string()}}, -1});
    producer.send({this->topic_, "k", "not json", {}, -1});  // and a malformed one
    producer.flush(30s);
  }
  std::atomic<int> calls{0};
  std::atomic<std::size_t> reported_records{0};
  std::atomic<int> committed_batches{0};
  ConsumerHooks hooks;
  hooks.on_batch = [&](const BatchReport& b) {
    reported_records += b.records;
    if (b.committed) ++committed_batches;
  };
  DelayedCalls client;
  std::unique_ptr<Consumer> consumer = this->make_consumer(8, 4096, std::move(hooks));
  consumer->on_effect(this->topic_, counted_effect(calls, client));
  const auto run = this->run_until(std::move(consumer), [](const ConsumerStats& s) {
    return s.processed == 1 && s.duplicates == 2 && s.dead_lettered == 1;
  });
  ASSERT_TRUE(run.stopped);
  EXPECT_TRUE(run.done) << "processed=" << run.stats.processed
                        << " duplicates=" << run.stats.duplicates
                        << " dead_lettered=" << run.stats.dead_lettered;
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(this->effects(), 1);
  EXPECT_EQ(reported_records.load(), 4u) << "each record is applied in one reported transaction";
  EXPECT_GE(committed_batches.load(), 1);
}

// Events marked before they are polled (a redelivery after a crash between the apply
// transaction's commit and the offset commit) are found by the one read of the marks
// when their batch is admitted: none of them is called, each counts as a duplicate, and
// the unmarked ones are called once each.
TYPED_TEST(ConcurrentEffectsTest, EventsMarkedBeforeTheyArePolledMakeNoCall) {
  if (this->IsSkipped()) return;
  constexpr int kOrders = 40;
  const KeyedOrderEvents produced =
      produce_keyed_order_events(this->broker_->bootstrap_servers(), this->topic_, kOrders,
                                 [](std::int64_t id) { return std::to_string(id); });
  {
    auto tx = this->observer_->begin();  // every other event is marked already
    for (const auto& [order_id, event_id] : produced.event_ids) {
      if (order_id % 2 == 1) {
        ASSERT_TRUE(tx->mark_processed(event_id, this->group_));
      }
    }
    tx->commit();
  }
  std::atomic<int> calls{0};
  DelayedCalls client;
  std::unique_ptr<Consumer> consumer = this->make_consumer(64);
  consumer->on_effect(this->topic_, counted_effect(calls, client));
  const auto run = this->run_until(std::move(consumer), [](const ConsumerStats& s) {
    return s.processed + s.duplicates == static_cast<std::uint64_t>(kOrders);
  });
  ASSERT_TRUE(run.stopped);
  EXPECT_TRUE(run.done);
  EXPECT_EQ(run.stats.duplicates, static_cast<std::uint64_t>(kOrders / 2));
  EXPECT_EQ(calls.load(), kOrders / 2) << "a marked event was called";
  EXPECT_EQ(this->effects(), kOrders / 2);
}

#ifdef IDEM_TEST_HAVE_POSTGRES_BACKEND
class ConcurrentEffectsPostgres : public ConcurrentEffectsTest<PostgresBackend> {};

// An apply transaction's COMMIT runs beside the run() thread: while one cannot finish,
// the calls of the events after it still start and complete. The COMMIT is held by a
// deferred constraint trigger that waits for an advisory lock this test holds.
TEST_F(ConcurrentEffectsPostgres, CallsGoOnWhileAnApplyTransactionCommits) {
  if (IsSkipped()) return;
  constexpr int kOrders = 100;
  constexpr std::int64_t kGate = 4242;
  {
    auto tx = observer_->begin();
    tx->execute("CREATE TABLE commit_gate (order_id bigint NOT NULL)");
    tx->execute(
        "CREATE FUNCTION wait_for_the_gate() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NULL; END $$");
    tx->execute(
        "CREATE CONSTRAINT TRIGGER wait_for_the_gate AFTER INSERT ON commit_gate "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION wait_for_the_gate()");
    tx->commit();
  }
  const std::unique_ptr<Store> gate = open_store(url_);
  const auto set_gate = [&](std::string_view fn) {
    auto tx = gate->begin();
    tx->execute(fmt::format("SELECT {}($1)", fn), kGate);
    tx->commit();
  };
  set_gate("pg_advisory_lock");  // closed: every apply transaction waits in its COMMIT
  struct OpenAtExit {
    std::function<void()> unlock;
    bool closed = true;
    void open() {
      if (std::exchange(closed, false)) unlock();
    }
    ~OpenAtExit() { open(); }
  } open_at_exit{[&] { set_gate("pg_advisory_unlock"); }};
  produce(kOrders, [](std::int64_t id) { return fmt::format("customer-{}", id); });

  std::atomic<int> calls{0};
  DelayedCalls client;
  std::unique_ptr<Consumer> consumer = make_consumer(8);
  consumer->on_effect(topic_,
                      counted_effect(calls, client, [](const OrderConfirmed& e, Transaction& tx) {
                        tx.execute("INSERT INTO commit_gate(order_id) VALUES ($1)", e.order_id);
                      }));
  const Consumer& observed = *consumer;
  RunningConsumer running(std::move(consumer));
  // 8 in flight at most, and nothing can commit: every call must still be made.
  const bool all_called = eventually([&] { return calls.load() == kOrders; }, 60s, 20ms);
  const int called_while_closed = calls.load();
  const std::uint64_t applied_while_closed = observed.stats().processed;
  open_at_exit.open();
  const bool all = eventually(
      [&] { return observed.stats().processed >= static_cast<std::uint64_t>(kOrders); }, 60s, 20ms);
  ASSERT_TRUE(running.stop());
  if (running.error()) std::rethrow_exception(running.error());
  EXPECT_TRUE(all_called) << "calls stopped at " << called_while_closed << " of " << kOrders
                          << " while an apply transaction waited in its COMMIT";
  EXPECT_EQ(applied_while_closed, 0U) << "an apply committed through the closed gate";
  ASSERT_TRUE(all) << "processed " << observed.stats().processed << " of " << kOrders;
  EXPECT_EQ(calls.load(), kOrders);
  EXPECT_EQ(effects(), kOrders);
  EXPECT_EQ(max_effects_per_event(*observer_, group_), 1);
}
#endif

}  // namespace concurrent_effects_test
}  // namespace idem::test
