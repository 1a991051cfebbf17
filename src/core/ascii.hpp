#pragma once
// Character classes of the formats idem reads (amounts, RFC 3339 timestamps): ASCII only,
// never the locale's, which <cctype> would consult.

namespace idem::detail {

[[nodiscard]] constexpr bool is_ascii_digit(char c) noexcept {
  return c >= '0' && c <= '9';
}

}  // namespace idem::detail
