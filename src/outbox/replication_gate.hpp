#pragma once
// publish_after = replicated: a claimed batch waits here until the commits of its rows are
// flushed on the standbys that count, so that a failover to one of them keeps every row
// whose event was published. The claim read the primary's WAL insert position in its
// own transaction (OutboxQueries::claim): every claimed row's commit lies at or below it.
// A thread of its own, on a connection of its own, reads pg_stat_replication while a
// batch waits and publishes the position the quorum of standbys has flushed; the relay
// thread produces the batches it covers, in claim order.
//
// Positions carry their timeline. After a failover the new primary writes a new
// timeline, so a batch claimed on the old primary is never covered by what the new
// primary's standbys report: it waits until the relay drops it (its claim session is
// gone) and claims again on the new primary, where the rows that survived are.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "idem/relay.hpp"
#include "idem/store.hpp"
#include "outbox/claim_reader.hpp"
#include "stores/replication.hpp"

namespace idem::detail {

/// Which standbys count, and how many of them must hold a commit (ANY k).
struct StandbyQuorum {
  /// application_names (relay.standbys); empty: the standbys PostgreSQL makes synchronous
  /// (sync_state sync or quorum, by its synchronous_standby_names)
  std::vector<std::string> names;
  std::size_t count = 1;
};

/// One standby the gate counts, by its application_name.
struct CountedStandby {
  std::string name;
  /// The least position any of its walsenders reports; nullopt while one of them reports
  /// none.
  std::optional<std::uint64_t> flush_lsn;
};

/// The standbys of `view` that count for `quorum`, each application_name once, in name
/// order: those quorum.names declares; with no names, those whose sync_state is sync or
/// quorum (a WAL archiver or backup streaming WAL, asynchronous, never counts). Several
/// walsenders under one name (a standby reconnecting while its old walsender lingers,
/// two processes giving the same name) count as one standby that holds the least any of
/// them flushed: the gate cannot tell which of them a failover would promote.
[[nodiscard]] std::vector<CountedStandby> counted_standbys(const ReplicationView& view,
                                                           const StandbyQuorum& quorum);

/// The position up to which `quorum.count` of the counted standbys of `view` have flushed
/// (the count-th highest flush among them), on the view's timeline; nullopt while fewer
/// than that many report a flush position.
[[nodiscard]] std::optional<WalPosition> quorum_position(const ReplicationView& view,
                                                         const StandbyQuorum& quorum);

/// The relay's start line with publish_after = replicated: how many of which standbys a
/// batch waits for, which walsenders count now and which do not, and why.
[[nodiscard]] std::string describe_counting(const ReplicationView& view,
                                            const StandbyQuorum& quorum);

/// The start-up warning for a relay publishing `mode` on a primary whose standbys are
/// `view`: what a failover can then take back after its events were published. nullopt
/// when nothing (no standby, or the settings cover every standby that can be promoted).
[[nodiscard]] std::optional<std::string> failover_warning(const ReplicationView& view,
                                                          PublishAfter mode,
                                                          const StandbyQuorum& quorum);

/// "16/B374D848", as PostgreSQL writes an LSN.
[[nodiscard]] std::string format_lsn(std::uint64_t lsn);

class ReplicationGate {
 public:
  using Clock = std::chrono::steady_clock;

  /// Opens the gate's connection and checks that it can read the standbys' positions.
  /// \throws Error(InvalidArgument, Config) on a SQLite store (no standbys), when the
  ///   role may not read pg_stat_replication's LSN columns (it needs pg_monitor), or when
  ///   no standby could ever count (no relay.standbys, and the primary's
  ///   synchronous_standby_names is empty); Error(Connection) as open_store() does.
  ReplicationGate(std::string url, StoreOptions options, StandbyQuorum quorum);
  /// Stops and joins the watch thread.
  ~ReplicationGate();
  ReplicationGate(const ReplicationGate&) = delete;
  ReplicationGate& operator=(const ReplicationGate&) = delete;

  // The relay thread's side.

  /// Holds `batch` (claimed with its WAL position) until the standbys flushed past it.
  void hold(ClaimedBatch batch);
  /// The oldest held batch, when the standbys hold its commits now; nullopt otherwise
  /// (later batches wait behind it: claim order is publication order).
  [[nodiscard]] std::optional<ClaimedBatch> release();
  /// Drops every held batch (nothing of them was produced; they are claimed again).
  void drop() noexcept;
  [[nodiscard]] std::size_t held() const noexcept { return held_.size(); }
  /// True when the oldest held batch was claimed on an earlier timeline than the one the
  /// primary writes now (a promotion since): it can never be covered.
  [[nodiscard]] bool outdated() const;
  /// The line for the log at start: describe_counting() of the standbys then.
  [[nodiscard]] const std::string& counting() const noexcept { return counting_; }
  /// Waits up to `timeout` for the standbys to flush past the oldest held batch.
  void wait(std::chrono::milliseconds timeout);
  /// Adds the wait figures to `progress` (RelayProgress::replication_*).
  void report(RelayProgress& progress, Clock::time_point now) const;
  /// A line for the log when the oldest held batch has waited long, at most once per
  /// such interval: what waits, and what the standbys have flushed (or why they could
  /// not be read).
  [[nodiscard]] std::optional<std::string> stalled(Clock::time_point now);

 private:
  struct Held {
    ClaimedBatch batch;
    Clock::time_point since;
  };

  void watch() noexcept;
  /// True when the oldest held batch is not covered yet. Under mutex_.
  [[nodiscard]] bool uncovered() const;
  void retarget();

  const std::string url_;
  const StoreOptions options_;
  const StandbyQuorum quorum_;
  std::unique_ptr<Store> store_;  // the watch thread's (after the constructor's checks)
  std::string counting_;

  std::deque<Held> held_;  // relay thread only
  std::uint64_t waits_ = 0;
  Clock::duration wait_total_{};
  Clock::time_point stall_logged_{};

  mutable std::mutex mutex_;
  std::condition_variable wake_;          // watch thread: a new target, or quit
  std::condition_variable moved_;         // relay thread: a new confirmed position
  std::optional<WalPosition> target_;     // guarded: the oldest held batch's position
  std::optional<WalPosition> confirmed_;  // guarded: the quorum's flush, last read
  ReplicationView last_view_;             // guarded: for stalled()
  std::string last_error_;                // guarded: the last read's failure, if any
  bool quit_ = false;                     // guarded
  std::thread thread_;                    // last: starts once everything above exists
};

}  // namespace idem::detail
