#pragma once
/// \file
/// Whether a route (the calls one handler makes) is paused because its calls are refused
/// alike. 401, 403 and 404 (http::Verdict::RouteMisconfigured) say the credentials, the
/// permissions or the URL are wrong; when no call of the route succeeds meanwhile, that is
/// the route's fault, not one request's, and a caller pauses the route and tries the call
/// again later instead of dead-lettering its stream. When other calls succeed meanwhile
/// the refusal is that request's own (an entity in its URL that does not exist). Configured
/// routes and compiled effect handlers (the billing consumer) decide it here alike.

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace idem::http {

class RoutePause {
 public:
  /// Called when the route pauses (true, why) or resumes (false, what resumed it), once
  /// per change, under the pause's lock: it must be quick and must not call back.
  using Observer = std::function<void(bool paused, std::string_view why)>;

  explicit RoutePause(Observer observer = {}) : observer_(std::move(observer)) {}

  /// What the route was like when a call started; refused() compares with it.
  struct Start {
    std::uint64_t successes = 0;
    bool paused = false;
  };
  [[nodiscard]] Start at_start() const noexcept;

  /// A call succeeded: the route resumes if it was paused.
  void succeeded();

  /// What a call's RouteMisconfigured answer means.
  enum class Refusal {
    Paused,         ///< no call succeeded since it started: the route is paused now; retry it
    AfterRecovery,  ///< the route was paused as it started and has resumed: its answer may
                    ///< be from before the recovery; retry it
    RequestsOwn,    ///< other calls succeeded meanwhile: this request's fault (dead-letter it)
  };
  /// A call that started at `start` was refused (401, 403, 404) for `why`.
  [[nodiscard]] Refusal refused(Start start, const std::string& why);
  /// refused(), as the call's completion takes it: the reason to retry the call with
  /// ("<who> paused: <why>", or "<who> resumed while this call was answered: <why>"), or
  /// nullopt when the refusal is the request's own and the call is dead-lettered.
  [[nodiscard]] std::optional<std::string> retry_after_refusal(Start start, const std::string& why,
                                                               std::string_view who);

  /// Pauses the route for `why` (a request the client refuses to send, an endpoint that is
  /// down), or updates why while it stays paused.
  void pause(const std::string& why);
  /// Resumes it without a success of its own (the endpoint's breaker closed).
  void resume(std::string_view why);

  /// Why the route is paused, or empty.
  [[nodiscard]] std::string paused_reason() const;

 private:
  Observer observer_;
  std::atomic<std::uint64_t> successes_{0};
  /// Whether reason_ is set, readable without the lock: each call's start and each
  /// success read it. Written under mutex_ with reason_.
  std::atomic<bool> paused_{false};
  mutable std::mutex mutex_;
  std::string reason_;  // guarded by mutex_
};

}  // namespace idem::http
