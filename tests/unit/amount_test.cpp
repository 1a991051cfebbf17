#include "idem/amount.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace amount_test {

using idem::Amount;
using PE = Amount::ParseError;

std::optional<PE> error_of(std::string_view text) {
  PE why{};
  if (Amount::parse(text, &why)) return std::nullopt;
  return why;
}

TEST(Amount, ParsesExactHundredths) {
  EXPECT_EQ(Amount::parse("0")->hundredths(), 0);
  EXPECT_EQ(Amount::parse("12")->hundredths(), 1200);
  EXPECT_EQ(Amount::parse("12.3")->hundredths(), 1230);
  EXPECT_EQ(Amount::parse("12.30")->hundredths(), 1230);
  EXPECT_EQ(Amount::parse("0.05")->hundredths(), 5);
  EXPECT_EQ(Amount::parse("1299.90")->hundredths(), 129990);
}

TEST(Amount, AcceptsLeadingZerosAsTheSameExactValue) {
  EXPECT_EQ(Amount::parse("007.5")->hundredths(), 750);
  EXPECT_EQ(Amount::parse("007.5")->to_string(), "7.50");
  EXPECT_EQ(Amount::parse("00000000000000000000000000001.00")->hundredths(), 100);
}

TEST(Amount, FormatsWithExactlyTwoFractionDigits) {
  EXPECT_EQ(Amount::from_hundredths(1230).to_string(), "12.30");
  EXPECT_EQ(Amount::from_hundredths(5).to_string(), "0.05");
  EXPECT_EQ(Amount::from_hundredths(0).to_string(), "0.00");
  EXPECT_EQ(Amount::from_hundredths(100).to_string(), "1.00");
  EXPECT_EQ(Amount::from_hundredths(std::numeric_limits<std::int64_t>::max()).to_string(),
            "92233720368547758.07");
}

TEST(Amount, RoundTripsThroughText) {
  for (std::int64_t h : {std::int64_t{0}, std::int64_t{1}, std::int64_t{99}, std::int64_t{100},
                         std::int64_t{123456789}, std::numeric_limits<std::int64_t>::max()}) {
    const auto a = Amount::from_hundredths(h);
    EXPECT_EQ(Amount::parse(a.to_string()), a) << h;
  }
}

TEST(Amount, RejectsWhatIsNotAPlainDecimal) {
  const char* bad[] = {"",          "abc", "1e5", "+1",    " 1",   "1 ",   "1.", ".5", "1,5",
                       "0x10",      "-",   "--1", "1.2.3", "1..2", "1.-2", "١",  // Arabic-Indic one
                       "1\xd9\xa1", "NaN", "inf", "1_000", "\t1",  "-.5",  "- 1"};
  for (const char* text : bad) EXPECT_EQ(error_of(text), PE::NotDecimal) << '"' << text << '"';
}

TEST(Amount, RejectsEmbeddedNul) {
  EXPECT_EQ(error_of(std::string_view("1\0", 2)), PE::NotDecimal);
}

TEST(Amount, ReportsALeadingMinusAsNegative) {
  EXPECT_EQ(error_of("-0.5"), PE::Negative);
  EXPECT_EQ(error_of("-1"), PE::Negative);
  EXPECT_EQ(error_of("-0"), PE::Negative);  // a sign on money is a producer bug, even on zero
  EXPECT_EQ(error_of("-1.234"), PE::Negative);
}

TEST(Amount, RejectsMoreThanTwoFractionDigits) {
  EXPECT_EQ(error_of("1.234"), PE::TooManyFractionDigits);
  EXPECT_EQ(error_of("1.230"), PE::TooManyFractionDigits);  // even when the value would fit
  EXPECT_EQ(error_of("0.001"), PE::TooManyFractionDigits);
}

TEST(Amount, RejectsValuesAboveInt64MaxHundredths) {
  EXPECT_EQ(Amount::parse("92233720368547758.07")->hundredths(),
            std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(error_of("92233720368547758.08"), PE::OutOfRange);
  EXPECT_EQ(error_of("92233720368547759"), PE::OutOfRange);
  EXPECT_EQ(error_of("9223372036854775807"), PE::OutOfRange);
  EXPECT_EQ(error_of("99999999999999999999999999999"), PE::OutOfRange);
}

TEST(Amount, ParseWithoutReasonPointerStillFails) {
  EXPECT_FALSE(Amount::parse("abc").has_value());
  EXPECT_FALSE(Amount::parse("-1").has_value());
}

TEST(Amount, OrdersByValue) {
  EXPECT_LT(*Amount::parse("9.99"), *Amount::parse("10"));
  EXPECT_EQ(*Amount::parse("10"), *Amount::parse("10.00"));
}

}  // namespace amount_test
