// The table of store errors (docs/store-errors.md) on a PostgreSQL server: each class raised
// for real (`RAISE EXCEPTION ... USING ERRCODE`) through the store API, and through the
// consumer, whose handler's statement raises it: retried until it succeeds, dead-lettered
// alone, or the consumer stops and says why, never a server fault dead-lettered.
//
// Needs IDEM_TEST_PG_DSN (scripts/with-postgres.sh sets it) and the shared dev broker.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/consumer.hpp"
#include "idem/error.hpp"
#include "idem/reference/count_handler.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "stores/store_errors.hpp"
#include "support/dead_letters.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/postgres_test_db.hpp"
#include "support/store_backends.hpp"
#include "support/wait.hpp"

namespace idem {
namespace store_error_outcomes_test {

using namespace std::chrono_literals;
using enum StoreErrorOutcome;

struct Case {
  std::string sqlstate;
  StoreErrorOutcome outcome;
};

// A function the handlers call: raises `code` as PostgreSQL raises any error.
constexpr const char* kRaiseFunction =
    "CREATE FUNCTION raise_sqlstate(code text) RETURNS void LANGUAGE plpgsql AS $$ BEGIN "
    "RAISE EXCEPTION 'raised %', code USING ERRCODE = code; END $$";

TEST(StoreErrorOutcomes, EachClassRaisedByTheServerThroughTheStoreApi) {
  IDEM_FRESH_POSTGRES_URL(url);
  auto store = open_store(url);
  const std::vector<Case> cases = {
      {"08006", Retry},      {"25P03", Retry},      {"40001", Retry},      {"40P01", Retry},
      {"53100", Retry},      {"53200", Retry},      {"55P03", Retry},      {"57014", Retry},
      {"57P01", Retry},      {"58000", Retry},      {"58030", Retry},      {"58P01", Retry},
      {"72000", Retry},      {"20000", DeadLetter}, {"21000", DeadLetter}, {"22012", DeadLetter},
      {"22P02", DeadLetter}, {"23505", DeadLetter}, {"44000", DeadLetter}, {"P0001", DeadLetter},
      {"P0004", DeadLetter}, {"01000", Stop},       {"0A000", Stop},       {"25006", Stop},
      {"26000", Stop},       {"2BP01", Stop},       {"2F005", Stop},       {"39P01", Stop},
      {"3B001", Stop},       {"42501", Stop},       {"42P01", Stop},       {"54000", Stop},
      {"55000", Stop},       {"55006", Stop},       {"57000", Stop},       {"F0000", Stop},
      {"HV000", Stop},       {"XX000", Stop},       {"XX001", Stop},       {"ZZ999", Stop},
  };
  for (const Case& c : cases) {
    auto tx = store->begin();
    try {
      static_cast<void>(tx->execute(
          fmt::format("DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '{}'; END $$", c.sqlstate)));
      ADD_FAILURE() << c.sqlstate << " raised nothing";
    } catch (const Error& e) {
      EXPECT_EQ(e.source(), ErrorSource::Postgres) << e.what();
      EXPECT_EQ(e.detail(), c.sqlstate) << e.what();
      EXPECT_EQ(to_string(effect_error_outcome(e)), to_string(c.outcome)) << e.what();
      EXPECT_EQ(e.transient(), c.outcome == Retry) << e.what();
    }
    tx->rollback();
  }
}

TEST(StoreErrorOutcomes, ErrorsOfRealStatementsAndOneASwallowedErrorLeftBehind) {
  IDEM_FRESH_POSTGRES_URL(url);
  auto store = open_store(url);
  {
    auto tx = store->begin();
    static_cast<void>(tx->execute("CREATE TABLE account (id int PRIMARY KEY)"));
    static_cast<void>(tx->execute("INSERT INTO account VALUES (1)"));
    tx->commit();
  }
  const auto outcome_of = [&](std::string_view sql) {
    auto tx = store->begin();
    try {
      static_cast<void>(tx->execute(sql));
    } catch (const Error& e) {
      return std::string(to_string(effect_error_outcome(e))) + " " + e.detail();
    }
    return std::string("ran");
  };
  EXPECT_EQ(outcome_of("SELECT 'twelve'::int"), "dead-letter 22P02");
  EXPECT_EQ(outcome_of("INSERT INTO account VALUES (1)"), "dead-letter 23505");
  EXPECT_EQ(outcome_of("SELECT * FROM no_such_table"), "stop 42P01");
  EXPECT_EQ(outcome_of("SELEC 1"), "stop 42601");

  // A handler that swallowed a duplicate key and went on: the next statement meets
  // "current transaction is aborted" (25P02), and the error it throws is the one that
  // aborted the transaction, the event's fault, not a stop.
  auto tx = store->begin();
  EXPECT_THROW(static_cast<void>(tx->execute("INSERT INTO account VALUES (1)")), Error);
  try {
    static_cast<void>(tx->execute("SELECT 1"));
    ADD_FAILURE() << "an aborted transaction ran a statement";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Constraint) << e.what();
    EXPECT_EQ(e.detail(), "23505") << e.what();
    EXPECT_NE(std::string(e.what()).find("25P02"), std::string::npos) << e.what();
    EXPECT_EQ(to_string(effect_error_outcome(e)), "dead-letter") << e.what();
  }
}

class StoreErrorConsumerTest : public test::DevBrokerSuite {
 protected:
  void SetUp() override {
    url_ = test::PostgresBackend::fresh_url();
    if (url_.empty()) return;
    observer_ = open_store(url_);
    migrate_reference_system(*observer_);
    auto tx = observer_->begin();
    static_cast<void>(tx->execute(kRaiseFunction));
    tx->commit();
  }

  /// A topic of `partitions` partitions with its DLQ topic.
  std::string make_topic(int partitions) {
    const std::string topic = test::unique_name("errors");
    broker_->create_topic(topic, partitions);
    broker_->create_topic(topic + ".dlq", 1);
    return topic;
  }

  void produce(const std::string& topic, const OrderConfirmed& e, int partition) {
    test::KafkaTestProducer producer(broker_->bootstrap_servers());
    producer.send({topic,
                   std::to_string(e.order_id),
                   to_json(e),
                   {{"event_id", e.event_id.to_string()}},
                   partition});
    producer.flush();
  }

  /// A consumer whose handler raises `sqlstates[order_id]` (nothing for an order not in
  /// it): every time, or for a Retry case only its first `raises` times, then succeeds.
  std::unique_ptr<Consumer> consumer(const std::string& topic, const std::string& group,
                                     const std::map<std::int64_t, Case>& cases, int raises) {
    auto c = std::make_unique<Consumer>(
        test::mock_consumer_config(broker_->bootstrap_servers(), group, {topic}), open_store(url_));
    c->on<OrderConfirmed>(
        topic,
        Handler<OrderConfirmed>([this, &cases, raises](const OrderConfirmed& e, const RecordInfo& r,
                                                       Transaction& tx) {
          const auto found = cases.find(e.order_id);
          if (found != cases.end()) {
            const int raised = count_raise(e.order_id);
            if (found->second.outcome != Retry || raised <= raises)
              static_cast<void>(tx.execute("SELECT raise_sqlstate($1)", found->second.sqlstate));
          }
          record_effect(tx, e.event_id, r);
          return Outcome::Done;
        }));
    return c;
  }

  int count_raise(std::int64_t order_id) {
    const std::lock_guard lock(mutex_);
    return ++raised_[order_id];
  }
  int raised(std::int64_t order_id) {
    const std::lock_guard lock(mutex_);
    return raised_[order_id];
  }

  std::string url_;
  std::unique_ptr<Store> observer_;
  std::mutex mutex_;
  std::map<std::int64_t, int> raised_;
};

TEST_F(StoreErrorConsumerTest, ServerFaultsAreRetriedAndOnlyTheEventsFaultsDeadLettered) {
  if (url_.empty()) return;
  const std::vector<Case> list = {
      {"58030", Retry},      {"58P01", Retry},      {"40001", Retry},      {"53100", Retry},
      {"57P01", Retry},      {"72000", Retry},      {"22P02", DeadLetter}, {"23505", DeadLetter},
      {"P0001", DeadLetter}, {"20000", DeadLetter},
  };
  std::map<std::int64_t, Case> cases;
  for (std::size_t i = 0; i < list.size(); ++i) cases[static_cast<std::int64_t>(i) + 1] = list[i];
  const int partitions = static_cast<int>(cases.size());
  const std::string topic = make_topic(partitions);
  // One raising event per partition, then one that succeeds: a dead letter lets its
  // partition go on; a retried event goes first, once it stops raising.
  int partition = 0;
  for (const auto& [id, c] : cases) {
    produce(topic, test::console_order(id), partition);
    produce(topic, test::console_order(1000 + id), partition);
    ++partition;
  }
  const std::string group = test::unique_name("g");
  constexpr int kRaises = 3;
  test::RunningConsumer running(consumer(topic, group, cases, kRaises));
  std::size_t retried = 0;
  std::size_t dead_lettered = 0;
  for (const auto& [id, c] : cases) (c.outcome == Retry ? retried : dead_lettered)++;
  ASSERT_TRUE(test::eventually(
      [&] {
        return count_effects(*observer_, group) ==
                   static_cast<std::int64_t>(retried + cases.size()) &&
               running->stats().dead_lettered == dead_lettered;
      },
      60s))
      << "effects " << count_effects(*observer_, group) << ", dead letters "
      << running->stats().dead_lettered;
  ASSERT_TRUE(running.stop());
  EXPECT_EQ(running.error(), nullptr);
  EXPECT_EQ(max_effects_per_event(*observer_, group), 1);
  for (const auto& [id, c] : cases) {
    if (c.outcome == Retry) {
      EXPECT_GT(raised(id), kRaises) << c.sqlstate << " was not retried";
    }
  }
  const auto letters =
      test::read_topic(broker_->bootstrap_servers(), topic + ".dlq", 1, dead_lettered, 20s);
  ASSERT_EQ(letters.size(), dead_lettered);
  std::vector<std::string> lettered;
  for (const auto& letter : letters) {
    const std::string message = letter.header("idem.error.message").value_or("");
    EXPECT_EQ(letter.header("idem.error.class"), "handler.exception");
    for (const auto& [id, c] : cases) {
      if (message.find(fmt::format("SQLSTATE {}", c.sqlstate)) != std::string::npos)
        lettered.push_back(c.sqlstate);
    }
  }
  std::sort(lettered.begin(), lettered.end());
  EXPECT_EQ(lettered, (std::vector<std::string>{"20000", "22P02", "23505", "P0001"}));
}

// Codes no event's values can fix, or that the table does not list: the consumer stops
// and says why, the event neither applied nor dead-lettered. One consumer per code, all
// at once (a group's first join on the mock cluster takes 3 s).
TEST_F(StoreErrorConsumerTest, WhatNoEventIsToBlameForStopsTheConsumer) {
  if (url_.empty()) return;
  const std::vector<std::string> codes = {"XX000", "XX001", "0A000", "55000", "54000",
                                          "57000", "2BP01", "F0000", "42P01", "ZZ999"};
  std::vector<std::map<std::int64_t, Case>> cases(codes.size());
  std::vector<std::string> groups;
  std::vector<std::unique_ptr<test::RunningConsumer>> running;
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const auto id = static_cast<std::int64_t>(i) + 1;
    cases[i][id] = {codes[i], Stop};
    const std::string topic = make_topic(1);
    produce(topic, test::console_order(id), 0);
    groups.push_back(test::unique_name("g"));
    running.push_back(
        std::make_unique<test::RunningConsumer>(consumer(topic, groups.back(), cases[i], 0)));
  }
  for (std::size_t i = 0; i < codes.size(); ++i) {
    SCOPED_TRACE(codes[i]);
    ASSERT_TRUE(test::eventually([&] { return running[i]->finished(); }, 60s))
        << "the consumer went on after " << codes[i];
    ASSERT_NE(running[i]->error(), nullptr);
    try {
      std::rethrow_exception(running[i]->error());
    } catch (const Error& e) {
      EXPECT_EQ(e.detail(), codes[i]) << e.what();
      EXPECT_NE(std::string(e.what()).find("idem consumer: stopping"), std::string::npos)
          << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not an idem::Error: " << e.what();
    }
    EXPECT_EQ((**running[i]).stats().dead_lettered, 0u);
    EXPECT_EQ(count_effects(*observer_, groups[i]), 0);
  }
}

}  // namespace store_error_outcomes_test
}  // namespace idem
