#pragma once
// One request of the conformance probe on a libcurl easy handle of its own, blocking,
// exactly once. The probe needs what the clients deliberately refuse to do: no retry,
// keys the client's validation would reject (the malformed-key case), no key at all, and
// the moments a request was fully sent and its answer began, to tell honestly whether two
// requests overlapped.
#include <chrono>
#include <functional>
#include <string>

#include "idem/http/conformance_probe.hpp"

namespace idem::http::detail {

/// Called on the sending thread from inside libcurl's callbacks; each at most once.
struct SendHooks {
  /// The whole request (headers and body) was written to the connection.
  std::function<void()> request_sent;
  /// The first byte of the answer arrived.
  std::function<void()> answer_started;
};

/// Sends `request` once and waits for its answer, at most `timeout` in all. A transport
/// failure is an answer with status 0 and `error` set; never retried.
/// \throws Error(InvalidArgument, Http) for a URL libcurl cannot use;
///   Error(Internal, Http) if libcurl cannot be initialised.
[[nodiscard]] ObservedAnswer send_once(const PlannedRequest& request,
                                       std::chrono::milliseconds timeout,
                                       const SendHooks& hooks = {});

}  // namespace idem::http::detail
