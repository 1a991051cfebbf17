// RFC 3339 parsing and formatting, written by hand on purpose:
// - GCC 12's libstdc++ does not implement std::chrono::parse (the parsing
//   half of P0355 arrived in GCC 14);
// - the only Debian 12 package that could help is Howard Hinnant's date
//   (libhowardhinnant-date-dev, the origin of chrono::parse). It is not a
//   project dependency, and its format-driven parse would still need code
//   around it for "Z or +HH:MM", lower-case 't'/'z', 1..9 fraction digits
//   and the leap-second rule. strptime is no option: locale-dependent, no
//   fractions, and it does not check the day against the month.
// The grammar is small and fixed-width, so a direct scanner is both the
// simplest and the fastest option; std::chrono's calendar types do the
// date arithmetic and the leap-year rules.
#include "idem/timestamp.hpp"

#include <charconv>

#include "core/ascii.hpp"

namespace idem {
namespace {

using namespace std::chrono;

// Reads exactly `n` ASCII digits at `pos`; false if any is not a digit.
bool read_digits(std::string_view s, std::size_t pos, std::size_t n, int& out) noexcept {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const char c = s[pos + i];
    if (!detail::is_ascii_digit(c)) return false;
    v = v * 10 + (c - '0');
  }
  out = v;
  return true;
}

void put2(char* p, unsigned v) noexcept {
  p[0] = static_cast<char>('0' + v / 10);
  p[1] = static_cast<char>('0' + v % 10);
}

}  // namespace

std::optional<Timestamp> parse_rfc3339(std::string_view s) noexcept {
  // date-time = full-date "T" full-time
  //   full-date   = YYYY "-" MM "-" DD
  //   full-time   = HH ":" MM ":" SS [ "." 1*DIGIT ] ( "Z" / ("+" / "-") HH ":" MM )
  // The separator must be 'T' or 't': RFC 3339 only *permits* a space as an
  // application choice, and accepting it would make two spellings valid.
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (s.size() < 20 || !read_digits(s, 0, 4, year) || s[4] != '-' || !read_digits(s, 5, 2, month) ||
      s[7] != '-' || !read_digits(s, 8, 2, day) || (s[10] != 'T' && s[10] != 't') ||
      !read_digits(s, 11, 2, hour) || s[13] != ':' || !read_digits(s, 14, 2, minute) ||
      s[16] != ':' || !read_digits(s, 17, 2, second)) {
    return std::nullopt;
  }
  if (hour > 23 || minute > 59 || second > 60) return std::nullopt;

  const year_month_day ymd{std::chrono::year{year},
                           std::chrono::month{static_cast<unsigned>(month)},
                           std::chrono::day{static_cast<unsigned>(day)}};
  if (!ymd.ok()) return std::nullopt;  // month 1-12, day within the month incl. Feb 29 rules

  std::size_t pos = 19;
  std::int64_t micros = 0;
  if (s[pos] == '.') {
    ++pos;
    const std::size_t start = pos;
    while (pos < s.size() && detail::is_ascii_digit(s[pos])) {
      // Digits beyond the sixth are truncated, not rounded: rounding could
      // carry into the next second (or day) and make 23:59:59.9999999
      // parse as a different date than it names.
      if (pos - start < 6) micros = micros * 10 + (s[pos] - '0');
      ++pos;
    }
    const std::size_t n = pos - start;
    if (n == 0 || n > 9) return std::nullopt;
    for (std::size_t i = n; i < 6; ++i) micros *= 10;
  }

  if (pos >= s.size()) return std::nullopt;  // the offset is mandatory
  int offset_minutes = 0;
  const char z = s[pos];
  if (z == 'Z' || z == 'z') {
    ++pos;
  } else if (z == '+' || z == '-') {
    int oh = 0, om = 0;
    if (!read_digits(s, pos + 1, 2, oh) || pos + 3 >= s.size() || s[pos + 3] != ':' ||
        !read_digits(s, pos + 4, 2, om) || oh > 23 || om > 59) {
      return std::nullopt;
    }
    offset_minutes = (oh * 60 + om) * (z == '-' ? -1 : 1);
    pos += 6;
  } else {
    return std::nullopt;
  }
  if (pos != s.size()) return std::nullopt;

  if (second == 60) {
    // A leap second can only be the last second of a UTC day, so :60 is valid
    // only where the local time is 23:59 in UTC. std::chrono::sys_time
    // cannot represent it, so it is mapped onto :59 of the same minute.
    const int utc_minute_of_day = ((hour * 60 + minute - offset_minutes) % 1440 + 1440) % 1440;
    if (utc_minute_of_day != 23 * 60 + 59) return std::nullopt;
    second = 59;
  }

  const sys_days date{ymd};
  return Timestamp{date} + hours{hour} + minutes{minute} + seconds{second} + microseconds{micros} -
         minutes{offset_minutes};
}

std::string format_rfc3339(Timestamp t) {
  // Hand-formatted into a stack buffer: this runs once per serialised event.
  const auto date = floor<days>(t);
  const year_month_day ymd{date};
  const auto tod = t - date;  // [0, 24h) because floor rounds towards -inf
  const auto h = static_cast<unsigned>(duration_cast<hours>(tod).count());
  const auto m = static_cast<unsigned>(duration_cast<minutes>(tod).count() % 60);
  const auto sec = static_cast<unsigned>(duration_cast<seconds>(tod).count() % 60);
  const auto us = static_cast<unsigned>(tod.count() % 1'000'000);

  // RFC 3339 has only four-digit years; a time outside 0000..9999 is written
  // with its real year number and is then not valid RFC 3339 (it can only
  // come from a hand-built Timestamp, never from parse_rfc3339).
  char buf[48];
  char* p = buf;
  const int y = static_cast<int>(ymd.year());
  if (y >= 0 && y <= 9999) {
    put2(p, static_cast<unsigned>(y / 100));
    put2(p + 2, static_cast<unsigned>(y % 100));
    p += 4;
  } else {
    p = std::to_chars(p, buf + 16, y).ptr;
  }
  *p++ = '-';
  put2(p, static_cast<unsigned>(ymd.month()));
  p += 2;
  *p++ = '-';
  put2(p, static_cast<unsigned>(ymd.day()));
  p += 2;
  *p++ = 'T';
  put2(p, h);
  p[2] = ':';
  put2(p + 3, m);
  p[5] = ':';
  put2(p + 6, sec);
  p[8] = '.';
  p += 9;
  unsigned frac = us;  // < 10^6: exactly six digits, written right to left
  for (int i = 5; i >= 0; --i) {
    p[i] = static_cast<char>('0' + frac % 10);
    frac /= 10;
  }
  p += 6;
  *p++ = 'Z';
  return std::string(buf, p);
}

}  // namespace idem
