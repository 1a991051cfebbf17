#pragma once
/// \file
/// The last resort of a bounded stop, for every long-running part that a process stops
/// on request (`idem consume`, `idem relay`, a consumer run from another language).

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace idem {

/// Once armed (by the stop request), it ends the process with exit status 1 and `message`
/// on stderr unless it is destroyed within `limit`. The libraries bound their own waits for
/// the broker and the database; what they cannot bound is a thread inside a call to a
/// database server that stopped answering (a libpq call on a connection whose server is
/// frozen or cut off returns only when TCP gives up, after many minutes). Declare it before
/// the objects whose destruction it must cover (they are destroyed before it).
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

}  // namespace idem
