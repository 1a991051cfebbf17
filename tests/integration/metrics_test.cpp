// /metrics, /healthz and /readyz on the admin port during a real consumer run (mock
// cluster, SQLite store): the counters scraped match what the run did
// (processed + duplicates + DLQ = delivered), the lag is seen above 0 while the consumer
// is held back and falls to 0 once it caught up.
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/metrics/metrics.hpp"
#include "idem/reference/count_handler.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "support/consumer_scenario.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/shared_broker.hpp"
#include "support/store_backends.hpp"
#include "support/wait.hpp"

namespace idem {
namespace metrics_test {

using namespace std::chrono_literals;

/// Sum of the samples of `name` whose label set contains `labels` (e.g. `reason="x"`).
double sample_sum(const std::string& exposition, std::string_view name,
                  std::string_view labels = {}) {
  std::istringstream in(exposition);
  std::string line;
  double sum = 0;
  while (std::getline(in, line)) {
    if (!line.starts_with(name) || line.size() <= name.size()) continue;
    const char next = line[name.size()];
    if (next != '{' && next != ' ') continue;
    if (!labels.empty() && line.find(labels) == std::string::npos) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

/// Values of every sample of `name`.
std::vector<double> samples(const std::string& exposition, std::string_view name) {
  std::istringstream in(exposition);
  std::string line;
  std::vector<double> out;
  while (std::getline(in, line)) {
    if (line.starts_with(std::string(name) + "{"))
      out.push_back(std::stod(line.substr(line.rfind(' ') + 1)));
  }
  return out;
}

/// Blocks the first handler call until released (deadline 60 s), so the test can see
/// the consumer behind.
class Gate {
 public:
  void enter() {
    std::unique_lock lock(mutex_);
    entered_ = true;
    cv_.notify_all();
    cv_.wait_for(lock, 60s, [&] { return released_; });
  }
  bool wait_entered(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return entered_; });
  }
  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool entered_ = false;
  bool released_ = false;
};

TEST(AdminServer, MetricsMatchTheRunAndLagFallsToZero) {
  test::SharedBroker& broker = test::shared_broker();
  const std::string topic = fmt::format("metrics-{:08x}", std::random_device{}());
  broker.create_topic(topic, 3);
  broker.create_topic(topic + ".dlq", 1);
  const std::string group = "metrics-group";
  const std::string db = test::fresh_sqlite_url();
  idem::migrate_reference_system(*open_store(db));

  // The gate event goes first, alone, to partition 0.
  const test::Workload gate_load = test::make_workload(topic, 1, 0, 0, 7);
  test::Workload gate = gate_load;
  gate.records[0].partition = 0;
  test::produce(broker.bootstrap_servers(), gate, 0, 1);

  ConsumerConfig config = test::mock_consumer_config(broker.bootstrap_servers(), group, {topic});
  config.batch_size = 50;
  config.retry = RetryPolicy{};

  Metrics metrics;
  Consumer consumer(config, open_store(db), metrics.instrument(group));
  Gate held;
  std::atomic<bool> first{true};
  Handler<OrderConfirmed> count = count_handler<OrderConfirmed>();
  consumer.on<OrderConfirmed>(
      topic, metrics.timed<OrderConfirmed>(
                 group, topic, [&](const OrderConfirmed& e, const RecordInfo& r, Transaction& tx) {
                   if (first.exchange(false)) held.enter();
                   return count(e, r, tx);
                 }));
  metrics.watch(consumer, group);
  AdminServer admin("127.0.0.1:0", metrics,
                    {consumer_readiness(consumer, 60s), store_readiness(db, StoreOptions{})});
  httplib::Client http("127.0.0.1", admin.port());
  const auto get = [&](const char* path) {
    auto res = http.Get(path);
    if (!res) throw std::runtime_error(fmt::format("GET {} failed", path));
    return std::make_pair(res->status, res->body);
  };

  EXPECT_EQ(get("/healthz").first, 200);
  const auto not_ready = get("/readyz");
  EXPECT_EQ(not_ready.first, 503);
  EXPECT_NE(not_ready.second.find("consumer: not running yet"), std::string::npos)
      << not_ready.second;

  std::thread runner([&] { consumer.run(); });
  struct Join {
    Consumer& c;
    std::thread& t;
    Gate& g;
    ~Join() {
      g.release();
      c.stop();
      if (t.joinable()) t.join();
    }
  } join{consumer, runner, held};

  ASSERT_TRUE(held.wait_entered(60s)) << "the consumer never reached its handler";
  const test::Workload w = test::make_workload(topic, 400, 0.1, 0.01, 11);
  test::produce(broker.bootstrap_servers(), w, 0, w.records.size());

  // Held back: the gate partition's high watermark moves on, its position does not.
  std::string scraped;
  EXPECT_TRUE(test::eventually(
      [&] {
        scraped = get("/metrics").second;
        const auto lags = samples(scraped, metric::kLag);
        return std::any_of(lags.begin(), lags.end(), [](double v) { return v > 0; });
      },
      30s))
      << scraped;
  const auto ready_while_held = get("/readyz");
  EXPECT_EQ(ready_while_held.first, 200) << ready_while_held.second;
  held.release();

  const double total = static_cast<double>(w.records.size() + 1);
  EXPECT_TRUE(test::eventually(
      [&] {
        scraped = get("/metrics").second;
        const auto lags = samples(scraped, metric::kLag);
        const double done = sample_sum(scraped, metric::kEventsProcessed) +
                            sample_sum(scraped, metric::kDuplicatesSkipped) +
                            sample_sum(scraped, metric::kDeadLettered);
        return lags.size() == 3 &&
               std::all_of(lags.begin(), lags.end(), [](double v) { return v == 0; }) &&
               done == total;
      },
      60s))
      << scraped;

  // What the run did, from the workload.
  const double valid = static_cast<double>(w.valid_ids.size() + 1);
  EXPECT_EQ(sample_sum(scraped, metric::kRecordsDelivered), total);
  EXPECT_EQ(sample_sum(scraped, metric::kEventsProcessed), valid);
  EXPECT_EQ(sample_sum(scraped, metric::kDuplicatesSkipped), static_cast<double>(w.duplicates));
  EXPECT_EQ(sample_sum(scraped, metric::kDeadLettered), static_cast<double>(w.malformed));
  std::map<std::string, double> by_class;
  for (const auto& [payload, cls] : w.malformed_class_by_payload) by_class[cls] += 1;
  for (const auto& [cls, n] : by_class) {
    EXPECT_EQ(sample_sum(scraped, metric::kDeadLettered, fmt::format("reason=\"{}\"", cls)), n)
        << cls;
  }
  EXPECT_EQ(sample_sum(scraped, metric::kRetries), 0);
  EXPECT_EQ(sample_sum(scraped, metric::kAssignedPartitions), 3);
  const double transactions = sample_sum(scraped, metric::kTransactions);
  EXPECT_GE(transactions, 2);
  EXPECT_GE(sample_sum(scraped, metric::kOffsetCommits), 2);
  // Histograms: one batch-size sample per batch, adding up to every record delivered;
  // one transaction-latency sample per committed batch; one handler sample per effect.
  EXPECT_EQ(sample_sum(scraped, std::string(metric::kBatchRecords) + "_sum"), total);
  EXPECT_EQ(sample_sum(scraped, std::string(metric::kTransactionSeconds) + "_count"), transactions);
  EXPECT_EQ(sample_sum(scraped, std::string(metric::kHandlerSeconds) + "_count"), valid);
  // And the same numbers as the library's own counters.
  const ConsumerStats s = consumer.stats();
  EXPECT_EQ(static_cast<double>(s.processed + s.duplicates + s.dead_lettered),
            static_cast<double>(s.delivered));
  EXPECT_EQ(static_cast<double>(s.delivered), total);
  metrics.unwatch(consumer);
}

TEST(AdminServer, TtlRunsAndRelayProgressAreExported) {
  Metrics metrics;
  metrics.record_ttl_run("processed_event", 120);
  metrics.record_ttl_run("processed_event", 30);
  RelayObserver observer = metrics.instrument(RelayObserver{});
  observer.on_step(RelayStep::Marked, 40);
  observer.on_step(RelayStep::Acked, 40);  // not counted: only marks publish
  observer.on_step(RelayStep::Marked, 2);
  RelayProgress p;
  p.backlog = 7;
  p.oldest_unpublished_age = 1500ms;
  p.owned_shards = 64;
  p.resent = 3;
  observer.on_progress(p);
  p.resent = 5;
  observer.on_progress(p);
  const std::string text = metrics.scrape();
  EXPECT_EQ(sample_sum(text, metric::kTtlRuns, "table=\"processed_event\""), 2);
  EXPECT_EQ(sample_sum(text, metric::kTtlDeletedRows), 150);
  EXPECT_EQ(sample_sum(text, metric::kRelayPublished), 42);
  EXPECT_EQ(sample_sum(text, metric::kRelayBatches), 2);
  EXPECT_EQ(sample_sum(text, metric::kRelayResent), 5);
  EXPECT_EQ(sample_sum(text, metric::kRelayBacklog), 7);
  EXPECT_EQ(sample_sum(text, metric::kRelayLagSeconds), 1.5);
  EXPECT_EQ(sample_sum(text, metric::kRelayOwnedShards), 64);
  EXPECT_NE(text.find("# TYPE idem_relay_events_published_total counter"), std::string::npos)
      << text;
}

TEST(AdminServer, StoreReadinessFailsWithoutShowingTheUrl) {
  Metrics metrics;
  StoreOptions quick;
  quick.connect_timeout = 2s;
  AdminServer admin("127.0.0.1:0", metrics,
                    {store_readiness("postgresql://app:readyzSecret@127.0.0.1:1/x", quick)});
  httplib::Client http("127.0.0.1", admin.port());
  const auto res = http.Get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_NE(res->body.find("store: unreachable"), std::string::npos) << res->body;
  EXPECT_EQ(res->body.find("readyzSecret"), std::string::npos) << res->body;
}

}  // namespace metrics_test
}  // namespace idem
