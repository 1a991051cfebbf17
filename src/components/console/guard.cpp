#include "console/guard.hpp"

#include <fmt/format.h>

namespace idem::console {

namespace {

// "host:port" or "[v6]:port" split; port -1 when absent or not a number.
std::pair<std::string_view, int> split_host_port(std::string_view text) {
  std::string_view host = text;
  std::string_view port;
  if (text.starts_with('[')) {
    const auto close = text.find(']');
    if (close == std::string_view::npos) return {text, -1};
    host = text.substr(1, close - 1);
    if (close + 1 < text.size() && text[close + 1] == ':') port = text.substr(close + 2);
  } else if (const auto colon = text.rfind(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (port.empty() || port.size() > 5) return {host, -1};
  int value = 0;
  for (const char c : port) {
    if (c < '0' || c > '9') return {host, -1};
    value = value * 10 + (c - '0');
  }
  return {host, value};
}

}  // namespace

bool is_loopback_host(std::string_view host) noexcept {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host == "[::1]";
}

bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const auto x = static_cast<unsigned char>(i < a.size() ? a[i] : 0);
    const auto y = static_cast<unsigned char>(i < b.size() ? b[i] : 0);
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

std::optional<std::string> check_host(const ListenAddress& listen, std::string_view host_header) {
  if (!is_loopback_host(listen.host)) return std::nullopt;  // bound wider on purpose
  const auto [host, port] = split_host_port(host_header);
  if (!is_loopback_host(host) || port != listen.port) {
    return fmt::format("Host '{}' is not this console (a loopback name and port {})", host_header,
                       listen.port);
  }
  return std::nullopt;
}

std::optional<std::string> check_same_origin(const StateChangeRequest& r) {
  if (r.method != "POST") return std::string("state changes are POST requests");
  const std::string_view type = r.content_type.substr(0, r.content_type.find(';'));
  if (type != "application/json") return std::string("the body must be application/json");
  if (!r.origin.empty() && r.origin != fmt::format("http://{}", r.host)) {
    return fmt::format("Origin '{}' is not this console", r.origin);
  }
  if (!r.fetch_site.empty() && r.fetch_site != "same-origin" && r.fetch_site != "none") {
    return fmt::format("cross-site request (Sec-Fetch-Site: {})", r.fetch_site);
  }
  return std::nullopt;
}

std::optional<std::string> check_state_change(const StateChangeRequest& r,
                                              std::string_view configured_token) {
  if (auto problem = check_same_origin(r)) return problem;
  if (configured_token.empty()) {
    return std::string("replay is off: no console.token is configured");
  }
  if (r.token.empty()) return std::string("the X-Idem-Token header is missing");
  if (!constant_time_equal(r.token, configured_token)) return std::string("wrong token");
  return std::nullopt;
}

}  // namespace idem::console
