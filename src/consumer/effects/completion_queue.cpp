#include "consumer/effects/completion_queue.hpp"

namespace idem::detail {

void CompletionQueue::complete(std::uint64_t ticket, Outcome outcome, std::shared_ptr<void> result,
                               std::string reason) noexcept {
  std::lock_guard lock(mutex_);
  if (closed_) return;
  try {
    done_.push_back({ticket, outcome, std::move(result), std::move(reason)});
  } catch (...) {
    // Out of memory: the completion is lost and its key waits for the drain timeout or a
    // restart; nothing is committed for it, so the event is delivered again.
    return;
  }
  pending_.store(true);
  if (wake_) wake_();
}

std::vector<CallDone> CompletionQueue::drain() {
  std::vector<CallDone> out;
  std::lock_guard lock(mutex_);
  out.swap(done_);
  pending_.store(false);
  return out;
}

void CompletionQueue::poke() noexcept {
  std::lock_guard lock(mutex_);
  if (closed_) return;
  pending_.store(true);
  if (wake_) wake_();
}

void CompletionQueue::set_wake(std::function<void()> wake) {
  std::lock_guard lock(mutex_);
  wake_ = std::move(wake);
}

void CompletionQueue::close() noexcept {
  std::lock_guard lock(mutex_);
  closed_ = true;
  wake_ = nullptr;
  done_.clear();
}

}  // namespace idem::detail
