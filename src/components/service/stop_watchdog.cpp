// The last resort of a bounded stop (idem/service/stop_watchdog.hpp).
#include "idem/service/stop_watchdog.hpp"

#include <unistd.h>

#include <cstdlib>
#include <utility>

namespace idem {

StopWatchdog::StopWatchdog(std::chrono::milliseconds limit, std::string message)
    : limit_(limit), message_(std::move(message)), thread_([this] {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return armed_ || done_; });
        if (done_) return;
        const auto deadline = std::chrono::steady_clock::now() + limit_;
        if (changed_.wait_until(lock, deadline, [&] { return done_; })) return;
        // Straight to stderr (unbuffered, no lock a blocked thread might hold) and out:
        // the threads still blocked cannot be joined, and exit() would run destructors
        // that wait for them.
        const std::string line = message_ + "\n";
        static_cast<void>(::write(STDERR_FILENO, line.data(), line.size()));
        std::_Exit(1);
      }) {}

StopWatchdog::~StopWatchdog() {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void StopWatchdog::arm() {
  {
    std::lock_guard lock(mutex_);
    armed_ = true;
  }
  changed_.notify_all();
}

}  // namespace idem
