#pragma once
/// \file
/// How a consumer reports the circuit breakers of an effect route's calls
/// (idem/http/circuit_breaker.hpp) as a paused route, the way a configured route reports
/// its pause: one log line when an endpoint's breaker opens or closes, the gauge
/// `idem_route_paused{group, route}` and a /readyz check naming the endpoints that are down.
///
///   auto& pauses = service.own(std::make_unique<PausedEndpoints>(
///       "billing", service.metrics(), config.group_id, service.logger().lines("billing")));
///   client_config.on_breaker = pauses.observer();
///   service.add_readiness(pauses.readiness());

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "idem/metrics/metrics.hpp"

namespace idem {

class PausedEndpoints {
 public:
  /// `metrics` may be null (no admin.listen); `log` may be empty.
  PausedEndpoints(std::string route, Metrics* metrics, std::string group,
                  std::function<void(std::string_view)> log);

  /// What ClientConfig::on_breaker is set to. It refers to this object, which must outlive
  /// the client (ConsumerService::own keeps it until after the consumer).
  [[nodiscard]] std::function<void(std::string_view endpoint, bool open, std::string_view why)>
  observer();
  /// Not ready while an endpoint's breaker is open: `paused: endpoint E is down: why`.
  [[nodiscard]] ReadinessCheck readiness() const;

 private:
  void changed(std::string_view endpoint, bool open, std::string_view why);

  const std::string route_;
  Metrics* const metrics_;
  const std::string group_;
  const std::function<void(std::string_view)> log_;
  mutable std::mutex mutex_;
  std::map<std::string, std::string, std::less<>> down_;  // endpoint -> why; guarded by mutex_
};

}  // namespace idem
