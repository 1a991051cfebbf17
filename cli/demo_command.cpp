// `idem demo`: the reference pipeline on the embedded default, as far as it
// exists today: orders are confirmed, their order.confirmed.v1 events are
// delivered with duplicates and malformed messages mixed in, and the billing
// effect is applied through the dedup store in batched transactions. The audit
// at the end checks the invariant: one ledger row per confirmed order, every
// invalid message rejected with its reason, nothing lost.
//
// Later issues replace the in-process delivery with the embedded Kafka broker,
// real consumer processes and the payment provider.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "idem/events/order_confirmed.hpp"
#include "idem/store.hpp"

namespace idem::cli {
namespace {

constexpr std::string_view kBillingGroup = "billing-order-confirmed";
constexpr std::string_view kAnalyticsGroup = "analytics-order-confirmed";

struct DemoOptions {
  std::string db;
  int orders = 5000;
  double duplicate_ratio = 0.10;
  int batch = 100;
  std::uint64_t seed = 42;
};

// Messages that can never be valid, one per kind the boundary must reject.
std::vector<std::string> malformed_messages(const Uuid& v7) {
  const std::string id = v7.to_string();
  const std::string tail = R"("occurred_at":"2026-11-29T10:00:00Z","order_id":1,"customer_id":1,"total_amount":"1.00"})";
  return {
      "{not json",
      std::string("{\"event_id\":\"") + id + "\",\"event_type\":\"order.confirmed.v1\",\"x\":\"\xff\"," + tail,
      R"({"event_type":"order.confirmed.v1",)" + tail,
      R"({"event_id":"not-a-uuid","event_type":"order.confirmed.v1",)" + tail,
      R"({"event_id":"6ba7b810-9dad-41d1-80b4-00c04fd430c8","event_type":"order.confirmed.v1",)" + tail,
      "{\"event_id\":\"" + id + R"(","event_type":"order.cancelled.v1",)" + tail,
      "{\"event_id\":\"" + id +
          R"(","event_type":"order.confirmed.v1","occurred_at":"yesterday","order_id":1,"customer_id":1,"total_amount":"1.00"})",
      "{\"event_id\":\"" + id +
          R"(","event_type":"order.confirmed.v1","occurred_at":"2026-11-29T10:00:00Z","order_id":1,"customer_id":1,"total_amount":12.5})",
      "{\"event_id\":\"" + id +
          R"(","event_type":"order.confirmed.v1","occurred_at":"2026-11-29T10:00:00Z","order_id":1,"customer_id":1,"total_amount":"-3.00"})",
      "{\"event_id\":\"" + id +
          R"(","event_type":"order.confirmed.v1","occurred_at":"2026-11-29T10:00:00Z","order_id":1,"customer_id":1,"total_amount":"1.005"})",
  };
}

struct Audit {
  std::int64_t orders = 0;
  std::int64_t delivered = 0;
  std::int64_t duplicates_skipped = 0;
  std::int64_t effects_applied = 0;
  std::int64_t analytics_applied = 0;
  std::int64_t transactions = 0;
  std::map<std::string, std::int64_t> rejected_by_reason;
  std::int64_t violations = 0;
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
  auto store = open_store(url);
  store->migrate();
  std::cout << fmt::format("idem demo: store {} (schema v{})\n", to_string(store->backend()),
                           store->schema_version());

  std::mt19937_64 rng(o.seed);
  Audit audit;
  audit.orders = o.orders;

  // 1. The order service confirms orders; each event is born once, with its UUIDv7.
  const auto now = std::chrono::time_point_cast<std::chrono::microseconds>(std::chrono::system_clock::now());
  const std::int64_t base_id = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count() * 1000;
  std::vector<std::string> events;
  events.reserve(static_cast<std::size_t>(o.orders));
  {
    auto tx = store->begin();
    for (int i = 0; i < o.orders; ++i) {
      OrderConfirmed e;
      e.event_id = new_uuid_v7();
      e.occurred_at = now;
      e.order_id = base_id + i;
      e.customer_id = 1 + static_cast<std::int64_t>(rng() % 50);
      e.total_amount = Amount::from_hundredths(100 + static_cast<std::int64_t>(rng() % 100000));
      (void)tx->execute(
          "INSERT INTO orders (id, customer_id, total_amount, status, created_at, confirmed_at) "
          "VALUES ($1, $2, $3, 'confirmed', $4, $4)",
          e.order_id, e.customer_id, e.total_amount, e.occurred_at);
      events.push_back(to_json(e));
    }
    tx->commit();
  }

  // 2. Delivery: at-least-once, so duplicates of the same payload arrive, plus
  //    messages that can never be valid.
  std::vector<std::string> deliveries = events;
  const auto dupes = static_cast<std::size_t>(o.duplicate_ratio * static_cast<double>(events.size()));
  for (std::size_t i = 0; i < dupes; ++i) deliveries.push_back(events[rng() % events.size()]);
  for (auto& bad : malformed_messages(new_uuid_v7())) deliveries.push_back(std::move(bad));
  std::shuffle(deliveries.begin(), deliveries.end(), rng);
  audit.delivered = static_cast<std::int64_t>(deliveries.size());

  // 3. The billing consumer: validate at the boundary, then one transaction per
  //    batch with one batch mark statement and the effect for each new event.
  const auto started = std::chrono::steady_clock::now();
  std::vector<OrderConfirmed> batch;
  std::vector<Uuid> ids;
  for (std::size_t pos = 0; pos < deliveries.size();) {
    batch.clear();
    ids.clear();
    const std::size_t end = std::min(deliveries.size(), pos + static_cast<std::size_t>(o.batch));
    for (; pos < end; ++pos) {
      auto parsed = parse_order_confirmed(deliveries[pos]);
      if (!parsed) {
        ++audit.rejected_by_reason[std::string(to_string(parsed.error().reason))];
        continue;
      }
      ids.push_back(parsed.value().event_id);
      batch.push_back(std::move(parsed).value());
    }
    if (batch.empty()) continue;
    auto tx = store->begin();
    const std::vector<bool> fresh = tx->mark_processed_batch(ids, kBillingGroup);
    const std::vector<bool> fresh_analytics = tx->mark_processed_batch(ids, kAnalyticsGroup);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      audit.analytics_applied += fresh_analytics[i] ? 1 : 0;
      if (!fresh[i]) {
        ++audit.duplicates_skipped;
        continue;
      }
      Savepoint sp(*tx);  // one failing effect would not poison the batch
      (void)tx->execute("UPDATE orders SET payment_status = 'charged' WHERE id = $1", batch[i].order_id);
      (void)tx->execute(
          "INSERT INTO billing_ledger (order_id, event_id, amount, provider_payment_id) VALUES ($1, $2, $3, $4)",
          batch[i].order_id, batch[i].event_id, batch[i].total_amount,
          fmt::format("demo-{}", batch[i].order_id));
      sp.release();
      ++audit.effects_applied;
    }
    tx->commit();
    ++audit.transactions;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  // 4. Audit: exactly one ledger row and 'charged' for every confirmed order.
  {
    auto tx = store->begin();
    const Rows bad = tx->execute(
        "SELECT o.id FROM orders o LEFT JOIN billing_ledger l ON l.order_id = o.id "
        "WHERE o.id >= $1 GROUP BY o.id, o.payment_status "
        "HAVING COUNT(l.id) <> 1 OR o.payment_status <> 'charged'",
        base_id);
    audit.violations = static_cast<std::int64_t>(bad.size());
    tx->rollback();
  }
  std::int64_t rejected = 0;
  for (const auto& [reason, n] : audit.rejected_by_reason) rejected += n;
  const std::int64_t expected_rejects = static_cast<std::int64_t>(malformed_messages(Uuid()).size());
  if (rejected != expected_rejects) ++audit.violations;
  if (audit.effects_applied != audit.orders || audit.analytics_applied != audit.orders) ++audit.violations;

  std::cout << fmt::format(
      "\n  {:<34}{:>10}\n  {:<34}{:>10}\n  {:<34}{:>10}\n  {:<34}{:>10}\n  {:<34}{:>10}\n  {:<34}{:>10}\n",
      "orders confirmed", audit.orders, "messages delivered (with dupes)", audit.delivered,
      "duplicates skipped", audit.duplicates_skipped, "billing effects applied", audit.effects_applied,
      "analytics effects applied", audit.analytics_applied, "transactions", audit.transactions);
  std::cout << fmt::format("  {:<34}{:>10}\n", "rejected at the boundary", rejected);
  for (const auto& [reason, n] : audit.rejected_by_reason) {
    std::cout << fmt::format("    {:<32}{:>10}\n", reason, n);
  }
  std::cout << fmt::format("  {:<34}{:>10}\n\n", "violations", audit.violations);
  std::cout << fmt::format("processed {} deliveries in {:.3f} s ({:.0f}/s), batch size {}\n",
                           audit.delivered, secs, static_cast<double>(audit.delivered) / secs, o.batch);
  if (!dir.empty()) std::filesystem::remove_all(dir);
  if (audit.violations != 0) {
    std::cout << "FAILED: the exactly-once invariant does not hold\n";
    return 1;
  }
  std::cout << "OK: every confirmed order has exactly one effect; every invalid message was rejected\n";
  return 0;
}

}  // namespace

void register_demo(CLI::App& app, ExitCode& exit_code) {
  auto opts = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand("demo", "Run the reference pipeline and audit exactly-once effects");
  cmd->add_option("--db", opts->db, "Store URL (default: a fresh SQLite file in a temp dir)");
  cmd->add_option("--orders", opts->orders, "Orders to confirm")->check(CLI::Range(1, 10'000'000))->capture_default_str();
  cmd->add_option("--duplicates", opts->duplicate_ratio, "Share of redelivered events")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  cmd->add_option("--batch", opts->batch, "Events per transaction")->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->add_option("--seed", opts->seed, "Random seed")->capture_default_str();
  cmd->callback([opts, &exit_code] { exit_code.value = run_demo(*opts); });
}

}  // namespace idem::cli
