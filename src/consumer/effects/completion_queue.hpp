#pragma once
// The hand-off of call completions from whatever thread a call phase completes on (an
// HTTP client's event loop, a test's thread pool) to the run() thread, which alone
// touches the Kafka handles and the Store. Shared ownership: a call may complete after
// its consumer is gone; a closed queue drops it.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "idem/consumer.hpp"

namespace idem::detail {

struct CallDone {
  std::uint64_t ticket = 0;
  Outcome outcome = Outcome::Retry;
  std::shared_ptr<void> result;
  std::string reason;
};

class CompletionQueue final : public CompletionPort {
 public:
  /// Thread-safe, never blocks for long (a push and a wake-up).
  void complete(std::uint64_t ticket, Outcome outcome, std::shared_ptr<void> result,
                std::string reason) noexcept override;

  /// Everything completed since the last drain, in completion order. run() thread.
  [[nodiscard]] std::vector<CallDone> drain();

  /// True while completions wait to be drained; the poll loop returns early when set.
  [[nodiscard]] const std::atomic<bool>& pending() const noexcept { return pending_; }

  /// Sets pending() and wakes the poll without a completion: other work for the run()
  /// thread is ready (an apply transaction's commit returned). Thread-safe.
  void poke() noexcept;

  /// Called (under the queue's lock) after each completion; must not block.
  void set_wake(std::function<void()> wake);

  /// Later completions are dropped, and the wake-up is cleared.
  void close() noexcept;

 private:
  std::mutex mutex_;
  std::vector<CallDone> done_;
  std::function<void()> wake_;
  bool closed_ = false;
  std::atomic<bool> pending_{false};
};

}  // namespace idem::detail
