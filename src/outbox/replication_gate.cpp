#include "outbox/replication_gate.hpp"

#include <algorithm>
#include <functional>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "idem/config.hpp"
#include "idem/error.hpp"

namespace idem::detail {

namespace {

using std::chrono::milliseconds;

// How often the standbys are read while a batch waits. With a synchronous standby a
// batch's commits are usually there by the first read or the next (the claim's position
// also covers WAL other sessions were writing at that moment); the reads stop as soon as
// nothing waits. After a failed read (the primary is gone, say), the pause is longer.
constexpr milliseconds kPollInterval{1};
constexpr milliseconds kRetryInterval{200};
// The primary's flush standing still this long below a waiting batch's position means
// no commit is about to flush it (group commits under load come within a few
// milliseconds); then the gate commits to flush it, instead of waiting up to
// wal_writer_delay (200 ms by default) for the WAL writer.
constexpr milliseconds kFlushStandingStill{10};
// A batch waiting this long is logged, and again after as long.
constexpr milliseconds kStallReport{10'000};

bool is_synchronous(const StandbyReplication& standby) {
  return standby.sync_state == "sync" || standby.sync_state == "quorum";
}

bool declared(const StandbyQuorum& quorum, const std::string& name) {
  return std::find(quorum.names.begin(), quorum.names.end(), name) != quorum.names.end();
}

// The application_names that count: those declared; with none declared, those of which
// PostgreSQL makes a walsender synchronous (its synchronous_standby_names names them).
std::set<std::string> counted_names(const ReplicationView& view, const StandbyQuorum& quorum) {
  std::set<std::string> names;
  for (const StandbyReplication& s : view.standbys) {
    if (quorum.names.empty() ? is_synchronous(s) : declared(quorum, s.name)) names.insert(s.name);
  }
  return names;
}

std::string describe_quorum(const StandbyQuorum& quorum) {
  return quorum.names.empty()
             ? fmt::format("any {} of the standbys the primary makes synchronous", quorum.count)
             : fmt::format("any {} of {}", quorum.count, fmt::join(quorum.names, ","));
}

std::string describe_standbys(const ReplicationView& view) {
  if (view.standbys.empty()) return "no standby is connected to the primary";
  std::vector<std::string> parts;
  for (const StandbyReplication& s : view.standbys) {
    parts.push_back(fmt::format("{} flushed to {} ({})", s.name.empty() ? "(hidden)" : s.name,
                                s.flush_lsn ? format_lsn(*s.flush_lsn) : "-",
                                s.sync_state.empty() ? "hidden" : s.sync_state));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

std::string format_lsn(std::uint64_t lsn) {
  return fmt::format("{:X}/{:X}", lsn >> 32, lsn & 0xffffffffU);
}

std::vector<CountedStandby> counted_standbys(const ReplicationView& view,
                                             const StandbyQuorum& quorum) {
  const std::set<std::string> names = counted_names(view, quorum);
  std::vector<CountedStandby> counted;
  for (const std::string& name : names) {
    CountedStandby standby{name, std::nullopt};
    bool first = true;
    for (const StandbyReplication& s : view.standbys) {
      if (s.name != name) continue;
      if (first) {
        standby.flush_lsn = s.flush_lsn;
      } else if (!standby.flush_lsn || !s.flush_lsn) {
        standby.flush_lsn.reset();  // one of them has reported nothing yet
      } else {
        standby.flush_lsn = std::min(*standby.flush_lsn, *s.flush_lsn);
      }
      first = false;
    }
    counted.push_back(std::move(standby));
  }
  return counted;
}

std::optional<WalPosition> quorum_position(const ReplicationView& view,
                                           const StandbyQuorum& quorum) {
  std::vector<std::uint64_t> flushed;
  for (const CountedStandby& s : counted_standbys(view, quorum)) {
    if (s.flush_lsn) flushed.push_back(*s.flush_lsn);
  }
  if (quorum.count == 0 || flushed.size() < quorum.count) return std::nullopt;
  std::sort(flushed.begin(), flushed.end(), std::greater<>());
  return WalPosition{view.timeline, flushed[quorum.count - 1]};
}

std::optional<std::string> failover_warning(const ReplicationView& view, PublishAfter mode,
                                            const StandbyQuorum& quorum) {
  if (view.standbys.empty()) return std::nullopt;
  const auto hidden = static_cast<std::size_t>(
      std::count_if(view.standbys.begin(), view.standbys.end(),
                    [](const StandbyReplication& s) { return s.sync_state.empty(); }));
  if (mode == PublishAfter::Committed) {
    if (hidden > 0) {
      return fmt::format(
          "the store has {} standby(s) whose replication mode this role may not see (grant it "
          "pg_monitor): a failover to an asynchronous one can take back outbox rows, and the "
          "orders that wrote them, whose events this relay already published; "
          "relay.publish_after = replicated prevents that (docs/failover.md)",
          hidden);
    }
    std::vector<std::string> asynchronous;
    for (const StandbyReplication& s : view.standbys) {
      if (!is_synchronous(s)) asynchronous.push_back(s.name);
    }
    if (!asynchronous.empty()) {
      return fmt::format(
          "the store has asynchronous standbys ({}): a failover to one of them can take back "
          "outbox rows, and the orders that wrote them, whose events this relay already "
          "published; set relay.publish_after = replicated (docs/failover.md)",
          fmt::join(asynchronous, ", "));
    }
    if (view.synchronous_commit == "off" || view.synchronous_commit == "local") {
      return fmt::format(
          "the store's standbys are synchronous, but synchronous_commit is '{}' by default: "
          "such commits do not wait for them, and a failover can take back outbox rows whose "
          "events this relay already published; set relay.publish_after = replicated "
          "(docs/failover.md)",
          view.synchronous_commit);
    }
    return std::nullopt;
  }
  const std::set<std::string> counted = counted_names(view, quorum);
  const std::size_t inside = counted.size();
  std::set<std::string> outside;
  for (const StandbyReplication& s : view.standbys) {
    if (!counted.contains(s.name)) outside.insert(s.name);
  }
  if (!outside.empty() && !quorum.names.empty()) {
    return fmt::format(
        "standbys {} are not among relay.standbys ({}): a failover to one of them can take "
        "back outbox rows whose events this relay already published; name every standby your "
        "failover may promote (docs/failover.md)",
        fmt::join(outside, ", "), fmt::join(quorum.names, ","));
  }
  if (!outside.empty()) {
    return fmt::format(
        "walsenders {} are not synchronous, and only the standbys the primary makes "
        "synchronous count while relay.standbys is empty: a failover to one of them can take "
        "back outbox rows whose events this relay already published; name every standby your "
        "failover may promote in relay.standbys (docs/failover.md)",
        fmt::join(outside, ", "));
  }
  if (quorum.count < inside) {
    return fmt::format(
        "relay.standby_quorum is {} of the {} standbys that count: a failover to one that had "
        "not flushed a published batch yet can take it back; set relay.standby_quorum = {}, or "
        "make sure your failover promotes the most advanced standby (docs/failover.md)",
        quorum.count, inside, inside);
  }
  return std::nullopt;
}

std::string describe_counting(const ReplicationView& view, const StandbyQuorum& quorum) {
  std::vector<std::string> counting;
  for (const CountedStandby& s : counted_standbys(view, quorum)) {
    const auto walsenders =
        std::count_if(view.standbys.begin(), view.standbys.end(),
                      [&](const StandbyReplication& r) { return r.name == s.name; });
    counting.push_back(fmt::format(
        "{} ({}flushed to {})", s.name.empty() ? "(no name)" : s.name,
        walsenders > 1 ? fmt::format("{} walsenders under this name, the least ", walsenders) : "",
        s.flush_lsn ? format_lsn(*s.flush_lsn) : "-"));
  }
  const std::set<std::string> counted = counted_names(view, quorum);
  for (const std::string& name : quorum.names) {
    if (!counted.contains(name)) counting.push_back(name + " (not connected)");
  }
  std::vector<std::string> left_out;
  std::set<std::string> named;
  for (const StandbyReplication& s : view.standbys) {
    if (counted.contains(s.name) || !named.insert(s.name).second) continue;
    left_out.push_back(fmt::format("{} ({})", s.name.empty() ? "(no name)" : s.name,
                                   quorum.names.empty() ? s.sync_state + ", not synchronous"
                                                        : std::string("not in relay.standbys")));
  }
  return fmt::format(
      "idem relay: publish_after = replicated: a batch waits until {} flushed its "
      "commits{}; counting now: {}; not counting: {}",
      describe_quorum(quorum),
      quorum.names.empty()
          ? fmt::format(" (synchronous_standby_names = '{}')", view.synchronous_standby_names)
          : "",
      counting.empty() ? "none" : fmt::format("{}", fmt::join(counting, ", ")),
      left_out.empty() ? "none" : fmt::format("{}", fmt::join(left_out, ", ")));
}

ReplicationGate::ReplicationGate(std::string url, StoreOptions options, StandbyQuorum quorum)
    : url_(std::move(url)), options_(std::move(options)), quorum_(std::move(quorum)) {
  store_ = open_store(url_, options_);
  if (store_->backend() != Backend::Postgres) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "idem relay: relay.publish_after = replicated needs a PostgreSQL store: a "
                "SQLite store has no standbys to wait for");
  }
  if (!can_read_replication(*store_)) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "idem relay: relay.publish_after = replicated reads how far each standby has "
                "flushed (pg_stat_replication), which PostgreSQL shows only to superusers and "
                "members of pg_monitor; run `GRANT pg_monitor TO <the role of store.url>`");
  }
  const ReplicationView view = read_replication(*store_);
  // Without declared standbys only those PostgreSQL makes synchronous count: every
  // walsender reporting a flush would include a WAL archiver or a backup streaming WAL,
  // which no failover promotes. With none made synchronous, nothing would ever count.
  if (quorum_.names.empty() &&
      view.synchronous_standby_names.find_first_not_of(" \t") == std::string::npos) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "idem relay: relay.publish_after = replicated without relay.standbys counts the "
                "standbys the primary makes synchronous, and its synchronous_standby_names is "
                "empty: nothing would ever be published; name the standbys your failover may "
                "promote in relay.standbys (by application_name), or make them synchronous "
                "(docs/failover.md)");
  }
  counting_ = describe_counting(view, quorum_);
  thread_ = std::thread([this] { watch(); });
}

ReplicationGate::~ReplicationGate() {
  {
    std::lock_guard lock(mutex_);
    quit_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

bool ReplicationGate::uncovered() const {
  return target_ && !(confirmed_ && confirmed_->covers(*target_));
}

void ReplicationGate::retarget() {
  {
    std::lock_guard lock(mutex_);
    target_ = held_.empty() ? std::nullopt : std::optional(held_.front().batch.wal);
  }
  wake_.notify_one();
}

void ReplicationGate::hold(ClaimedBatch batch) {
  const bool first = held_.empty();
  held_.push_back({std::move(batch), Clock::now()});
  if (first) retarget();  // later batches' positions are at or past the first's
}

std::optional<ClaimedBatch> ReplicationGate::release() {
  if (held_.empty()) return std::nullopt;
  {
    std::lock_guard lock(mutex_);
    if (!confirmed_ || !confirmed_->covers(held_.front().batch.wal)) return std::nullopt;
  }
  Held front = std::move(held_.front());
  held_.pop_front();
  ++waits_;
  wait_total_ += Clock::now() - front.since;
  retarget();
  return std::move(front.batch);
}

bool ReplicationGate::outdated() const {
  if (held_.empty()) return false;
  std::lock_guard lock(mutex_);
  return last_view_.timeline > held_.front().batch.wal.timeline;
}

void ReplicationGate::drop() noexcept {
  held_.clear();
  std::lock_guard lock(mutex_);
  target_.reset();
}

void ReplicationGate::wait(milliseconds timeout) {
  std::unique_lock lock(mutex_);
  moved_.wait_for(lock, timeout, [&] { return !uncovered(); });
}

void ReplicationGate::report(RelayProgress& progress, Clock::time_point now) const {
  progress.replication_waits = waits_;
  progress.replication_wait_total = std::chrono::duration_cast<milliseconds>(wait_total_);
  progress.replication_waiting =
      held_.empty() ? milliseconds(0)
                    : std::chrono::duration_cast<milliseconds>(now - held_.front().since);
}

std::optional<std::string> ReplicationGate::stalled(Clock::time_point now) {
  if (held_.empty() || now - held_.front().since < kStallReport ||
      now - stall_logged_ < kStallReport) {
    return std::nullopt;
  }
  stall_logged_ = now;
  std::size_t rows = 0;
  for (const Held& h : held_) rows += h.batch.ids.size();
  std::lock_guard lock(mutex_);
  return fmt::format(
      "idem relay: {} rows in {} batch(es) have waited {} for their commits on the standbys "
      "(relay.publish_after = replicated, {}; the oldest batch needs {} on timeline {}): {}{}",
      rows, held_.size(),
      format_duration(std::chrono::duration_cast<milliseconds>(now - held_.front().since)),
      describe_quorum(quorum_), format_lsn(held_.front().batch.wal.lsn),
      held_.front().batch.wal.timeline, describe_standbys(last_view_),
      last_error_.empty() ? "" : "; reading them failed: " + last_error_);
}

void ReplicationGate::watch() noexcept {
  std::unique_lock lock(mutex_);
  // The primary's flush position as last read, and when it was first read there.
  std::uint64_t primary_flushed = 0;
  Clock::time_point primary_flushed_since = Clock::now();
  while (true) {
    wake_.wait(lock, [&] { return quit_ || uncovered(); });
    if (quit_) return;
    const WalPosition target = *target_;
    lock.unlock();
    std::optional<ReplicationView> view;
    std::string error;
    try {
      // A failed read replaces the connection: it may be to a primary that was demoted
      // (whose session lives on) rather than one that is gone.
      if (!store_) store_ = open_store(url_, options_);
      view = read_replication(*store_);
      // The claim's position may lie in WAL nobody has committed after (the claim's own
      // page pruning, say). When the primary's flush stands still below it, no commit is
      // coming to flush it, and the standbys cannot have it before the WAL writer's next
      // round: flush it now, and a next read finds it on the standbys. While commits
      // flow, the flush moves on its own and nothing is added to them.
      const auto now = Clock::now();
      if (view->primary_flush_lsn != primary_flushed) {
        primary_flushed = view->primary_flush_lsn;
        primary_flushed_since = now;
      } else if (view->timeline == target.timeline && primary_flushed < target.lsn &&
                 now - primary_flushed_since >= kFlushStandingStill) {
        flush_primary_wal(*store_);
        primary_flushed_since = now;  // once per standstill
      }
    } catch (const std::exception& e) {
      error = e.what();
      store_.reset();
    } catch (...) {
      error = "unknown error";
      store_.reset();
    }
    lock.lock();
    if (view) {
      confirmed_ = quorum_position(*view, quorum_);
      last_view_ = std::move(*view);
      last_error_.clear();
      moved_.notify_all();
    } else {
      last_error_ = std::move(error);
    }
    wake_.wait_for(lock, view ? kPollInterval : kRetryInterval, [&] { return quit_; });
  }
}

}  // namespace idem::detail
