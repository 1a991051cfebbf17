#include "idem/timestamp.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace timestamp_test {

using namespace std::chrono;
using namespace std::chrono_literals;

idem::Timestamp utc(int y, unsigned mo, unsigned d, int h = 0, int mi = 0, int s = 0, int us = 0) {
  return idem::Timestamp{sys_days{year{y} / month{mo} / day{d}}} + hours{h} + minutes{mi} +
         seconds{s} + microseconds{us};
}

TEST(Rfc3339, ParsesUtcWithAndWithoutFraction) {
  EXPECT_EQ(idem::parse_rfc3339("2026-11-29T22:33:47Z"), utc(2026, 11, 29, 22, 33, 47));
  EXPECT_EQ(idem::parse_rfc3339("2026-11-29T22:33:47.123456Z"),
            utc(2026, 11, 29, 22, 33, 47, 123456));
  EXPECT_EQ(idem::parse_rfc3339("2026-11-29T22:33:47.1Z"), utc(2026, 11, 29, 22, 33, 47, 100000));
  EXPECT_EQ(idem::parse_rfc3339("1970-01-01T00:00:00Z"), idem::Timestamp{});
}

TEST(Rfc3339, AcceptsLowerCaseSeparatorAndZulu) {
  EXPECT_EQ(idem::parse_rfc3339("2026-11-29t22:33:47z"), utc(2026, 11, 29, 22, 33, 47));
}

TEST(Rfc3339, TruncatesFractionBeyondMicroseconds) {
  EXPECT_EQ(idem::parse_rfc3339("2026-11-29T22:33:47.123456789Z"),
            utc(2026, 11, 29, 22, 33, 47, 123456));
  // Truncation, not rounding: .9999999 must stay within the same second (and day).
  EXPECT_EQ(idem::parse_rfc3339("2026-12-31T23:59:59.999999999Z"),
            utc(2026, 12, 31, 23, 59, 59, 999999));
}

TEST(Rfc3339, AppliesNumericOffsets) {
  EXPECT_EQ(idem::parse_rfc3339("2026-11-30T01:33:47+03:00"), utc(2026, 11, 29, 22, 33, 47));
  EXPECT_EQ(idem::parse_rfc3339("2026-11-29T17:03:47-05:30"), utc(2026, 11, 29, 22, 33, 47));
  EXPECT_EQ(idem::parse_rfc3339("2026-11-29T22:33:47+00:00"), utc(2026, 11, 29, 22, 33, 47));
  EXPECT_EQ(idem::parse_rfc3339("2026-11-29T22:33:47-00:00"), utc(2026, 11, 29, 22, 33, 47));
  EXPECT_EQ(idem::parse_rfc3339("2026-01-01T00:00:00+23:59"), utc(2025, 12, 31, 0, 1, 0));
  EXPECT_EQ(idem::parse_rfc3339("2026-11-29T22:33:47.5+01:00"),
            utc(2026, 11, 29, 21, 33, 47, 500000));
}

TEST(Rfc3339, ValidatesDayAgainstMonthAndLeapYears) {
  EXPECT_TRUE(idem::parse_rfc3339("2024-02-29T00:00:00Z"));   // divisible by 4
  EXPECT_TRUE(idem::parse_rfc3339("2000-02-29T00:00:00Z"));   // divisible by 400
  EXPECT_FALSE(idem::parse_rfc3339("1900-02-29T00:00:00Z"));  // divisible by 100 only
  EXPECT_FALSE(idem::parse_rfc3339("2026-02-29T00:00:00Z"));
  EXPECT_FALSE(idem::parse_rfc3339("2026-02-30T00:00:00Z"));
  EXPECT_FALSE(idem::parse_rfc3339("2026-04-31T00:00:00Z"));
  EXPECT_TRUE(idem::parse_rfc3339("2026-12-31T00:00:00Z"));
  EXPECT_FALSE(idem::parse_rfc3339("2026-12-32T00:00:00Z"));
  EXPECT_FALSE(idem::parse_rfc3339("2026-00-10T00:00:00Z"));
  EXPECT_FALSE(idem::parse_rfc3339("2026-13-10T00:00:00Z"));
  EXPECT_FALSE(idem::parse_rfc3339("2026-01-00T00:00:00Z"));
}

TEST(Rfc3339, ValidatesTimeAndOffsetRanges) {
  EXPECT_TRUE(idem::parse_rfc3339("2026-11-29T23:59:59Z"));
  EXPECT_FALSE(idem::parse_rfc3339("2026-11-29T24:00:00Z"));
  EXPECT_FALSE(idem::parse_rfc3339("2026-11-29T22:60:00Z"));
  EXPECT_FALSE(idem::parse_rfc3339("2026-11-29T22:33:61Z"));
  EXPECT_FALSE(idem::parse_rfc3339("2026-11-29T22:33:47+24:00"));
  EXPECT_FALSE(idem::parse_rfc3339("2026-11-29T22:33:47+05:60"));
}

TEST(Rfc3339, MapsALeapSecondAtUtcEndOfDayTo59) {
  EXPECT_EQ(idem::parse_rfc3339("2016-12-31T23:59:60Z"), utc(2016, 12, 31, 23, 59, 59));
  EXPECT_EQ(idem::parse_rfc3339("2016-12-31T23:59:60.5Z"), utc(2016, 12, 31, 23, 59, 59, 500000));
  // The same instant written in another offset (RFC 3339 section 5.7's example).
  EXPECT_EQ(idem::parse_rfc3339("1990-12-31T15:59:60-08:00"), utc(1990, 12, 31, 23, 59, 59));
  EXPECT_FALSE(idem::parse_rfc3339("2016-12-31T12:30:60Z"));
  EXPECT_FALSE(idem::parse_rfc3339("2016-12-31T22:59:60Z"));
  EXPECT_FALSE(idem::parse_rfc3339("2016-12-31T23:59:60+01:00"));  // 22:59 UTC
}

TEST(Rfc3339, RejectsMalformedText) {
  const char* bad[] = {
      "",
      "2026-11-29",
      "2026-11-29T22:33:47",   // no offset
      "2026-11-29 22:33:47Z",  // space separator
      "2026-11-29_22:33:47Z",
      "2026-11-29T22:33Z",                // no seconds
      "2026-11-29T22:33:47.Z",            // empty fraction
      "2026-11-29T22:33:47.1234567890Z",  // 10 fraction digits
      "2026-11-29T22:33:47,5Z",           // comma fraction
      "2026-11-29T22:33:47+0300",         // offset without colon
      "2026-11-29T22:33:47+03",
      "2026-11-29T22:33:47+3:00",
      "2026-11-29T22:33:47UTC",
      "2026-11-29T22:33:47Z ",  // trailing space
      " 2026-11-29T22:33:47Z",
      "2026-11-29T22:33:47ZZ",
      "26-11-29T22:33:47Z",
      "+2026-11-29T22:33:47Z",
      "2026-1-29T22:33:47Z",
      "2026/11/29T22:33:47Z",
      "2026-11-29T2:33:47Z",
      "2026-11-29T22:33:4Z",
      "２026-11-29T22:33:47Z",  // fullwidth digit
      "2026-11-29T22:33:47+03:00:00",
      "2026-11-29T22:33:47-",
  };
  for (const char* text : bad) EXPECT_FALSE(idem::parse_rfc3339(text).has_value()) << text;
}

TEST(Rfc3339, FormatsUtcWithSixFractionDigits) {
  EXPECT_EQ(idem::format_rfc3339(utc(2026, 11, 29, 22, 33, 47, 123456)),
            "2026-11-29T22:33:47.123456Z");
  EXPECT_EQ(idem::format_rfc3339(utc(2026, 1, 2, 3, 4, 5)), "2026-01-02T03:04:05.000000Z");
  EXPECT_EQ(idem::format_rfc3339(idem::Timestamp{}), "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(idem::format_rfc3339(utc(9999, 12, 31, 23, 59, 59, 999999)),
            "9999-12-31T23:59:59.999999Z");
  EXPECT_EQ(idem::format_rfc3339(utc(1, 1, 1)), "0001-01-01T00:00:00.000000Z");
}

TEST(Rfc3339, FormatsTimesBefore1970) {
  EXPECT_EQ(idem::format_rfc3339(idem::Timestamp{} - 1us), "1969-12-31T23:59:59.999999Z");
}

TEST(Rfc3339, RoundTripsThroughText) {
  const idem::Timestamp samples[] = {utc(2026, 11, 29, 22, 33, 47, 123456),
                                     utc(2024, 2, 29, 0, 0, 0, 1),
                                     utc(1999, 12, 31, 23, 59, 59, 999999),
                                     idem::Timestamp{} - 1us,
                                     utc(0, 1, 1),
                                     utc(9999, 12, 31, 23, 59, 59, 999999)};
  for (const auto t : samples) {
    const std::string text = idem::format_rfc3339(t);
    EXPECT_EQ(idem::parse_rfc3339(text), t) << text;
  }
  // Text in canonical form survives parse + format unchanged.
  EXPECT_EQ(idem::format_rfc3339(*idem::parse_rfc3339("2026-11-29T22:33:47.123456Z")),
            "2026-11-29T22:33:47.123456Z");
}

}  // namespace timestamp_test
