// The consumer's two passes with deferred handler SQL (Transaction::execute_deferred), on
// every backend: a clean batch commits from the optimistic pass with each handler run
// once; a batch in which one handler's deferred statement fails is rolled back and run
// again with a savepoint per event, so that event is dead-lettered and every other event
// of the batch commits exactly once.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "idem/consumer.hpp"
#include "idem/devtools/dev_broker.hpp"
#include "idem/reference/count_handler.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "support/consumer_scenario.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/store_backends.hpp"
#include "support/wait.hpp"

namespace idem::test {
namespace consumer_deferred_test {

using namespace std::chrono_literals;

template <class Backend>
class ConsumerDeferredTest : public OrderEventsSuite<Backend> {
 protected:
  static constexpr int kEvents = 40;

  void SetUp() override { this->set_up_orders(kEvents); }

  /// Runs a consumer with `handler` until `done` holds (30 s deadline), then stops it.
  void consume(Handler<OrderConfirmed> handler, const std::function<bool(const Consumer&)>& done) {
    ConsumerConfig c = test::mock_consumer_config(this->broker_->bootstrap_servers(), this->group_,
                                                  {this->topic_});
    c.batch_size = 1000;
    c.batch_window = 1s;  // the whole topic in one batch
    c.retry = RetryPolicy{};
    std::unique_ptr<Consumer> consumer = std::make_unique<Consumer>(c, open_store(this->url_));
    consumer->on<OrderConfirmed>(this->topic_, std::move(handler));
    const Consumer& observed = *consumer;
    RunningConsumer running(std::move(consumer));
    const bool reached = eventually([&] { return done(observed); }, 30s, 20ms);
    ASSERT_TRUE(running.stop());
    if (running.error()) std::rethrow_exception(running.error());
    ASSERT_TRUE(reached) << "the consumer did not get there within 30 s";
  }

  std::int64_t rows(const std::string& sql, const Uuid& id) {
    auto tx = this->observer_->begin();
    return tx->execute(sql, id, this->group_)[0].int64(0);
  }
};

TYPED_TEST_SUITE(ConsumerDeferredTest, AllBackends, BackendName);

TYPED_TEST(ConsumerDeferredTest, CleanBatchRunsEachHandlerOnce) {
  std::atomic<int> calls{0};
  this->consume(
      [&](const OrderConfirmed& e, const RecordInfo& r, Transaction& tx) {
        ++calls;
        record_effect(tx, e.event_id, r);
        return Outcome::Done;
      },
      [&](const Consumer& c) { return c.stats().processed >= TestFixture::kEvents; });
  EXPECT_EQ(calls.load(), TestFixture::kEvents) << "a clean batch fell back to the isolated pass";
  EXPECT_EQ(count_effects(*this->observer_, this->group_), TestFixture::kEvents);
  EXPECT_EQ(max_effects_per_event(*this->observer_, this->group_), 1);
}

TYPED_TEST(ConsumerDeferredTest, FailingDeferredStatementLosesOnlyItsEvent) {
  constexpr std::int64_t kPoison = 17;  // mid-batch
  std::mutex mu;
  std::map<std::int64_t, int> calls;
  this->consume(
      [&](const OrderConfirmed& e, const RecordInfo& r, Transaction& tx) {
        {
          const std::lock_guard lock(mu);
          ++calls[e.order_id];
        }
        record_effect(tx, e.event_id, r);
        if (e.order_id == kPoison) {
          // customer_id NOT NULL: a constraint violation, never transient. On PostgreSQL
          // it surfaces only when the batch's deferred statements run.
          tx.execute_deferred(
              "INSERT INTO orders (id, customer_id, total_amount, created_at) "
              "VALUES ($1, $2, $3, $4)",
              e.order_id, nullptr, "1.00", "2026-01-02T03:04:05Z");
        }
        return Outcome::Done;
      },
      [&](const Consumer& c) {
        return c.stats().processed >= TestFixture::kEvents - 1 && c.stats().dead_lettered >= 1;
      });

  EXPECT_EQ(count_effects(*this->observer_, this->group_), TestFixture::kEvents - 1);
  EXPECT_EQ(max_effects_per_event(*this->observer_, this->group_), 1);
  const Uuid poison = this->ids_.at(kPoison);
  EXPECT_EQ(
      this->rows("SELECT count(*) FROM effect_log WHERE event_id = $1 AND consumer_group = $2",
                 poison),
      0);
  EXPECT_EQ(this->rows("SELECT count(*) FROM processed_event WHERE event_id = $1 AND "
                       "consumer_group = $2",
                       poison),
            0)
      << "the dead-lettered event stayed marked";
  {
    const std::lock_guard lock(mu);
    EXPECT_GE(calls[kPoison], 2) << "no isolated pass ran after the failure";
  }
  const auto dlq = read_topic(this->broker_->bootstrap_servers(), this->topic_ + ".dlq", 1, 1, 20s);
  ASSERT_EQ(dlq.size(), 1u);
  EXPECT_EQ(dlq[0].header("idem.error.class"), "handler.exception");
  EXPECT_EQ(dlq[0].header("idem.original.offset"), std::to_string(kPoison - 1));
  EXPECT_EQ(committed_offsets(this->broker_->bootstrap_servers(), this->group_, this->topic_, 1),
            std::vector<std::int64_t>{TestFixture::kEvents});
}

// PostgreSQL merges the batch's consecutive deferred INSERTs of one text into multi-row
// statements, so here the poison row travels in the same statement as every
// other event's row: that statement fails as a whole, the isolated pass runs each event's
// INSERT on its own, and only the poison event is dead-lettered.
TYPED_TEST(ConsumerDeferredTest, FailingRowOfAMergedStatementLosesOnlyItsEvent) {
  constexpr std::int64_t kPoison = 23;
  std::atomic<int> poison_calls{0};
  this->consume(
      [&](const OrderConfirmed& e, const RecordInfo&, Transaction& tx) {
        if (e.order_id == kPoison) ++poison_calls;
        // customer_id NOT NULL fails the poison event's row only.
        tx.execute_deferred(
            "INSERT INTO orders (id, customer_id, total_amount, created_at) "
            "VALUES ($1, $2, $3, $4)",
            e.order_id, e.order_id == kPoison ? Param(nullptr) : Param(e.customer_id), "1.00",
            "2026-01-02T03:04:05Z");
        return Outcome::Done;
      },
      [&](const Consumer& c) {
        return c.stats().processed >= TestFixture::kEvents - 1 && c.stats().dead_lettered >= 1;
      });

  auto tx = this->observer_->begin();
  EXPECT_EQ(tx->execute("SELECT count(*) FROM orders")[0].int64(0), TestFixture::kEvents - 1);
  EXPECT_EQ(tx->execute("SELECT count(*) FROM orders WHERE id = $1", kPoison)[0].int64(0), 0);
  tx->rollback();
  EXPECT_GE(poison_calls.load(), 2) << "no isolated pass ran after the failure";
  const auto dlq = read_topic(this->broker_->bootstrap_servers(), this->topic_ + ".dlq", 1, 1, 20s);
  ASSERT_EQ(dlq.size(), 1u);
  EXPECT_EQ(dlq[0].header("idem.original.offset"), std::to_string(kPoison - 1));
  EXPECT_EQ(committed_offsets(this->broker_->bootstrap_servers(), this->group_, this->topic_, 1),
            std::vector<std::int64_t>{TestFixture::kEvents});
}

}  // namespace consumer_deferred_test
}  // namespace idem::test
