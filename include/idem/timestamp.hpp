#pragma once
/// \file
/// RFC 3339 timestamps.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace idem {

using Timestamp = std::chrono::sys_time<std::chrono::microseconds>;

/// Parses an RFC 3339 date-time ("2026-11-29T22:33:47Z", "...47.123456+03:00").
/// Accepts 't'/'z' in lower case, up to 9 fraction digits (truncated to microseconds),
/// a second of 60 only as a leap second at 23:59 UTC-equivalent positions (mapped to :59).
/// Validates every field range, including the day against the month and leap years.
[[nodiscard]] std::optional<Timestamp> parse_rfc3339(std::string_view text) noexcept;

/// Formats in UTC with microseconds: "2026-11-29T22:33:47.123456Z".
[[nodiscard]] std::string format_rfc3339(Timestamp t);

}  // namespace idem
