// The reference system as configuration: examples/configured/billing.toml and
// analytics.toml give the same ledger and the same totals as the compiled billing and
// analytics consumers on the same input (the same records, the same provider), on both
// backends. Each side has a store of its own; the provider deduplicates on the event id,
// so the second side's charges are replays and carry the same payment ids.
//
// On the dev broker the tests share: each test reads a topic of its own (the examples'
// routes are moved to it) with groups of its own.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "idem/consumer.hpp"
#include "idem/reference/analytics.hpp"
#include "idem/reference/billing.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/order_service.hpp"
#include "idem/reference/schema.hpp"
#include "idem/sinks/configured_sinks.hpp"
#include "idem/sinks/sink_config.hpp"
#include "idem/store.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/provider_process.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem {
namespace configured_examples_test {

using namespace std::chrono_literals;

constexpr int kOrders = 80;

/// examples/configured/NAME: __FILE__ is absolute, or relative to the top build directory.
std::string example(const std::string& name) {
  const std::filesystem::path here(__FILE__);
  const auto relative =
      here.parent_path().parent_path().parent_path() / "examples/configured" / name;
  if (here.is_absolute()) return relative.string();
  return (std::filesystem::path(IDEM_TEST_CHILD_DIR).parent_path() / relative).string();
}

template <class B>
class ConfiguredExamplesTest : public test::DevBrokerSuite {
 protected:
  void SetUp() override {
    for (auto* url : {&compiled_url_, &configured_url_}) {
      *url = B::fresh_url();
      if (url->empty()) return;
      migrate_reference_system(*open_store(*url));
    }
    topic_ = test::unique_name("order-confirmed");
    broker_->create_topic(topic_, 3);
    broker_->create_topic(topic_ + ".dlq", 1);
    test::KafkaTestProducer producer(broker_->bootstrap_servers());
    for (int i = 1; i <= kOrders; ++i) {
      OrderConfirmed e;
      e.event_id = new_uuid_v7();
      e.occurred_at =
          std::chrono::time_point_cast<std::chrono::microseconds>(e.event_id.timestamp());
      e.order_id = i;
      e.customer_id = 1 + i % 9;
      e.total_amount = Amount::from_hundredths(101 * i + i % 100);
      for (auto* url : {&compiled_url_, &configured_url_}) {
        auto store = open_store(*url);
        auto tx = store->begin();
        tx->execute(
            "INSERT INTO orders (id, customer_id, total_amount, status, created_at) "
            "VALUES ($1, $2, $3, 'confirmed', '2026-01-01T00:00:00Z')",
            e.order_id, e.customer_id, e.total_amount);
        tx->commit();
      }
      producer.send({topic_, std::to_string(i), to_json(e), {}});
      if (i % 10 == 0) producer.send({topic_, std::to_string(i), to_json(e), {}});
    }
    producer.flush();
  }

  /// Runs `install` on a consumer of `url` until `done` holds. Each side is a group of its
  /// own (`group`, the store's side and a unique suffix), so each reads the topic from the
  /// start.
  template <class Install, class Done>
  void consume(const std::string& url, const std::string& group, Install install, Done done) {
    ConsumerConfig c = test::mock_consumer_config(
        broker_->bootstrap_servers(),
        test::unique_name(
            fmt::format("{}-{}", group, url == compiled_url_ ? "compiled" : "configured")),
        {topic_});
    c.batch_size = 25;
    c.kafka.emplace_back("auto.offset.reset", "earliest");
    Consumer consumer(c, open_store(url));
    install(consumer);
    std::thread runner([&] { consumer.run(); });
    const bool finished = test::eventually(done, 90s);
    consumer.stop();
    runner.join();
    ASSERT_TRUE(finished);
  }

  /// The example `name` as written, its routes moved to this test's topic.
  std::unique_ptr<sinks::ConfiguredSinks> configured(
      const std::string& name, const std::vector<std::pair<std::string, std::string>>& env) {
    auto store = open_store(configured_url_);
    sinks::SinkConfig config = *sinks::load_sink_config(example(name), env);
    EXPECT_EQ(config.topic_names(), std::vector<std::string>{std::string(kOrderConfirmedTopic)});
    for (auto& route : config.routes) route.topic = topic_;
    std::map<std::string, sinks::TopicFormat> formats;
    for (const auto& [topic, format] : config.topics) formats[topic_] = format;
    config.topics = std::move(formats);
    auto sinks = std::make_unique<sinks::ConfiguredSinks>(std::move(config), store->backend());
    sinks->check(*store);
    return sinks;
  }

  std::string rows(const std::string& url, const std::string& sql) {
    auto store = open_store(url);
    auto tx = store->begin();
    std::string out;
    for (const auto row : tx->execute(sql)) {
      for (std::size_t c = 0; c < row.size(); ++c) out += std::string(row.text(c)) + "|";
      out += "\n";
    }
    return out;
  }
  std::int64_t count(const std::string& url, const std::string& table) {
    auto store = open_store(url);
    return B::read_scalar(*store, "SELECT count(*) FROM " + table);
  }

  std::string topic_;
  std::string compiled_url_;
  std::string configured_url_;
};

TYPED_TEST_SUITE(ConfiguredExamplesTest, test::AllBackends, test::BackendName);

TYPED_TEST(ConfiguredExamplesTest, AnalyticsAsConfigurationGivesTheCompiledTotals) {
  if (this->configured_url_.empty()) return;
  const auto group = std::string(kAnalyticsGroup);
  const auto summed = [&](const std::string& url) {
    return [this, url] {
      return this->count(url, "analytics_customer_revenue") == 9 &&
             this->rows(url, "SELECT sum(order_count) FROM analytics_customer_revenue") ==
                 fmt::format("{}|\n", kOrders);
    };
  };
  this->consume(
      this->compiled_url_, group,
      [this](Consumer& c) { c.on<OrderConfirmed>(this->topic_, analytics_handler()); },
      summed(this->compiled_url_));
  auto sinks = this->configured("analytics.toml", {});
  this->consume(
      this->configured_url_, group, [&](Consumer& c) { sinks->install(c); },
      summed(this->configured_url_));
  const std::string sql =
      "SELECT customer_id, revenue_hundredths, order_count FROM analytics_customer_revenue "
      "ORDER BY customer_id";
  EXPECT_EQ(this->rows(this->configured_url_, sql), this->rows(this->compiled_url_, sql));
}

TYPED_TEST(ConfiguredExamplesTest, BillingAsConfigurationGivesTheCompiledLedger) {
  if (this->configured_url_.empty()) return;
  test::ProviderProcess provider(IDEM_CLI_PATH, test::fresh_sqlite_url());
  const auto group = std::string(kBillingGroup);
  const auto ledger_full = [&](const std::string& url) {
    return [this, url] { return this->count(url, "billing_ledger") == kOrders; };
  };
  BillingConfig billing;
  billing.provider_url = provider.url();
  this->consume(
      this->compiled_url_, group,
      [&](Consumer& c) { c.on_effect(this->topic_, billing_effect(billing)); },
      ledger_full(this->compiled_url_));
  auto sinks = this->configured("billing.toml", {{"PROVIDER_URL", provider.url()}});
  this->consume(
      this->configured_url_, group, [&](Consumer& c) { sinks->install(c); },
      ledger_full(this->configured_url_));
  const std::string ledger =
      "SELECT order_id, event_id, amount, provider_payment_id FROM billing_ledger ORDER BY "
      "order_id";
  EXPECT_EQ(this->rows(this->configured_url_, ledger), this->rows(this->compiled_url_, ledger));
  const std::string orders = "SELECT id, payment_status FROM orders ORDER BY id";
  EXPECT_EQ(this->rows(this->configured_url_, orders), this->rows(this->compiled_url_, orders));
}

}  // namespace configured_examples_test
}  // namespace idem
