#pragma once
// A stand-in for an asynchronous client in tests of Consumer::on_effect: runs each
// submitted completion on its own thread once a latency has passed, so call phases
// overlap the way HTTP calls through an event loop do. The wait is the simulated
// latency of the call, not a synchronisation.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace idem::test {

class DelayedCalls {
 public:
  DelayedCalls();
  /// Runs what is left at once, then joins the thread.
  ~DelayedCalls();
  DelayedCalls(const DelayedCalls&) = delete;
  DelayedCalls& operator=(const DelayedCalls&) = delete;

  /// Runs `fn` on the completion thread after `latency`. Thread-safe.
  void after(std::chrono::milliseconds latency, std::function<void()> fn);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::multimap<std::chrono::steady_clock::time_point, std::function<void()>> due_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace idem::test
