#include "consumer/horizon/dedup_retention_declarer.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <thread>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "idem/retry.hpp"
#include "idem/timestamp.hpp"
#include "stores/dedup_retention.hpp"
#include "stores/store_errors.hpp"

namespace idem::detail {

namespace {

using std::chrono::milliseconds;

std::string this_process() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  return fmt::format("{} pid {}", host.data(), static_cast<long>(getpid()));
}

}  // namespace

DedupRetentionDeclarer::DedupRetentionDeclarer(const ConsumerConfig& config, Store& store,
                                               const LogFn& log)
    : config_(config), store_(store), guard_(config), log_(log), declared_by_(this_process()) {}

milliseconds DedupRetentionDeclarer::renew_interval(milliseconds retention) noexcept {
  return std::min<milliseconds>(kDedupRetentionRenewal, retention / 6);
}

void DedupRetentionDeclarer::declare() {
  const auto now = config_.clock->now();
  const DroppedDedupMarks dropped = declare_dedup_retention(
      store_, config_.group_id, config_.dedup_horizon.retention, declared_by_, now);
  next_renewal_ =
      std::chrono::steady_clock::now() + renew_interval(config_.dedup_horizon.retention);
  guard_.marks_dropped(dropped);
  const bool horizon_covers_it =
      dropped.born_before <=
      std::chrono::floor<milliseconds>(config_.dedup_horizon.stale_before(now));
  if (horizon_covers_it || dropped.born_before <= reported_born_before_) return;
  reported_born_before_ = dropped.born_before;
  if (log_) {
    log_(fmt::format(
        "idem consumer: maintenance at {} kept dedup marks for {} h only, less than this "
        "group's horizon of {} h: events born before {} may have lost their marks and are "
        "treated as stale (consumer.stale_events) until the horizon passes that instant",
        format_rfc3339(dropped.dropped_at), dropped.retention.count() / 3'600'000,
        config_.dedup_horizon.stale_age().count() / 3'600'000,
        format_rfc3339(dropped.born_before)));
  }
}

void DedupRetentionDeclarer::declare_at_start(const std::atomic<bool>& stop) {
  Backoff backoff(config_.retry);
  bool schema_checked = false;
  for (std::uint32_t attempt = 1;; ++attempt) {
    try {
      // Before anything else: a store that was never migrated, or migrated by an older or
      // newer idem, is refused at once with a message that says which.
      require_idem_schema(store_, "idem consumer");
      schema_checked = true;
      declare();
      return;
    } catch (const Error& e) {
      if (!e.transient() && !schema_checked) throw;  // require_idem_schema's message says it all
      if (!e.transient()) {
        throw Error(e.code(), e.source(),
                    fmt::format("consumer group '{}' cannot declare its dedup retention in the "
                                "store, so it does not start: {}",
                                config_.group_id, e.what()),
                    e.detail());
      }
      if (log_) log_(fmt::format("idem consumer: declaring the dedup retention: {}", e.what()));
    }
    const auto until = std::chrono::steady_clock::now() + backoff.delay(attempt);
    while (std::chrono::steady_clock::now() < until) {
      if (stop.load()) return;
      std::this_thread::sleep_for(std::min<milliseconds>(
          milliseconds(50),
          std::chrono::duration_cast<milliseconds>(until - std::chrono::steady_clock::now())));
    }
  }
}

void DedupRetentionDeclarer::renew_if_due() {
  if (!renewal_due()) return;
  try {
    declare();
  } catch (const std::exception& e) {
    // A declaration the store refuses for good (its table dropped) would lapse, and
    // maintenance could then drop marks this consumer relies on: stop instead.
    stop_if_refused_for_good("idem consumer", e);
    next_renewal_ = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    if (log_) log_(fmt::format("idem consumer: renewing the dedup retention: {}", e.what()));
  }
}

}  // namespace idem::detail
