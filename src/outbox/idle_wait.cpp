#include "outbox/idle_wait.hpp"

#include <algorithm>
#include <exception>
#include <thread>

#include <fmt/format.h>

namespace idem::detail {

using std::chrono::milliseconds;

IdleWait::IdleWait(const OutboxQueries& queries, std::string url, StoreOptions options, bool listen,
                   std::function<void(std::string_view)> log)
    : queries_(queries),
      url_(std::move(url)),
      options_(std::move(options)),
      listen_(listen),
      log_(std::move(log)) {
  if (listen_) open();
}

void IdleWait::open() noexcept {
  try {
    listener_ = queries_.listen(url_, options_);
  } catch (const std::exception& e) {
    log(fmt::format("idem relay: LISTEN unavailable, polling only: {}", e.what()));
    listener_.reset();
  }
}

void IdleWait::reopen_if_lost() noexcept {
  if (listen_ && !listener_) open();
}

void IdleWait::reopen() noexcept {
  listener_.reset();
  if (listen_) open();
}

void IdleWait::wait(milliseconds timeout, const std::atomic<bool>& stop) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!stop.load(std::memory_order_relaxed)) {
    const auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    const auto slice = std::min(left, milliseconds(100));
    if (!listener_) {
      std::this_thread::sleep_for(slice);  // polling interval, not synchronisation
      continue;
    }
    switch (listener_->wait(slice)) {
      case OutboxListener::Wake::Notified: return;
      case OutboxListener::Wake::TimedOut: break;
      case OutboxListener::Wake::Lost:
        log("idem relay: LISTEN connection lost; polling until it is reopened");
        listener_.reset();
        return;
    }
  }
}

}  // namespace idem::detail
