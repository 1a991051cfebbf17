#pragma once
// The consumer's half of one dedup retention per store (docs/retention.md): before it
// processes anything, a consumer declares in its store the dedup retention its horizon
// relies on, for its group, so maintenance keeps those marks; it renews the declaration
// while it runs (a declaration expires `retention` after its last renewal). Each
// declaration also reads what maintenance has dropped, which the horizon guard then
// treats as stale: a consumer started after a shorter pass never re-executes an event
// whose mark is gone. The declarer owns that guard; every part of the consumer judges
// events by it (ConsumerContext::horizon_guard).
#include <atomic>
#include <chrono>
#include <string>

#include "consumer/horizon/dedup_horizon_guard.hpp"
#include "idem/consumer.hpp"
#include "idem/kafka/kafka_handle.hpp"
#include "idem/store.hpp"

namespace idem::detail {

class DedupRetentionDeclarer {
 public:
  DedupRetentionDeclarer(const ConsumerConfig& config, Store& store, const LogFn& log);

  /// The horizon guard, told what maintenance dropped at each declaration.
  [[nodiscard]] DedupHorizonGuard& guard() noexcept { return guard_; }

  /// Checks the store's idem schema version (require_idem_schema), then declares, before
  /// the first poll. Transient store errors are retried with the consumer's backoff until
  /// `stop`; anything else (an unmigrated store, one migrated by a newer idem) is thrown,
  /// so the consumer refuses to start and says why.
  void declare_at_start(const std::atomic<bool>& stop);
  /// Renews when due; call between batches (no transaction open on the store). A transient
  /// failure is logged and retried a minute later: the declaration outlives many failed
  /// renewals. One the store refuses for good throws stopping_error (store_errors.hpp).
  void renew_if_due();
  /// True when the next renew_if_due() would use the store.
  [[nodiscard]] bool renewal_due() const noexcept {
    return std::chrono::steady_clock::now() >= next_renewal_;
  }

  /// How often a running consumer renews: well inside the shortest retention (1 h).
  [[nodiscard]] static std::chrono::milliseconds renew_interval(
      std::chrono::milliseconds retention) noexcept;

 private:
  void declare();

  const ConsumerConfig& config_;
  Store& store_;
  DedupHorizonGuard guard_;
  const LogFn& log_;
  const std::string declared_by_;
  std::chrono::steady_clock::time_point next_renewal_{};
  std::chrono::sys_time<std::chrono::milliseconds> reported_born_before_{};  ///< logged once
};

}  // namespace idem::detail
