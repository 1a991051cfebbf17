#pragma once
/// \file
/// How a consumer reports a compiled effect route's pause, as a configured route reports
/// its own: one log line when it pauses or resumes, the gauge
/// `idem_route_paused{group, route}` and a /readyz check saying why. A route pauses for
/// either of two causes: an endpoint it calls is down (its circuit breaker is open,
/// idem/http/circuit_breaker.hpp), or every call of it is refused alike (401, 403, 404:
/// idem/http/route_pause.hpp).
///
///   auto& pauses = service.own(std::make_unique<RoutePauses>(
///       "billing", service.metrics(), config.group_id, service.logger().lines("billing")));
///   billing.client.on_breaker = pauses.breaker_observer();
///   billing.on_pause = pauses.refusal_observer();
///   service.add_readiness(pauses.readiness());

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "idem/metrics/metrics.hpp"

namespace idem {

class RoutePauses {
 public:
  /// `metrics` may be null (no admin.listen); `log` may be empty.
  RoutePauses(std::string route, Metrics* metrics, std::string group,
              std::function<void(std::string_view)> log);

  /// What http::ClientConfig::on_breaker is set to. The observers refer to this object,
  /// which must outlive the client (ConsumerService::own keeps it until after the consumer).
  [[nodiscard]] std::function<void(std::string_view endpoint, bool open, std::string_view why)>
  breaker_observer();
  /// What an http::RoutePause's observer is set to (BillingConfig::on_pause).
  [[nodiscard]] std::function<void(bool paused, std::string_view why)> refusal_observer();
  /// Not ready while the route is paused: `paused: endpoint E is down: why`.
  [[nodiscard]] ReadinessCheck readiness() const;

 private:
  /// `cause` ("endpoint E is down", "every call is refused") began (`paused`) or ended.
  void changed(const std::string& cause, bool paused, std::string_view why,
               std::string_view meanwhile);

  const std::string route_;
  Metrics* const metrics_;
  const std::string group_;
  const std::function<void(std::string_view)> log_;
  mutable std::mutex mutex_;
  std::map<std::string, std::string, std::less<>> causes_;  // cause -> why; guarded by mutex_
};

}  // namespace idem
