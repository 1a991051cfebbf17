#pragma once
/// \file
/// UUIDs, and UUIDv7 generation per RFC 9562 (rule IDEM-1).

#include <array>
#include <chrono>
#include <compare>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "idem/clock.hpp"

namespace idem {

/// A 128-bit UUID held as 16 big-endian bytes. Ordering is bytewise, which for
/// UUIDv7 is the order of the embedded millisecond timestamp.
class Uuid {
 public:
  using Bytes = std::array<std::uint8_t, 16>;

  constexpr Uuid() noexcept = default;  ///< the nil UUID
  constexpr explicit Uuid(const Bytes& bytes) noexcept : bytes_(bytes) {}

  /// Parses the canonical 8-4-4-4-12 hex form, case-insensitively.
  /// Returns nullopt for anything else (no braces, no urn: prefix, no missing dashes).
  [[nodiscard]] static std::optional<Uuid> parse(std::string_view text) noexcept;

  /// The canonical lower-case 36-character form.
  [[nodiscard]] std::string to_string() const;
  /// Writes the canonical form into exactly 36 chars at `out` (no terminator).
  void format_to(char* out) const noexcept;

  [[nodiscard]] const Bytes& bytes() const noexcept { return bytes_; }
  [[nodiscard]] int version() const noexcept { return bytes_[6] >> 4; }
  /// True for the RFC 9562 variant (0b10) with version 7.
  [[nodiscard]] bool is_v7() const noexcept;
  [[nodiscard]] bool is_nil() const noexcept;
  /// The 48-bit Unix-millisecond timestamp of a v7 UUID (meaningless for other versions).
  [[nodiscard]] std::chrono::sys_time<std::chrono::milliseconds> timestamp() const noexcept;

  /// The smallest UUID whose first 48 bits are `ms` (all other bits zero). Every
  /// UUIDv7 born at or after `ms` sorts at or above it: used for range partition bounds.
  [[nodiscard]] static Uuid lower_bound_for(
      std::chrono::sys_time<std::chrono::milliseconds> ms) noexcept;

  friend constexpr auto operator<=>(const Uuid&, const Uuid&) noexcept = default;
  friend constexpr bool operator==(const Uuid&, const Uuid&) noexcept = default;

 private:
  Bytes bytes_{};
};

/// Generates UUIDv7 values that are strictly increasing within the generator,
/// also when many are made in the same millisecond and when the clock steps back.
///
/// Layout (RFC 9562 section 6.2, method 1 "fixed bit-length dedicated counter"):
/// 48-bit ms timestamp | ver 7 | 12-bit counter high | var 0b10 | 30-bit counter low | 32 random
/// bits. The 42-bit counter is re-seeded randomly (top bit clear) on each new millisecond and
/// incremented otherwise; on overflow, or when the clock steps back, the timestamp is
/// carried forward from the last value, so ordering never breaks.
///
/// Thread-safe; one short critical section per UUID.
class UuidV7Generator {
 public:
  explicit UuidV7Generator(const Clock& clock = SystemClock::instance());
  UuidV7Generator(const UuidV7Generator&) = delete;
  UuidV7Generator& operator=(const UuidV7Generator&) = delete;
  ~UuidV7Generator();

  [[nodiscard]] Uuid next();

 private:
  struct State;
  const Clock& clock_;
  std::mutex mutex_;
  std::unique_ptr<State> state_;  // kept out of the header so the RNG stays private
};

/// A UUIDv7 from a process-wide generator (so every id born in this process is
/// ordered after every earlier one). Thread-safe.
[[nodiscard]] Uuid new_uuid_v7();

}  // namespace idem

template <>
struct std::hash<idem::Uuid> {
  std::size_t operator()(const idem::Uuid& u) const noexcept;
};
