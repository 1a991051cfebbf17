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
#include <functional>
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

// The stop watchdog that bounds a stop is idem::StopWatchdog (idem/service/stop_watchdog.hpp).

}  // namespace idem::cli
