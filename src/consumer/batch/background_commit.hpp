#pragma once
// One database COMMIT at a time on a thread of its own. A COMMIT mostly waits for the
// WAL flush; the run() thread hands it here and goes on (polling, preparing the next
// batch, starting calls) instead of waiting with it. Used by BatchPipeline (depth 2) and
// by the effect path's apply transactions.
#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace idem::detail {

class BackgroundCommit {
 public:
  /// `wake` is called on the commit thread after each job returned (it wakes the poll).
  explicit BackgroundCommit(std::function<void()> wake);
  /// Waits for the job in flight, if any, then joins the thread.
  ~BackgroundCommit();
  BackgroundCommit(const BackgroundCommit&) = delete;
  BackgroundCommit& operator=(const BackgroundCommit&) = delete;

  /// Runs `job` on the commit thread. Only when nothing is in flight (wait() first).
  void start(std::function<void()> job);
  /// Waits until the job in flight (if any) returned; rethrows what it threw.
  void wait();
  /// The same, dropping what it threw: for leaving on an error.
  void wait_quietly() noexcept;
  /// Set once the job in flight has returned, until wait(); the poll stops waiting then.
  [[nodiscard]] const std::atomic<bool>& done() const noexcept { return done_; }

 private:
  void main();

  std::function<void()> wake_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::function<void()> job_;  // handed over, not yet returned
  std::exception_ptr error_;
  bool quit_ = false;
  std::atomic<bool> done_{false};
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace idem::detail
