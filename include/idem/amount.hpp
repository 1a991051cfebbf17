#pragma once
/// \file
/// Exact decimal money amounts. A binary float never holds money.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace idem {

/// A non-negative decimal amount with at most two fraction digits, held exactly
/// as an integer count of hundredths ("12.30" is 1230).
class Amount {
 public:
  constexpr Amount() noexcept = default;
  /// From hundredths; precondition: `hundredths >= 0`.
  static constexpr Amount from_hundredths(std::int64_t hundredths) noexcept {
    Amount a;
    a.hundredths_ = hundredths;
    return a;
  }

  /// Why a text is not an amount.
  enum class ParseError { NotDecimal, Negative, TooManyFractionDigits, OutOfRange };

  /// Parses `digits[.digits]` with 1 or 2 fraction digits, e.g. "0", "12.3", "12.30".
  /// Rejects signs other than a leading '-' (reported as Negative), exponents,
  /// leading '+', leading/trailing spaces, "1.", ".5", and values above INT64_MAX hundredths.
  [[nodiscard]] static std::optional<Amount> parse(std::string_view text,
                                                   ParseError* why = nullptr) noexcept;

  [[nodiscard]] constexpr std::int64_t hundredths() const noexcept { return hundredths_; }
  /// Canonical text with exactly two fraction digits: "12.30".
  [[nodiscard]] std::string to_string() const;

  friend constexpr auto operator<=>(const Amount&, const Amount&) noexcept = default;

 private:
  std::int64_t hundredths_ = 0;
};

}  // namespace idem
