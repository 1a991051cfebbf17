// W3C traceparent: format and parse rules, and the trace carried end to end: created
// (or taken from the caller) at Outbox::enqueue, stored with the row, sent as a Kafka
// header by the relay, and handed to the handler in RecordInfo.
// and, through the billing handler, on to the payment provider as a child span.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "idem/consumer.hpp"
#include "idem/outbox.hpp"
#include "idem/reference/billing.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/payment_provider.hpp"
#include "idem/reference/schema.hpp"
#include "idem/relay.hpp"
#include "idem/store.hpp"
#include "idem/tracing.hpp"
#include "support/consumer_scenario.hpp"
#include "support/mock_group.hpp"
#include "support/shared_broker.hpp"
#include "support/store_backends.hpp"
#include "support/wait.hpp"

namespace idem {
namespace tracing_test {

using namespace std::chrono_literals;

TEST(TraceContext, FormatsAndParsesVersion00) {
  const TraceContext root = TraceContext::new_root();
  const std::string text = root.traceparent();
  ASSERT_EQ(text.size(), 55U);
  EXPECT_EQ(text.substr(0, 3), "00-");
  EXPECT_EQ(text.substr(53), "01");
  EXPECT_EQ(parse_traceparent(text), root);
  EXPECT_EQ(text.substr(3, 32), root.trace_id_hex());

  const TraceContext child = root.child();
  EXPECT_EQ(child.trace_id, root.trace_id);
  EXPECT_NE(child.span_id, root.span_id);
  EXPECT_NE(TraceContext::new_root().trace_id, root.trace_id);

  const auto known = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(known);
  EXPECT_EQ(known->trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(known->flags, 1);
}

TEST(TraceContext, RejectsWhatTheSpecRejects) {
  for (const auto* bad : {
           "",
           "00-abc-def-01",
           "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // unknown version, wrong
                                                                         // form
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // upper case
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero span id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // trailing data
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
           "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
       }) {
    EXPECT_FALSE(parse_traceparent(bad)) << bad;
  }
}

OrderConfirmed order_event(const Uuid& id, std::int64_t order_id) {
  OrderConfirmed e;
  e.event_id = id;
  e.occurred_at =
      std::chrono::time_point_cast<std::chrono::microseconds>(std::chrono::system_clock::now());
  e.order_id = order_id;
  e.customer_id = 7;
  e.total_amount = Amount::from_hundredths(1250);
  return e;
}

/// Publishes every outbox row of `db` to the broker.
void relay_everything(const std::string& db, const test::SharedBroker& broker) {
  RelayConfig relay_config;
  relay_config.store_url = db;
  relay_config.producer.bootstrap_servers = broker.bootstrap_servers();
  relay_config.producer.kafka = {{"log_level", "2"}};
  relay_config.progress_interval = 0ms;
  Relay relay(relay_config);
  ASSERT_TRUE(relay.run_until_empty(60s));
}

ConsumerConfig consumer_config(const test::SharedBroker& broker, const std::string& topic,
                               const std::string& group) {
  ConsumerConfig config;
  config.bootstrap_servers = broker.bootstrap_servers();
  config.group_id = group;
  config.topics = {topic};
  config.batch_window = 20ms;
  config.kafka = test::mock_group_properties();
  config.check_topic_retention = false;  // the mock cluster never answers it
  return config;
}

/// The traceparent of the only outbox row of `store`.
std::string outbox_traceparent(Store& store) {
  auto tx = store.begin();
  for (const auto& row : tx->execute("SELECT headers FROM idem_outbox")) {
    for (const auto& [name, value] : outbox_headers_from_json(row.text(0))) {
      if (name == kTraceparentHeader) return value;
    }
  }
  return {};
}

TEST(Tracing, TraceparentTravelsFromOutboxThroughKafkaToTheHandler) {
  test::SharedBroker& broker = test::shared_broker();
  const std::string topic = fmt::format("traced-{:08x}", std::random_device{}());
  broker.create_topic(topic, 3);
  broker.create_topic(topic + ".dlq", 1);
  const std::string db = test::fresh_sqlite_url();
  auto store = open_store(db);
  idem::migrate_reference_system(*store);

  // Two events born with a trace of their own, one continuing the caller's trace.
  const std::string callers = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  Outbox outbox;
  std::map<std::string, std::string> enqueued;  // event_id -> traceparent at the outbox row
  {
    auto tx = store->begin();
    for (std::int64_t order = 1; order <= 3; ++order) {
      outbox.enqueue(*tx, [&](const Uuid& id) {
        OutboxMessage m{"order", std::to_string(order), topic, to_json(order_event(id, order)), {},
                        {}};
        if (order == 3) m.headers.emplace_back(std::string(kTraceparentHeader), callers);
        return m;
      });
    }
    tx->commit();
  }
  {
    auto tx = store->begin();
    for (const auto& row : tx->execute("SELECT payload, headers FROM idem_outbox")) {
      const std::string id = parse_order_confirmed(row.text(0)).value().event_id.to_string();
      for (const auto& [name, value] : outbox_headers_from_json(row.text(1))) {
        if (name == kTraceparentHeader) enqueued[id] = value;
      }
    }
  }
  ASSERT_EQ(enqueued.size(), 3U) << "every outbox row gets a traceparent";

  relay_everything(db, broker);
  if (HasFatalFailure()) return;

  Consumer consumer(consumer_config(broker, topic, "traced"), open_store(db));
  std::mutex mutex;
  std::map<std::string, std::string> seen;  // event_id -> traceparent the handler saw
  consumer.on<OrderConfirmed>(
      topic, [&](const OrderConfirmed& e, const RecordInfo& r, Transaction&) {
        const auto trace = trace_context(r);
        std::lock_guard lock(mutex);
        seen[e.event_id.to_string()] = trace ? trace->traceparent() : "none";
        return Outcome::Done;
      });
  std::thread runner([&] { consumer.run(); });
  const bool all_seen = test::eventually(
      [&] {
        std::lock_guard lock(mutex);
        return seen.size() == 3;
      },
      60s);
  consumer.stop();
  runner.join();
  ASSERT_TRUE(all_seen);
  EXPECT_EQ(seen, enqueued);
  int callers_trace = 0;
  for (const auto& [id, traceparent] : seen) callers_trace += traceparent == callers ? 1 : 0;
  EXPECT_EQ(callers_trace, 1) << "the caller's context is kept, not replaced";
}

// outbox row -> relay -> Kafka header -> billing handler -> HTTP call -> the provider's
// stored charge: one trace id all the way; the HTTP call is a span of its own.
TEST(Tracing, BillingForwardsTheOutboxTraceToThePaymentProvider) {
  test::SharedBroker& broker = test::shared_broker();
  const std::string topic = fmt::format("billed-{:08x}", std::random_device{}());
  broker.create_topic(topic, 1);
  broker.create_topic(topic + ".dlq", 1);
  const std::string db = test::fresh_sqlite_url();
  auto store = open_store(db);
  idem::migrate_reference_system(*store);
  http::PaymentProvider provider(open_store(test::fresh_sqlite_url()));
  provider.start("127.0.0.1", 0);

  Outbox outbox;
  {
    auto tx = store->begin();
    outbox.enqueue(*tx, [&](const Uuid& id) {
      return OutboxMessage{"order", "1", topic, to_json(order_event(id, 1)), {}, {}};
    });
    tx->commit();
  }
  const auto enqueued = parse_traceparent(outbox_traceparent(*store));
  ASSERT_TRUE(enqueued) << "the outbox row has a valid traceparent";
  relay_everything(db, broker);
  if (HasFatalFailure()) return;

  BillingConfig billing;
  billing.provider_url = provider.base_url();
  Consumer consumer(consumer_config(broker, topic, std::string(kBillingGroup)), open_store(db));
  consumer.on<OrderConfirmed>(topic, billing_handler(billing));
  std::thread runner([&] { consumer.run(); });
  const bool charged = test::eventually([&] { return consumer.stats().processed == 1; }, 60s);
  consumer.stop();
  runner.join();
  ASSERT_TRUE(charged);

  const auto charges = provider.charges(1);
  ASSERT_EQ(charges.size(), 1U);
  const auto received = parse_traceparent(charges[0].traceparent);
  ASSERT_TRUE(received) << "the provider stored '" << charges[0].traceparent << "'";
  EXPECT_EQ(received->trace_id_hex(), enqueued->trace_id_hex()) << "one trace end to end";
  EXPECT_NE(received->span_id, enqueued->span_id) << "the HTTP call is a child span";
}

}  // namespace tracing_test
}  // namespace idem
