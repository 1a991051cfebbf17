#pragma once
// The demo's audit: what happened, read from the database, the provider's audit
// endpoint and the topics' watermarks, checked against the invariant (docs/reference-system.md).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "demo/children.hpp"
#include "demo/provider_admin.hpp"
#include "idem/store.hpp"

namespace idem::cli::demo {

inline constexpr std::string_view kBilling = "billing-order-confirmed";
inline constexpr std::string_view kAnalytics = "analytics-order-confirmed";

/// This run's slice of the database and the topics.
struct RunScope {
  std::int64_t first_order = 0;  // orders [first_order, first_order + orders)
  std::int64_t orders = 0;
  std::int64_t outbox_after = 0;  // this run's outbox rows have id > outbox_after
  std::string brokers;
  std::string topic;
  int partitions = 0;
  std::vector<std::int64_t> topic_start;  // watermarks when the run began
  std::string dlq_topic;
  int dlq_partitions = 0;
  std::vector<std::int64_t> dlq_start;
};

/// Live counts for the progress lines and the waits.
struct Counts {
  std::int64_t events = 0;       // outbox rows (one per confirmed order)
  std::int64_t unpublished = 0;  // of those, not yet acknowledged by the broker
  std::int64_t billing = 0;      // events with a billing dedup row
  std::int64_t analytics = 0;    // events with an analytics dedup row
};
[[nodiscard]] Counts read_counts(Store& store, const RunScope& scope);

/// What the demo did, for the table.
struct Injected {
  std::int64_t resent_rows = 0;  // outbox rows published again
  std::map<std::string, std::int64_t> malformed_by_class;
  std::int64_t dlq_replayed = -1;  // -1: the phase did not run
  bool offset_reset = false;
};

struct AuditResult {
  std::vector<std::string> violations;
};

/// Prints the audit table and returns the violations of the invariant: every order
/// of the run charged exactly once by the provider, exactly one ledger row and
/// payment_status 'charged'; no valid event without a dedup row in either group;
/// analytics revenue and order count per customer equal to the orders table; every
/// malformed message in the DLQ with its reason for both groups.
[[nodiscard]] AuditResult audit(Store& store, const RunScope& scope, const Injected& injected,
                                const std::optional<ProviderSummary>& provider,
                                const std::vector<const ManagedChild*>& children);

}  // namespace idem::cli::demo
