#pragma once
// The one way idem's long-running commands stop on SIGTERM/SIGINT (consume, relay,
// provider, dev-broker). Nothing runs in a signal handler: the signals are blocked and
// read from a signalfd, by the caller (wait, or fd in its own poll loop) or by a thread
// of OnStopSignal.
//
// Construct StopSignals first, before anything starts a thread (librdkafka, the HTTP
// server, the admin server, the maintenance task): threads inherit the signal mask, and
// one with the signals unblocked would take a SIGTERM with its default action, killing
// the process mid-batch. The mask is never restored, so a second signal during shutdown
// cannot kill the process half-way either.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace idem::cli {

class StopSignals {
 public:
  /// Blocks SIGTERM and SIGINT in the calling thread and ignores SIGPIPE (a reader or
  /// client that hangs up must not kill the process).
  /// \throws Error(Internal) when the mask or the signalfd cannot be set up.
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  /// Blocks until a stop signal arrives (no deadline: waiting is the command's job).
  void wait();
  /// Readable when a stop signal is pending, for a poll() loop; take() consumes it.
  [[nodiscard]] int fd() const noexcept { return signal_fd_; }
  /// Consumes one pending stop signal; false when none was pending. Never blocks.
  bool take();

 private:
  int signal_fd_ = -1;
};

/// Calls `stop` on a thread of its own for every stop signal (a second one too, so
/// `stop` must be idempotent), until destroyed. Declare it after the object `stop`
/// refers to, so it is destroyed first.
class OnStopSignal {
 public:
  /// \throws Error(Internal) when the thread's wake-up descriptor cannot be created.
  OnStopSignal(StopSignals& signals, std::function<void()> stop);
  /// Ends and joins the thread.
  ~OnStopSignal();
  OnStopSignal(const OnStopSignal&) = delete;
  OnStopSignal& operator=(const OnStopSignal&) = delete;

 private:
  int wake_fd_ = -1;  ///< eventfd: tells the thread to end
  std::thread thread_;
};

/// The last resort of a bounded stop. Once armed (by the stop signal), it ends the process
/// with exit status 1 and `message` on stderr unless it is destroyed within `limit`. The
/// libraries bound their own waits for the broker and the database; what they cannot
/// bound is a thread inside a call to a database server that stopped answering (a libpq
/// call on a connection whose server is frozen or cut off returns only when TCP gives
/// up, after many minutes). Declare it before the objects whose destruction it must
/// cover (they are destroyed before it).
class StopWatchdog {
 public:
  StopWatchdog(std::chrono::milliseconds limit, std::string message);
  /// Disarms and joins the thread.
  ~StopWatchdog();
  StopWatchdog(const StopWatchdog&) = delete;
  StopWatchdog& operator=(const StopWatchdog&) = delete;

  /// Starts the clock (the first call only). Thread-safe; never blocks for long.
  void arm();

 private:
  const std::chrono::milliseconds limit_;
  const std::string message_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool armed_ = false;  // guarded by mutex_
  bool done_ = false;   // guarded by mutex_
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace idem::cli
