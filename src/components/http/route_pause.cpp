#include "idem/http/route_pause.hpp"

#include <fmt/format.h>

namespace idem::http {

RoutePause::Start RoutePause::at_start() const noexcept {
  return {successes_.load(std::memory_order_acquire), paused_.load(std::memory_order_acquire)};
}

void RoutePause::succeeded() {
  successes_.fetch_add(1, std::memory_order_acq_rel);
  resume("a call succeeded");
}

RoutePause::Refusal RoutePause::refused(Start start, const std::string& why) {
  if (successes_.load(std::memory_order_acquire) == start.successes) {
    pause(why);
    return Refusal::Paused;
  }
  // Others succeeded since it started. If the route was paused then, the endpoint came
  // back while it ran, and its answer may be from before: tried again (and if others still
  // succeed then, that attempt's answer is its own).
  return start.paused ? Refusal::AfterRecovery : Refusal::RequestsOwn;
}

std::optional<std::string> RoutePause::retry_after_refusal(Start start, const std::string& why,
                                                           std::string_view who) {
  switch (refused(start, why)) {
    case Refusal::Paused: return fmt::format("{} paused: {}", who, why);
    case Refusal::AfterRecovery:
      return fmt::format("{} resumed while this call was answered: {}", who, why);
    case Refusal::RequestsOwn: break;
  }
  return std::nullopt;
}

void RoutePause::pause(const std::string& why) {
  std::lock_guard lock(mutex_);
  const bool was_paused = !reason_.empty();
  reason_ = why.empty() ? std::string("paused") : why;
  paused_.store(true, std::memory_order_release);
  if (!was_paused && observer_) observer_(true, reason_);
}

void RoutePause::resume(std::string_view why) {
  // Every successful call comes here: the flag spares them the lock while nothing is paused.
  if (!paused_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(mutex_);
  if (reason_.empty()) return;
  reason_.clear();
  paused_.store(false, std::memory_order_release);
  if (observer_) observer_(false, why);
}

std::string RoutePause::paused_reason() const {
  std::lock_guard lock(mutex_);
  return reason_;
}

}  // namespace idem::http
