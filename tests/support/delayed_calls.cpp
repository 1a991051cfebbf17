#include "support/delayed_calls.hpp"

#include <utility>

namespace idem::test {

DelayedCalls::DelayedCalls() : thread_([this] { run(); }) {}

DelayedCalls::~DelayedCalls() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DelayedCalls::after(std::chrono::milliseconds latency, std::function<void()> fn) {
  {
    std::lock_guard lock(mutex_);
    due_.emplace(std::chrono::steady_clock::now() + latency, std::move(fn));
  }
  cv_.notify_all();
}

void DelayedCalls::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    if (due_.empty()) {
      if (stopping_) return;
      cv_.wait(lock);
      continue;
    }
    const auto at = due_.begin()->first;
    if (!stopping_ && std::chrono::steady_clock::now() < at) {
      cv_.wait_until(lock, at);
      continue;
    }
    std::function<void()> fn = std::move(due_.begin()->second);
    due_.erase(due_.begin());
    lock.unlock();
    fn();
    lock.lock();
  }
}

}  // namespace idem::test
