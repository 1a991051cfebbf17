// `idem demo`: the reference system on the embedded default, as far as it exists
// today, audited for exactly-once effects.
//
//   order service --(outbox, same transaction)--> relay --(idempotent producer)-->
//   Kafka (embedded dev broker) --> billing consumer (ledger + payment_status)
//                                --> analytics consumer (its own dedup rows)
//
// On top of normal operation it injects duplicate sources and bad input: a producer
// resend of already-published events (same event_id, new offset) and one malformed
// message of each kind. The audit at the end checks the invariant and the process
// exits non-zero when it does not hold.
//
// Still to come (see the README's status table): the payment provider with
// Idempotency-Key, consumers as child processes with SIGKILLs, rebalances, DLQ replay.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "idem/consumer.hpp"
#include "idem/dev_broker.hpp"
#include "idem/events/order_confirmed.hpp"
#include "idem/handlers/count.hpp"
#include "idem/outbox.hpp"
#include "idem/producer.hpp"
#include "idem/reference/order_service.hpp"
#include "idem/relay.hpp"
#include "idem/store.hpp"

namespace idem::cli {
namespace {

constexpr std::string_view kBillingGroup = "billing-order-confirmed";
constexpr std::string_view kAnalyticsGroup = "analytics-order-confirmed";

struct DemoOptions {
  std::string db;
  std::string brokers;  // empty: the embedded dev broker
  int orders = 2000;
  double duplicate_ratio = 0.10;
  std::size_t batch = 200;
  std::uint64_t seed = 42;
  int timeout_s = 120;
};

// Messages that can never be valid, one per kind the boundary must reject, with the
// reason the consumer must report for it.
std::vector<std::pair<std::string, std::string>> malformed_messages(const Uuid& v7) {
  const std::string id = v7.to_string();
  const std::string head = "{\"event_id\":\"" + id + "\",\"event_type\":\"order.confirmed.v1\",";
  const std::string tail =
      R"("occurred_at":"2026-11-29T10:00:00Z","order_id":1,"customer_id":1,"total_amount":"1.00"})";
  return {
      {"{not json", "validation.invalid_json"},
      {head + "\"x\":\"\xff\"," + tail, "validation.invalid_utf8"},
      {R"({"event_type":"order.confirmed.v1",)" + tail, "validation.missing"},
      {R"({"event_id":"not-a-uuid","event_type":"order.confirmed.v1",)" + tail, "validation.not_uuid"},
      {R"({"event_id":"6ba7b810-9dad-41d1-80b4-00c04fd430c8","event_type":"order.confirmed.v1",)" + tail,
       "validation.not_uuid_v7"},
      {"{\"event_id\":\"" + id + R"(","event_type":"order.cancelled.v1",)" + tail,
       "validation.unknown_event_type"},
      {head + R"("occurred_at":"yesterday","order_id":1,"customer_id":1,"total_amount":"1.00"})",
       "validation.not_rfc3339"},
      {head + R"("occurred_at":"2026-11-29T10:00:00Z","order_id":1,"customer_id":1,"total_amount":12.5})",
       "validation.wrong_type"},
      {head + R"("occurred_at":"2026-11-29T10:00:00Z","order_id":1,"customer_id":1,"total_amount":"-3.00"})",
       "validation.negative_amount"},
      {head + R"("occurred_at":"2026-11-29T10:00:00Z","order_id":1,"customer_id":1,"total_amount":"1.005"})",
       "validation.too_many_fraction_digits"},
  };
}

// The billing consumer's effect (without the payment provider yet): mark the order
// charged and append a ledger row. The ledger has no unique constraint on order_id,
// so a double effect would show in the audit.
Outcome bill(const OrderConfirmed& e, const RecordInfo&, Transaction& tx) {
  (void)tx.execute("UPDATE orders SET payment_status = 'charged' WHERE id = $1", e.order_id);
  (void)tx.execute(
      "INSERT INTO billing_ledger (order_id, event_id, amount, provider_payment_id) "
      "VALUES ($1, $2, $3, $4)",
      e.order_id, e.event_id, e.total_amount, fmt::format("pay-{}", e.order_id));
  return Outcome::Done;
}

std::int64_t scalar(Store& store, std::string_view sql, std::int64_t arg) {
  auto tx = store.begin();
  const Rows rows = tx->execute(sql, arg);
  const std::int64_t v = rows.empty() || rows[0].is_null(0) ? 0 : rows[0].int64(0);
  tx->rollback();
  return v;
}

ConsumerConfig consumer_config(const std::string& brokers, std::string_view group, std::size_t batch) {
  ConsumerConfig c;
  c.bootstrap_servers = brokers;
  c.group_id = std::string(group);
  c.topics = {std::string(kOrderConfirmedTopic)};
  c.batch_size = batch;
  // The mock cluster's first group join waits 3 s; these keep later rebalances short.
  c.kafka = {{"session.timeout.ms", "6000"}, {"heartbeat.interval.ms", "1000"},
             {"auto.offset.reset", "earliest"}};
  return c;
}

// Runs a consumer on its own thread; stop() then join in the destructor.
class ConsumerThread {
 public:
  ConsumerThread(ConsumerConfig config, std::unique_ptr<Store> store, Handler<OrderConfirmed> handler)
      : consumer_(std::move(config), std::move(store), quiet_hooks()) {
    consumer_.on<OrderConfirmed>(std::string(kOrderConfirmedTopic), std::move(handler));
    thread_ = std::thread([this] {
      try {
        consumer_.run();
      } catch (const std::exception& e) {
        std::cerr << "idem demo: consumer stopped: " << e.what() << "\n";
        failed_ = true;
      }
    });
  }
  ~ConsumerThread() {
    consumer_.stop();
    if (thread_.joinable()) thread_.join();
  }
  ConsumerThread(const ConsumerThread&) = delete;
  ConsumerThread& operator=(const ConsumerThread&) = delete;
  [[nodiscard]] ConsumerStats stats() const { return consumer_.stats(); }
  [[nodiscard]] bool failed() const { return failed_; }

 private:
  static ConsumerHooks quiet_hooks() {
    ConsumerHooks h;
    h.log = [](std::string_view line) {
      // librdkafka's informational chatter (group joins) is not news in a demo.
      if (line.find("error") != std::string_view::npos || line.find("fail") != std::string_view::npos) {
        std::cerr << "idem demo: " << line << "\n";
      }
    };
    return h;
  }
  Consumer consumer_;
  std::thread thread_;
  std::atomic<bool> failed_{false};
};

int run_demo(const DemoOptions& o) {
  std::filesystem::path dir;
  std::string url = o.db;
  if (url.empty()) {
    dir = std::filesystem::temp_directory_path() /
          fmt::format("idem-demo-{}", std::chrono::steady_clock::now().time_since_epoch().count());
    std::filesystem::create_directories(dir);
    url = "sqlite://" + (dir / "idem.db").string();
  }
  std::optional<DevBroker> embedded;
  std::string brokers = o.brokers;
  if (brokers.empty()) {
    embedded.emplace(DevBrokerOptions{
        .brokers = 1,
        .topics = {{std::string(kOrderConfirmedTopic), 6}, {std::string(kOrderConfirmedTopic) + ".dlq", 3}}});
    brokers = embedded->bootstrap_servers();
  }
  auto store = open_store(url);
  store->migrate();
  std::cout << fmt::format("idem demo: {} orders, store {}, Kafka {} ({})\n", o.orders,
                           to_string(store->backend()), brokers,
                           embedded ? "embedded dev broker" : "external");
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + std::chrono::seconds(o.timeout_s);
  std::mt19937_64 rng(o.seed);

  // 1. The order service creates and confirms orders; each confirmation writes
  //    order.confirmed.v1 to the outbox in the same transaction (event_id born there).
  Outbox outbox;
  OrderService orders(outbox);
  std::int64_t first_id = 0;
  {
    auto tx = store->begin();
    first_id = OrderService::next_order_id(*tx);
    for (int i = 0; i < o.orders; ++i) {
      orders.create(*tx, first_id + i, 1 + static_cast<std::int64_t>(rng() % 50),
                    Amount::from_hundredths(100 + static_cast<std::int64_t>(rng() % 100000)));
    }
    tx->commit();
  }
  for (int i = 0; i < o.orders; ++i) (void)orders.confirm(*store, first_id + i);

  // 2. The consumers: billing and analytics, each its own group and its own dedup rows.
  ConsumerThread billing(consumer_config(brokers, kBillingGroup, o.batch), open_store(url), bill);
  ConsumerThread analytics(consumer_config(brokers, kAnalyticsGroup, o.batch), open_store(url),
                           count_handler<OrderConfirmed>());

  // 3. The relay publishes the outbox with an idempotent producer.
  RelayConfig rc;
  rc.store_url = url;
  rc.producer.bootstrap_servers = brokers;
  RelayObserver quiet;
  quiet.log = [](std::string_view) {};
  Relay relay(rc, quiet);
  if (!relay.run_until_empty(std::chrono::seconds(o.timeout_s))) {
    std::cerr << "idem demo: the relay did not drain the outbox in time\n";
    return 1;
  }

  // 4. Duplicate sources and bad input: a producer resend of published events (same
  //    event_id, same key, new offset) and one malformed message of each kind.
  ProducerConfig pc;
  pc.bootstrap_servers = brokers;
  Producer producer(pc);
  std::int64_t resent = 0;
  {
    auto tx = store->begin();
    const Rows rows = tx->execute(
        "SELECT message_key, payload, event_id FROM outbox WHERE aggregate_id >= $1 ORDER BY id",
        std::to_string(first_id));
    tx->rollback();
    for (const auto& row : rows) {
      if (std::uniform_real_distribution<double>(0, 1)(rng) >= o.duplicate_ratio) continue;
      (void)producer.send(ProducerMessage{.topic = std::string(kOrderConfirmedTopic),
                                          .key = std::string(row.text(0)),
                                          .payload = std::string(row.text(1)),
                                          .event_id = row.uuid(2),
                                          .traceparent = {},
                                          .headers = {}});
      ++resent;
    }
  }
  const auto bad = malformed_messages(new_uuid_v7());
  std::map<std::string, std::int64_t> expected_dlq;
  for (const auto& [payload, reason] : bad) {
    (void)producer.send(ProducerMessage{.topic = std::string(kOrderConfirmedTopic),
                                        .key = "malformed",
                                        .payload = payload,
                                        .event_id = Uuid(),
                                        .traceparent = {},
                                        .headers = {}});
    ++expected_dlq[reason];
  }
  std::vector<Delivery> deliveries;
  if (!producer.flush(std::chrono::seconds(30), deliveries)) {
    std::cerr << "idem demo: the broker did not acknowledge the injected messages\n";
    return 1;
  }

  // 5. Wait until both groups have applied every order and rejected every bad message.
  const auto n = static_cast<std::int64_t>(o.orders);
  const auto bad_n = static_cast<std::int64_t>(bad.size());
  auto done = [&] {
    const auto b = billing.stats();
    const auto a = analytics.stats();
    return static_cast<std::int64_t>(b.processed) >= n && static_cast<std::int64_t>(a.processed) >= n &&
           static_cast<std::int64_t>(b.dead_lettered) >= bad_n &&
           static_cast<std::int64_t>(a.dead_lettered) >= bad_n &&
           b.delivered >= static_cast<std::uint64_t>(n + resent + bad_n) &&
           a.delivered >= static_cast<std::uint64_t>(n + resent + bad_n);
  };
  auto last_print = std::chrono::steady_clock::now();
  while (!done() && std::chrono::steady_clock::now() < deadline && !billing.failed() && !analytics.failed()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // progress display only
    if (std::chrono::steady_clock::now() - last_print >= std::chrono::seconds(1)) {
      last_print = std::chrono::steady_clock::now();
      std::cout << fmt::format("  ... billed {}/{}, analytics {}/{}, dead letters {}/{}\n",
                               billing.stats().processed, n, analytics.stats().processed, n,
                               billing.stats().dead_lettered, bad_n);
    }
  }
  const ConsumerStats b = billing.stats();
  const ConsumerStats a = analytics.stats();

  // 6. Audit the invariant from the database.
  const std::int64_t wrong_ledger = scalar(*store,
      "SELECT COUNT(*) FROM (SELECT o.id FROM orders o LEFT JOIN billing_ledger l ON l.order_id = o.id "
      "WHERE o.id >= $1 GROUP BY o.id, o.payment_status "
      "HAVING COUNT(l.id) <> 1 OR o.payment_status <> 'charged') AS bad", first_id);
  const std::int64_t ledger_rows = scalar(*store,
      "SELECT COUNT(*) FROM billing_ledger WHERE order_id >= $1", first_id);
  const std::int64_t analytics_rows = count_effects(*store, kAnalyticsGroup);
  const std::int64_t analytics_max = max_effects_per_event(*store, kAnalyticsGroup);

  std::int64_t violations = wrong_ledger;
  if (ledger_rows != n) ++violations;
  if (analytics_rows != n || analytics_max != 1) ++violations;
  for (const auto* s : {&b, &a}) {
    for (const auto& [reason, count] : expected_dlq) {
      const auto it = s->dead_lettered_by_reason.find(reason);
      if (it == s->dead_lettered_by_reason.end() || static_cast<std::int64_t>(it->second) != count) ++violations;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  const auto row = [](std::string_view name, auto billing_value, auto analytics_value) {
    std::cout << fmt::format("  {:<40}{:>10}{:>12}\n", name, billing_value, analytics_value);
  };
  std::cout << fmt::format("\n  {:<40}{:>10}{:>12}\n", "", "billing", "analytics");
  row("orders confirmed", n, n);
  row("producer resends (same event_id)", resent, resent);
  row("messages delivered (dupes included)", b.delivered, a.delivered);
  row("duplicates skipped", b.duplicates, a.duplicates);
  row("effects applied", b.processed, a.processed);
  row("effect rows in the database", ledger_rows, analytics_rows);
  row("transactions", b.transactions, a.transactions);
  row("dead letters", b.dead_lettered, a.dead_lettered);
  for (const auto& [reason, count] : expected_dlq) {
    const auto get = [&](const ConsumerStats& s) {
      const auto it = s.dead_lettered_by_reason.find(reason);
      return it == s.dead_lettered_by_reason.end() ? std::uint64_t{0} : it->second;
    };
    row("  " + reason, get(b), get(a));
  }
  std::cout << fmt::format("  {:<40}{:>10}\n\n", "violations", violations);
  std::cout << fmt::format("finished in {:.1f} s\n", secs);
  if (!dir.empty()) std::filesystem::remove_all(dir);
  if (violations != 0) {
    std::cout << "FAILED: the exactly-once invariant does not hold\n";
    return 1;
  }
  std::cout << "OK: every confirmed order has exactly one effect per group; every invalid "
               "message is in the DLQ with its reason\n";
  return 0;
}

}  // namespace

void register_demo(CLI::App& app, ExitCode& exit_code) {
  auto opts = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "demo", "Run the reference system on the embedded default and audit exactly-once effects");
  cmd->add_option("--db", opts->db, "Store URL (default: a fresh SQLite file in a temp dir)");
  cmd->add_option("--brokers", opts->brokers, "Kafka bootstrap servers (default: the embedded dev broker)");
  cmd->add_option("--orders", opts->orders, "Orders to confirm")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--duplicates", opts->duplicate_ratio, "Share of published events sent again")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--batch", opts->batch, "Events per consumer transaction")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--seed", opts->seed, "Random seed")->capture_default_str();
  cmd->add_option("--timeout", opts->timeout_s, "Give up after this many seconds")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  cmd->callback([opts, &exit_code] { exit_code.value = run_demo(*opts); });
}

}  // namespace idem::cli
