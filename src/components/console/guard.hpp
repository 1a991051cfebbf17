#pragma once
// The console's request checks, as pure functions of header values so unit tests can
// reach every branch without a server.
//  - Host: a console on loopback answers only requests naming a loopback host and its
//    own port. A page of another site that rebinds its DNS name to 127.0.0.1 sends its
//    own name as Host, so it can read nothing.
//  - A state change (replay) must be a POST of JSON (a cross-site form cannot send that
//    content type, and a cross-site fetch of it needs a preflight this server never
//    grants), with an Origin, when the browser sends one, equal to the console's own, and
//    with the token in X-Idem-Token: a header, never a cookie, so the browser never adds
//    it to a request on its own.
#include <optional>
#include <string>
#include <string_view>

namespace idem::console {

struct ListenAddress {
  std::string host;  ///< as configured: 127.0.0.1, localhost, ::1, 0.0.0.0, a name
  int port = 0;
};

[[nodiscard]] bool is_loopback_host(std::string_view host) noexcept;

/// nullopt when a request with `host_header` may be answered, else why not.
[[nodiscard]] std::optional<std::string> check_host(const ListenAddress& listen,
                                                    std::string_view host_header);

/// The headers of a state-changing request that matter.
struct StateChangeRequest {
  std::string_view method;
  std::string_view host;          ///< Host
  std::string_view origin;        ///< Origin; empty when absent
  std::string_view content_type;  ///< Content-Type
  std::string_view fetch_site;    ///< Sec-Fetch-Site; empty when absent
  std::string_view token;         ///< X-Idem-Token; empty when absent
};

/// nullopt when the request may change state, else why not. `configured_token` empty:
/// every state change is refused. The token comparison takes the same time wherever
/// the first difference is.
[[nodiscard]] std::optional<std::string> check_state_change(const StateChangeRequest& request,
                                                            std::string_view configured_token);

/// Same-origin checks only (a dry run changes nothing, so it needs no token).
[[nodiscard]] std::optional<std::string> check_same_origin(const StateChangeRequest& request);

[[nodiscard]] bool constant_time_equal(std::string_view a, std::string_view b) noexcept;

}  // namespace idem::console
