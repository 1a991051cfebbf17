// The one duration syntax of idem (config.hpp): configuration keys, the flags bound to
// them and the DLQ's age filters all read durations here.
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "idem/config.hpp"

namespace idem {

namespace {

struct Unit {
  std::string_view suffix;
  std::int64_t ms;
};
// Longest suffix first is not needed: a unit is the whole non-numeric tail.
constexpr std::array<Unit, 5> kUnits = {
    {{"d", 86'400'000}, {"h", 3'600'000}, {"m", 60'000}, {"s", 1000}, {"ms", 1}}};

std::optional<std::int64_t> unit_ms(std::string_view suffix) noexcept {
  for (const Unit& u : kUnits) {
    if (u.suffix == suffix) return u.ms;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::chrono::milliseconds> parse_duration(
    std::string_view text, std::string_view unit_of_bare_number) noexcept {
  // std::from_chars for double accepts "inf", "nan" and exponents; only digits and one
  // point are a duration's number.
  std::size_t number_end = 0;
  bool point = false;
  while (number_end < text.size()) {
    const char c = text[number_end];
    if (c == '.' && !point) {
      point = true;
    } else if (c < '0' || c > '9') {
      break;
    }
    ++number_end;
  }
  const std::string_view number = text.substr(0, number_end);
  if (number.empty() || number == ".") return std::nullopt;
  std::string_view suffix = text.substr(number_end);
  if (suffix.empty()) suffix = unit_of_bare_number;
  const std::optional<std::int64_t> scale = unit_ms(suffix);
  if (!scale) return std::nullopt;

  if (!point) {  // integers exactly, without a trip through double
    std::int64_t n = 0;
    const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), n);
    if (ec != std::errc() || ptr != number.data() + number.size() ||
        n > std::numeric_limits<std::int64_t>::max() / *scale)
      return std::nullopt;
    return std::chrono::milliseconds(n * *scale);
  }
  double value = 0;
  const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || ptr != number.data() + number.size()) return std::nullopt;
  const double ms = std::floor(value * static_cast<double>(*scale));
  if (!(ms >= 0) || ms >= 9.0e18) return std::nullopt;
  return std::chrono::milliseconds(static_cast<std::int64_t>(ms));
}

std::string format_duration(std::chrono::milliseconds d) {
  const std::int64_t ms = d.count();
  if (ms == 0) return "0s";
  for (const Unit& u : kUnits) {
    if (ms % u.ms == 0) return fmt::format("{}{}", ms / u.ms, u.suffix);
  }
  return fmt::format("{}ms", ms);  // unreachable: every count is a multiple of 1 ms
}

}  // namespace idem
