#include "idem/service/paused_endpoints.hpp"

#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace idem {

PausedEndpoints::PausedEndpoints(std::string route, Metrics* metrics, std::string group,
                                 std::function<void(std::string_view)> log)
    : route_(std::move(route)), metrics_(metrics), group_(std::move(group)), log_(std::move(log)) {
  if (metrics_ != nullptr) metrics_->set_route_paused(group_, route_, false);
}

std::function<void(std::string_view, bool, std::string_view)> PausedEndpoints::observer() {
  return [this](std::string_view endpoint, bool open, std::string_view why) {
    changed(endpoint, open, why);
  };
}

void PausedEndpoints::changed(std::string_view endpoint, bool open, std::string_view why) {
  bool paused = false;
  {
    std::lock_guard lock(mutex_);
    if (open) {
      down_.insert_or_assign(std::string(endpoint), std::string(why));
    } else {
      down_.erase(std::string(endpoint));
    }
    paused = !down_.empty();
  }
  if (log_) {
    log_(open ? fmt::format("route {} paused: endpoint {} is down ({}); its calls wait for it, "
                            "one probe at a time, and its records wait in Kafka",
                            route_, endpoint, why)
              : fmt::format("route {}: endpoint {} is back ({}); its calls go on", route_, endpoint,
                            why));
  }
  if (metrics_ != nullptr) metrics_->set_route_paused(group_, route_, paused);
}

ReadinessCheck PausedEndpoints::readiness() const {
  return {route_, [this]() -> std::optional<std::string> {
            std::lock_guard lock(mutex_);
            if (down_.empty()) return std::nullopt;
            std::vector<std::string> parts;
            for (const auto& [endpoint, why] : down_)
              parts.push_back(fmt::format("endpoint {} is down: {}", endpoint, why));
            return fmt::format("paused: {}", fmt::join(parts, "; "));
          }};
}

}  // namespace idem
