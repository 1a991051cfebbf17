// Recognising and hiding secrets. Hand-written (a few string scans): no Debian library
// knows libpq's and librdkafka's secret-bearing key names.
#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <string_view>

#include "idem/config.hpp"

namespace idem {

namespace {

constexpr std::string_view kRedacted = "<redacted>";

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Replaces the value of every `name=value` parameter whose name ends in "password"
// (password, sslpassword), in a libpq key/value string or a URI query. A value ends at
// an unquoted space or '&'; a quoted value ('...', backslash escapes) at its quote.
std::string redact_password_parameters(std::string_view text) {
  std::string out;
  std::size_t i = 0;
  const std::string lowered = lower(text);
  while (i < text.size()) {
    const std::size_t at = lowered.find("password", i);
    if (at == std::string::npos) break;
    std::size_t eq = at + 8;
    while (eq < text.size() && text[eq] == ' ') ++eq;
    if (eq >= text.size() || text[eq] != '=') {
      out.append(text.substr(i, at + 8 - i));
      i = at + 8;
      continue;
    }
    std::size_t start = eq + 1;
    while (start < text.size() && text[start] == ' ') ++start;
    std::size_t end = start;
    if (end < text.size() && text[end] == '\'') {
      ++end;
      while (end < text.size() && text[end] != '\'') end += text[end] == '\\' ? 2 : 1;
      end = std::min(end + 1, text.size());
    } else {
      while (end < text.size() && text[end] != ' ' && text[end] != '&') ++end;
    }
    out.append(text.substr(i, start - i));
    out.append(kRedacted);
    i = end;
  }
  out.append(text.substr(std::min(i, text.size())));
  return out;
}

}  // namespace

bool is_secret_key(std::string_view key) noexcept {
  // Key names, not values, decide: librdkafka's sasl.password, ssl.key.password,
  // ssl.keystore.password, ssl.key.pem, sasl.oauthbearer.client.secret,
  // sasl.oauthbearer.config, sasl.jaas.config; libpq's password and sslpassword.
  static constexpr std::array<std::string_view, 7> kMarkers = {
      "password", "secret", "token", "credential", "key.pem", "jaas", "oauthbearer.config"};
  std::string k(key);
  std::transform(k.begin(), k.end(), k.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::any_of(kMarkers.begin(), kMarkers.end(),
                     [&](std::string_view m) { return k.find(m) != std::string::npos; });
}

std::string redact_store_url(std::string_view url) {
  std::string out(url);
  // URI user info: scheme://user:password@host
  const auto scheme_end = out.find("://");
  if (scheme_end != std::string::npos) {
    const auto authority = scheme_end + 3;
    const auto authority_end = out.find_first_of("/?", authority);
    const auto at = out.rfind('@', authority_end == std::string::npos ? out.size() : authority_end);
    if (at != std::string::npos && at > authority) {
      const auto colon = out.find(':', authority);
      if (colon != std::string::npos && colon < at) {
        out.replace(colon + 1, at - colon - 1, kRedacted);
      }
    }
  }
  return redact_password_parameters(out);
}

std::string ConfigEntry::display_value() const {
  if (secret)
    return value.empty() ? std::string() : std::string(kRedacted);  // unset: nothing to hide
  if (key == "store.url") return redact_store_url(value);
  return value;
}

}  // namespace idem
