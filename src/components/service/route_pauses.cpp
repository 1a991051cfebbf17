#include "idem/service/route_pauses.hpp"

#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace idem {

RoutePauses::RoutePauses(std::string route, Metrics* metrics, std::string group,
                         std::function<void(std::string_view)> log)
    : route_(std::move(route)), metrics_(metrics), group_(std::move(group)), log_(std::move(log)) {
  if (metrics_ != nullptr) metrics_->set_route_paused(group_, route_, false);
}

std::function<void(std::string_view, bool, std::string_view)> RoutePauses::breaker_observer() {
  return [this](std::string_view endpoint, bool open, std::string_view why) {
    changed(fmt::format("endpoint {} is down", endpoint), open, why,
            "its calls wait for it, one probe at a time, and its records wait in Kafka");
  };
}

std::function<void(bool, std::string_view)> RoutePauses::refusal_observer() {
  return [this](bool paused, std::string_view why) {
    changed("every call is refused", paused, why,
            "its calls wait and retry until one succeeds, and its records wait in Kafka");
  };
}

void RoutePauses::changed(const std::string& cause, bool paused, std::string_view why,
                          std::string_view meanwhile) {
  bool still_paused = false;
  {
    std::lock_guard lock(mutex_);
    if (paused) {
      causes_.insert_or_assign(cause, std::string(why));
    } else {
      causes_.erase(cause);
    }
    still_paused = !causes_.empty();
  }
  if (log_) {
    if (paused) {
      log_(fmt::format("route {} paused: {} ({}); {}", route_, cause, why, meanwhile));
    } else {
      log_(fmt::format("route {}: {} no longer ({}){}", route_, cause, why,
                       still_paused ? "; still paused" : "; resumed"));
    }
  }
  if (metrics_ != nullptr) metrics_->set_route_paused(group_, route_, still_paused);
}

ReadinessCheck RoutePauses::readiness() const {
  return {route_, [this]() -> std::optional<std::string> {
            std::lock_guard lock(mutex_);
            if (causes_.empty()) return std::nullopt;
            std::vector<std::string> parts;
            for (const auto& [cause, why] : causes_)
              parts.push_back(fmt::format("{}: {}", cause, why));
            return fmt::format("paused: {}", fmt::join(parts, "; "));
          }};
}

}  // namespace idem
