#pragma once
// When an idle consumer looks at its store connections (ConsumerConfig::idle_store_check).
//
// A failover is noticed by the transaction that finds its connection replaced
// (PartitionPositions::replaced, asked by BatchProcessor::commit); a consumer whose partitions get
// no record runs none, and the effects the failover took back stay missing for as long as they stay
// quiet. So once no record was polled for a whole interval, and at that interval while none is, the
// consumer looks at every connection (PartitionPositions::idle_look: the socket is read without
// blocking, nothing is sent, a broken connection is replaced) and, when one was replaced,
// goes back to the stored offsets as after any replacement.
//
// Why the socket and not a round trip (a query): a server that died (killed, shut down,
// its sessions terminated) has closed its connections, and the look sees that at once;
// a host that vanished without closing them is seen when TCP keepalives give up (idem's
// libpq defaults: about a minute), while a query to it would block the poll loop until
// TCP retransmissions gave up (many minutes), past the group's max.poll.interval.ms. The
// look costs nothing on the server and nothing while records flow: the poll loop only
// moves the deadline on with the time of the turn it measured already.
#include <chrono>

#include "idem/consumer.hpp"
#include "idem/store.hpp"

namespace idem::detail {

class IdleStoreCheck {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  /// Off with `idle_store_check` 0, without offsets in the store (nothing to go back to),
  /// and on SQLite (a file never replaces its connection: Store::reconnects() stays 0).
  IdleStoreCheck(const ConsumerConfig& config, const Store& store) noexcept
      : every_(config.idle_store_check),
        on_(every_.count() > 0 && config.offsets_in_store && store.backend() != Backend::Sqlite) {}

  /// Records were polled in the turn that began at `now`: their transactions look at the
  /// connections, so the next look waits a whole interval.
  void records_polled(TimePoint now) noexcept { next_ = now + every_; }

  /// Whether a look is due at `now`; if so, the next one is due an interval later.
  [[nodiscard]] bool take_due(TimePoint now) noexcept {
    if (!on_ || now < next_) return false;
    next_ = now + every_;
    return true;
  }

 private:
  std::chrono::milliseconds every_;
  bool on_;
  TimePoint next_{};  // the first turn looks: nothing was polled yet
};

}  // namespace idem::detail
