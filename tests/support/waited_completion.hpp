#pragma once
// Where one effect call completes (the consumer's CompletionPort), waited on: for tests that
// drive a call phase (a configured route's, billing's) without a consumer.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "idem/consumer.hpp"

namespace idem::test {

/// Where one call completes (the consumer's CompletionPort), waited on.
class WaitedCompletion final : public idem::detail::CompletionPort {
 public:
  void complete(std::uint64_t /*ticket*/, Outcome outcome, std::shared_ptr<void> /*result*/,
                std::string reason) noexcept override {
    std::lock_guard lock(mutex_);
    outcome_ = outcome;
    reason_ = std::move(reason);
    done_ = true;
    completed_.notify_all();
  }
  /// The outcome, or nullopt when the call did not end within 30 s.
  std::optional<Outcome> wait() {
    std::unique_lock lock(mutex_);
    if (!completed_.wait_for(lock, std::chrono::seconds(30), [&] { return done_; }))
      return std::nullopt;
    return outcome_;
  }
  [[nodiscard]] std::string reason() {
    std::lock_guard lock(mutex_);
    return reason_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable completed_;
  bool done_ = false;
  Outcome outcome_ = Outcome::Retry;
  std::string reason_;
};

/// A CallCompletion that completes into `port`.
template <class Result>
CallCompletion<Result> completion_into(const std::shared_ptr<WaitedCompletion>& port) {
  return CallCompletion<Result>(std::make_shared<idem::detail::CallTicket>(
      port, std::uint64_t{0}, std::shared_ptr<const void>()));
}

}  // namespace idem::test
