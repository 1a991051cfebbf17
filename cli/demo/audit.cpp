#include "demo/audit.hpp"

#include <iostream>
#include <set>

#include <fmt/format.h>

#include "idem/devtools/kafka_admin.hpp"
#include "idem/outbox.hpp"
#include "idem/reference/analytics.hpp"
#include "idem/reference/billing.hpp"
#include "idem/reference/order_service.hpp"

namespace idem::cli::demo {

namespace {

std::int64_t sum(const std::vector<std::int64_t>& end, const std::vector<std::int64_t>& start) {
  std::int64_t n = 0;
  for (std::size_t i = 0; i < end.size(); ++i) n += end[i] - (i < start.size() ? start[i] : 0);
  return n;
}

void row(std::string_view name, const std::string& billing, const std::string& analytics = {}) {
  std::cout << fmt::format("  {:<58}{:>10}{:>11}\n", name, billing, analytics);
}
void row(std::string_view name, std::int64_t billing) {
  row(name, std::to_string(billing));
}
void row(std::string_view name, std::int64_t billing, std::int64_t analytics) {
  row(name, std::to_string(billing), std::to_string(analytics));
}

std::string examples(const std::vector<std::int64_t>& ids) {
  std::string out;
  for (std::size_t i = 0; i < ids.size() && i < 5; ++i)
    out += (i ? ", " : "") + std::to_string(ids[i]);
  if (ids.size() > 5) out += ", ...";
  return out;
}

}  // namespace

Counts read_counts(Store& store, const RunScope& s) {
  auto tx = store.begin();
  const OutboxSlice rows = outbox_rows_after(*tx, s.outbox_after);
  Counts c;
  c.events = rows.rows;
  c.unpublished = rows.unpublished;
  c.billing = outbox_events_processed(*tx, kBilling, s.outbox_after);
  c.analytics = outbox_events_processed(*tx, kAnalytics, s.outbox_after);
  tx->rollback();
  return c;
}

AuditResult audit(Store& store, const RunScope& s, const Injected& injected,
                  const std::optional<ProviderSummary>& provider,
                  const std::vector<const ManagedChild*>& children) {
  AuditResult result;
  auto violation = [&](std::string text) { result.violations.push_back(std::move(text)); };
  const Counts counts = read_counts(store, s);
  const std::int64_t last_order = s.first_order + s.orders;

  // Billing: exactly one ledger row and payment_status 'charged' per order.
  std::vector<std::int64_t> bad_ledger;
  std::int64_t ledger_rows = 0;
  {
    auto tx = store.begin();
    const std::vector<OrderBilling> rows = billing_of_orders(*tx, s.first_order, last_order);
    tx->rollback();
    for (const OrderBilling& order : rows) {
      ledger_rows += order.ledger_rows;
      if (order.ledger_rows != 1 || order.payment_status != "charged")
        bad_ledger.push_back(order.order_id);
    }
    if (static_cast<std::int64_t>(rows.size()) != s.orders) {
      violation(fmt::format("{} orders of the run are in the database, expected {}", rows.size(),
                            s.orders));
    }
  }
  if (!bad_ledger.empty()) {
    violation(
        fmt::format("{} orders without exactly one ledger row and payment_status 'charged' ({})",
                    bad_ledger.size(), examples(bad_ledger)));
  }

  // Analytics: revenue and order count per customer equal to the confirmed orders.
  // (Over the whole database: analytics has no notion of a run.)
  std::int64_t analytics_orders = 0;
  {
    auto tx = store.begin();
    const std::vector<OrderService::ConfirmedOrder> expected = OrderService::confirmed_orders(*tx);
    const std::map<std::int64_t, CustomerRevenue> actual = all_customer_revenue(*tx);
    tx->rollback();
    std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>>
        want;  // customer -> (hundredths, n)
    for (const OrderService::ConfirmedOrder& order : expected) {
      auto& w = want[order.customer_id];
      w.first += order.total ? order.total->hundredths() : -1'000'000'000;
      ++w.second;
    }
    std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> have;
    for (const auto& [customer, revenue] : actual) {
      have[customer] = {revenue.revenue.hundredths(), revenue.order_count};
      analytics_orders += revenue.order_count;
    }
    std::vector<std::int64_t> wrong;
    for (const auto& [customer, w] : want) {
      const auto it = have.find(customer);
      if (it == have.end() || it->second != w) wrong.push_back(customer);
    }
    for (const auto& [customer, h] : have) {
      if (!want.contains(customer)) wrong.push_back(customer);
    }
    if (!wrong.empty()) {
      violation(fmt::format("{} customers with a wrong analytics revenue or order count ({})",
                            wrong.size(), examples(wrong)));
    }
  }

  // Nothing lost: every event of the run has a dedup row in each group.
  for (const auto& [group, applied] :
       {std::pair{kBilling, counts.billing}, std::pair{kAnalytics, counts.analytics}}) {
    if (applied != counts.events) {
      violation(fmt::format("{} valid events have no effect in group {}", counts.events - applied,
                            group));
    }
  }
  if (counts.events != s.orders) {
    violation(
        fmt::format("{} events in the outbox for {} confirmed orders", counts.events, s.orders));
  }

  // The provider: one charge per order.
  if (provider) {
    if (!provider->orders_charged_more_than_once.empty()) {
      violation(fmt::format("the provider charged {} orders more than once ({})",
                            provider->orders_charged_more_than_once.size(),
                            examples(provider->orders_charged_more_than_once)));
    }
    if (provider->orders != s.orders) {
      violation(fmt::format("the provider charged {} distinct orders, expected {}",
                            provider->orders, s.orders));
    }
    if (provider->charges != provider->orders) {
      violation(fmt::format("the provider made {} charges for {} orders", provider->charges,
                            provider->orders));
    }
  } else {
    violation("the provider's audit could not be read");
  }

  // The topics, from watermarks: everything ever written during the run.
  const auto topic_end = end_offsets(s.brokers, s.topic, s.partitions);
  const auto dlq_end = end_offsets(s.brokers, s.dlq_topic, s.dlq_partitions);
  const std::int64_t on_topic = sum(topic_end, s.topic_start);
  const std::int64_t in_dlq = sum(dlq_end, s.dlq_start);
  std::int64_t malformed = 0;
  for (const auto& [cls, n] : injected.malformed_by_class) malformed += n;

  // DLQ entries by (group, reason), read back from the DLQ topic.
  std::map<std::string, std::map<std::string, std::int64_t>> dlq;  // reason -> group -> n
  std::int64_t dlq_read = 0;
  const auto dlq_all = static_cast<std::size_t>(sum(dlq_end, {}));  // earlier runs' entries too
  for (const KafkaRecord& r :
       read_topic(s.brokers, s.dlq_topic, s.dlq_partitions, dlq_all, std::chrono::seconds(30))) {
    const auto p = static_cast<std::size_t>(r.partition);
    if (p < s.dlq_start.size() && r.offset < s.dlq_start[p]) continue;  // an earlier run's
    ++dlq_read;
    ++dlq[r.header("idem.error.class").value_or("?")]
         [r.header("idem.consumer.group").value_or("?")];
  }
  if (dlq_read != in_dlq)
    violation(fmt::format("read {} of the {} DLQ entries back", dlq_read, in_dlq));
  for (const auto& [cls, n] : injected.malformed_by_class) {
    for (const auto group : {kBilling, kAnalytics}) {
      const std::int64_t got = dlq[cls][std::string(group)];
      // At least: a consumer SIGKILLed after the dead letter's acknowledgement but before
      // its offset commit, or a rewound group, dead-letters the same message again.
      if (got < n)
        violation(
            fmt::format("{}: {} of {} malformed messages in the DLQ for {}", cls, got, n, group));
    }
  }

  // The table.
  std::cout << "\n";
  row("", "billing", "analytics");
  row("orders created and confirmed (this run)", s.orders);
  row("records on the topic (watermarks; duplicates incl.)", on_topic);
  row("  of which malformed messages", malformed);
  row("  of which extra copies of valid events", on_topic - malformed - counts.events);
  row("outbox rows published again (producer resend)", injected.resent_rows);
  row("effects applied (dedup rows of the run's events)", counts.billing, counts.analytics);
  row("valid events without an effect (lost)", counts.events - counts.billing,
      counts.events - counts.analytics);
  row("ledger rows / orders counted by analytics", ledger_rows, analytics_orders);
  std::map<std::string, std::uint64_t> delivered;
  std::map<std::string, std::uint64_t> skipped;
  for (const ManagedChild* c : children) {
    const std::string group = c->name().starts_with("billing")     ? "billing"
                              : c->name().starts_with("analytics") ? "analytics"
                                                                   : "";
    if (group.empty()) continue;
    const auto& rc = c->reported_counters();
    if (auto it = rc.find("delivered"); it != rc.end()) delivered[group] += it->second;
    if (auto it = rc.find("duplicates"); it != rc.end()) skipped[group] += it->second;
  }
  row("records delivered to consumers that stopped cleanly*", std::to_string(delivered["billing"]),
      std::to_string(delivered["analytics"]));
  row("duplicates skipped by consumers that stopped cleanly*", std::to_string(skipped["billing"]),
      std::to_string(skipped["analytics"]));
  row(fmt::format("DLQ entries ({} in all), by reason:", in_dlq), "", "");
  for (const auto& [cls, groups] : dlq) {
    auto get = [&counts = groups](std::string_view g) {
      const auto it = counts.find(std::string(g));
      return it == counts.end() ? std::int64_t{0} : it->second;
    };
    row("  " + cls, get(kBilling), get(kAnalytics));
  }
  if (injected.dlq_replayed >= 0)
    row("DLQ entries replayed after the cause was fixed", injected.dlq_replayed);
  if (provider) {
    row("provider: charges", provider->charges);
    row("provider: distinct orders charged", provider->orders);
    row("provider: orders charged more than once",
        static_cast<std::int64_t>(provider->orders_charged_more_than_once.size()));
    row("provider: requests answered from the stored response", provider->replays);
    row("provider: connections reset after the charge was stored", provider->resets_after_commit);
    row("provider: 503 answers", provider->unavailable);
    row("provider: declines", provider->declined);
  }
  for (const ManagedChild* c : children) {
    row(fmt::format("{}: processes started / SIGKILLed", c->name()),
        fmt::format("{} / {}", c->generations(), c->kills()));
  }
  row("violations", static_cast<std::int64_t>(result.violations.size()));
  std::cout
      << "  * a SIGKILLed process cannot report what it did; its work shows in the rows above.\n";
  for (const auto& v : result.violations) std::cout << "  VIOLATION: " << v << "\n";
  return result;
}

}  // namespace idem::cli::demo
