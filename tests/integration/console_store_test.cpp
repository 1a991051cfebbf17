// The console's store queries on every backend (SQLite, PostgreSQL): the dedup page's
// rows per group with the birth times of their oldest and newest event, the retention
// declarations, the outbox backlog; and a replay's audit row written and read back.
// console_test.cpp covers the HTTP rules (token, CSRF, validation) on SQLite only; the
// SQL differs per backend (PostgreSQL has no min/max over uuid, epoch conversions), so
// it is checked here on both.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "idem/console/console.hpp"
#include "idem/console/schema.hpp"
#include "idem/outbox.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "stores/dedup_retention.hpp"
#include "support/dead_letters.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/store_backends.hpp"

namespace idem {
namespace console_store_test {

using namespace std::chrono_literals;
using nlohmann::json;

std::int64_t unix_ms(std::chrono::sys_time<std::chrono::milliseconds> t) {
  return t.time_since_epoch().count();
}

template <class Backend>
class ConsoleStoreTest : public test::DevBrokerSuite {
 protected:
  void SetUp() override {
    url_ = Backend::fresh_url();
    if (url_.empty()) GTEST_SKIP();
    store_ = open_store(url_);
    static_cast<void>(store_->migrate());
    static_cast<void>(store_->migrate_set(console_migrations()));
  }

  /// Marks `count` fresh UUIDv7 events processed for `group`; returns their ids.
  std::vector<Uuid> mark(const std::string& group, int count) {
    std::vector<Uuid> ids;
    for (int i = 0; i < count; ++i) ids.push_back(new_uuid_v7());
    auto tx = store_->begin();
    for (const bool fresh : tx->mark_processed_batch(ids, group)) EXPECT_TRUE(fresh);
    tx->commit();
    return ids;
  }

  std::unique_ptr<Console> start(const std::string& token) {
    auto console =
        std::make_unique<Console>(test::console_options(broker_->bootstrap_servers(), url_, token));
    client_ = test::console_client(*console);
    return console;
  }

  json get(const std::string& path) {
    const auto res = client_->Get(path);
    EXPECT_TRUE(res);
    if (!res) return json::object();
    EXPECT_EQ(res->status, 200) << path << ": " << res->body;
    return json::parse(res->body);
  }

  std::string url_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<httplib::Client> client_;
};

TYPED_TEST_SUITE(ConsoleStoreTest, test::AllBackends, test::BackendName);

TYPED_TEST(ConsoleStoreTest, TheDedupPageCountsEachGroupsMarksWithTheirBirthTimes) {
  const auto before =
      std::chrono::time_point_cast<std::chrono::milliseconds>(std::chrono::system_clock::now());
  const std::vector<Uuid> billing = this->mark("billing", 3);
  const std::vector<Uuid> audit = this->mark("audit", 1);
  const auto after =
      std::chrono::time_point_cast<std::chrono::milliseconds>(std::chrono::system_clock::now());
  static_cast<void>(detail::declare_dedup_retention(*this->store_, "billing", 168h, "host-1/42",
                                                    std::chrono::system_clock::now()));
  {
    auto tx = this->store_->begin();
    Outbox outbox;
    for (int i = 0; i < 2; ++i) {
      static_cast<void>(outbox.enqueue(*tx, [](const Uuid& id) {
        return OutboxMessage{"order",  "7",
                             "orders", fmt::format(R"({{"event_id":"{}"}})", id.to_string()),
                             {},       std::nullopt};
      }));
    }
    tx->commit();
  }

  const auto console = this->start("");
  const json page = this->get("/api/dedup");
  for (const char* section : {"groups", "retention", "partitions", "outbox"}) {
    EXPECT_FALSE(page[section].contains("error")) << section << ": " << page[section].dump();
  }
  const json rows = page["groups"]["rows"];
  ASSERT_EQ(rows.size(), 2U) << rows.dump();
  // Ordered by group name.
  EXPECT_EQ(rows[0]["group"], "audit");
  EXPECT_EQ(rows[0]["rows"], 1);
  EXPECT_EQ(rows[1]["group"], "billing");
  EXPECT_EQ(rows[1]["rows"], 3);
  const auto [oldest, newest] = std::minmax_element(billing.begin(), billing.end());
  EXPECT_EQ(rows[1]["oldest_event_born_ms"], unix_ms(oldest->timestamp()));
  EXPECT_EQ(rows[1]["newest_event_born_ms"], unix_ms(newest->timestamp()));
  EXPECT_EQ(rows[0]["oldest_event_born_ms"], unix_ms(audit[0].timestamp()));
  for (const json& row : rows) {
    // processed_at is the store's clock (now() on PostgreSQL): same machine, so within
    // the marking window give or take the store's rounding.
    for (const char* key : {"first_processed_ms", "last_processed_ms"}) {
      ASSERT_TRUE(row[key].is_number()) << row.dump();
      EXPECT_GE(row[key].get<std::int64_t>(), unix_ms(before) - 1000) << key;
      EXPECT_LE(row[key].get<std::int64_t>(), unix_ms(after) + 1000) << key;
    }
  }

  const json declarations = page["retention"]["declarations"];
  ASSERT_EQ(declarations.size(), 1U) << declarations.dump();
  EXPECT_EQ(declarations[0]["group"], "billing");
  EXPECT_EQ(declarations[0]["retention_ms"], std::chrono::milliseconds(168h).count());
  EXPECT_EQ(declarations[0]["declared_by"], "host-1/42");
  EXPECT_EQ(declarations[0]["live"], true);

  EXPECT_EQ(page["outbox"]["backlog"], 2);
  EXPECT_TRUE(page["outbox"]["oldest_unpublished_age_ms"].is_number()) << page["outbox"].dump();
  EXPECT_EQ(page["outbox"]["rejected"], 0);
}

TYPED_TEST(ConsoleStoreTest, AReplayIsAuditedInTheStoreBeforeAndAfterItSends) {
  const std::string topic = test::unique_name("orders");
  const std::string dlq = topic + ".dlq";
  this->broker_->create_topic(topic, 1);
  this->broker_->create_topic(dlq, 1);
  const OrderConfirmed event = test::console_order(5);
  {
    test::KafkaTestProducer producer(this->broker_->bootstrap_servers());
    producer.send(test::dead_letter_of(event, dlq, topic, "billing", 9, "handler.dead_letter",
                                       "provider said no"));
    producer.flush();
  }
  const auto console = this->start("t0ken");
  const auto origin = fmt::format("http://127.0.0.1:{}", console->port());
  const json body = {
      {"topic", dlq}, {"partition", 0}, {"offset", 0}, {"dry_run", false}, {"operator", "grace"}};
  const auto res =
      this->client_->Post("/api/dlq/replay", {{"Origin", origin}, {"X-Idem-Token", "t0ken"}},
                          body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(test::end_offsets(this->broker_->bootstrap_servers(), topic, 1).at(0), 1);

  const json entries = this->get("/api/audit")["entries"];
  ASSERT_EQ(entries.size(), 1U) << entries.dump();
  EXPECT_EQ(entries[0]["operator"], "grace");
  EXPECT_EQ(entries[0]["outcome"], "replayed") << "the row written as 'started' was updated";
  EXPECT_EQ(entries[0]["event_id"], event.event_id.to_string());
  EXPECT_EQ(entries[0]["dlq_topic"], dlq);
  EXPECT_EQ(entries[0]["dlq_partition"], 0);
  EXPECT_EQ(entries[0]["dlq_offset"], 0);
  EXPECT_EQ(entries[0]["target_topic"], topic);
}

}  // namespace console_store_test
}  // namespace idem
