#include "idem/amount.hpp"

#include <charconv>

#include "core/ascii.hpp"

namespace idem {
namespace {

// Checks the grammar `digits [ '.' digits ]` over the whole text, without
// limiting the number of fraction digits (that is a separate, more specific
// error). Returns the position of the '.', or npos when there is none.
// On a grammar failure, returns false.
bool split_decimal(std::string_view text, std::size_t& dot) noexcept {
  dot = std::string_view::npos;
  std::size_t i = 0;
  while (i < text.size() && detail::is_ascii_digit(text[i])) ++i;
  if (i == 0) return false;  // "", ".5", "abc", "+1", " 1"
  if (i == text.size()) return true;
  if (text[i] != '.') return false;  // "1e5", "1,5", "0x10", "1 "
  dot = i++;
  const std::size_t frac_start = i;
  while (i < text.size() && detail::is_ascii_digit(text[i])) ++i;
  return i > frac_start && i == text.size();  // "1." and "1.2.3" fail
}

}  // namespace

std::optional<Amount> Amount::parse(std::string_view text, ParseError* why) noexcept {
  const auto fail = [why](ParseError e) -> std::optional<Amount> {
    if (why != nullptr) *why = e;
    return std::nullopt;
  };

  // A leading '-' in front of an otherwise well-formed decimal is reported as
  // Negative (a more useful message than NotDecimal), whatever the digits,
  // including "-0": a producer that writes a sign on money has a bug.
  const bool negative = !text.empty() && text.front() == '-';
  const std::string_view body = negative ? text.substr(1) : text;

  std::size_t dot = 0;
  if (!split_decimal(body, dot)) return fail(ParseError::NotDecimal);
  if (negative) return fail(ParseError::Negative);

  const std::string_view int_part = body.substr(0, dot);
  const std::string_view frac_part =
      dot == std::string_view::npos ? std::string_view{} : body.substr(dot + 1);
  // "1.230" is rejected too, although its value fits: the contract is at
  // most two fraction digits, and silently accepting a third one would
  // invite "1.235" being expected to round.
  if (frac_part.size() > 2) return fail(ParseError::TooManyFractionDigits);

  // Leading zeros ("007.5") are harmless: the value stays exact.
  std::int64_t units = 0;
  for (char c : int_part) {
    if (__builtin_mul_overflow(units, std::int64_t{10}, &units) ||
        __builtin_add_overflow(units, std::int64_t{c - '0'}, &units)) {
      return fail(ParseError::OutOfRange);
    }
  }
  std::int64_t cents = 0;
  if (!frac_part.empty()) cents += std::int64_t{frac_part[0] - '0'} * 10;
  if (frac_part.size() == 2) cents += frac_part[1] - '0';

  std::int64_t hundredths = 0;
  if (__builtin_mul_overflow(units, std::int64_t{100}, &hundredths) ||
      __builtin_add_overflow(hundredths, cents, &hundredths)) {
    return fail(ParseError::OutOfRange);
  }
  return from_hundredths(hundredths);
}

std::string Amount::to_string() const {
  // Negative values break the class precondition; print them faithfully
  // anyway rather than producing garbage, using the unsigned magnitude so
  // INT64_MIN does not overflow.
  const bool negative = hundredths_ < 0;
  const std::uint64_t magnitude = negative ? 0 - static_cast<std::uint64_t>(hundredths_)
                                           : static_cast<std::uint64_t>(hundredths_);
  char buf[32];
  char* p = buf;
  if (negative) *p++ = '-';
  p = std::to_chars(p, buf + sizeof buf, magnitude / 100).ptr;
  const auto cents = static_cast<unsigned>(magnitude % 100);
  *p++ = '.';
  *p++ = static_cast<char>('0' + cents / 10);
  *p++ = static_cast<char>('0' + cents % 10);
  return std::string(buf, p);
}

}  // namespace idem
