// libFuzzer target: the Kafka headers a consumer reads from records anyone can write,
// the idem.* headers of a retry-topic record (check_retry_headers: idem.attempts and
// idem.retry.not_before) and the W3C `traceparent` (parse_traceparent).
//
// Input, so that the seeds stay readable: five lines,
//   <level 1..2> \n <now, ms since the epoch> \n <idem.attempts> \n <idem.retry.not_before> \n
//   <traceparent>
// A missing line is an absent header; an unparsable level or now falls back to a default.
// The checks: no crash or sanitizer report, and what is accepted is what idem writes
// (attempts == level, not_before <= now + delay + skew allowance, a traceparent that
// formats back to the same text).
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "consumer/letters/retry_topics.hpp"
#include "idem/tracing.hpp"

namespace {

using namespace std::chrono_literals;

// Two retry topics, as a consumer with retry_topics.delays = {1 s, 1 h} has.
constexpr std::chrono::milliseconds kDelays[] = {1000ms, 3'600'000ms};
constexpr std::uint32_t kLevels = 2;
constexpr std::int64_t kDefaultNow = 1'764'547'200'000;  // 2025-12-01T00:00:00Z

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "retry_headers_fuzz: %s\n", what);
  std::abort();
}

std::optional<std::int64_t> number(std::optional<std::string_view> text) {
  if (!text) return std::nullopt;
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
  if (ec != std::errc() || end != text->data() + text->size()) return std::nullopt;
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::optional<std::string_view>> lines(5);
  for (auto& line : lines) {
    const auto nl = rest.find('\n');
    line = rest.substr(0, nl);
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }

  const auto level_number = number(lines[0]);
  const std::uint32_t level = level_number && *level_number >= 1 && *level_number <= kLevels
                                  ? static_cast<std::uint32_t>(*level_number)
                                  : 1;
  const std::int64_t now = number(lines[1]).value_or(kDefaultNow);
  const auto delay = kDelays[level - 1];
  const idem::detail::RetryHeaderCheck checked =
      idem::detail::check_retry_headers(lines[2], lines[3], level, kLevels, delay, now);
  if (checked.headers) {
    if (!checked.problem.empty()) broken("accepted headers with a problem");
    if (checked.headers->attempts != level) broken("accepted idem.attempts other than the level");
    const auto allowed = delay + idem::detail::kRetryClockSkewAllowance;
    // now + allowed without overflow: compare the difference instead.
    if (checked.headers->not_before_ms > now &&
        static_cast<std::uint64_t>(checked.headers->not_before_ms) -
                static_cast<std::uint64_t>(now) >
            static_cast<std::uint64_t>(allowed.count()))
      broken("accepted an idem.retry.not_before beyond now + delay + skew allowance");
  } else if (checked.problem.find("idem.") == std::string::npos) {
    broken("a rejection that does not name the header");
  }

  if (lines[4]) {
    if (const auto context = idem::parse_traceparent(*lines[4])) {
      if (context->traceparent() != *lines[4])
        broken("traceparent does not format back to its text");
      if (context->trace_id_hex() != lines[4]->substr(3, 32))
        broken("trace id differs from the text");
      const idem::TraceContext child = context->child();
      if (child.trace_id != context->trace_id) broken("a child span changed the trace id");
      if (!idem::parse_traceparent(child.traceparent()))
        broken("a child's traceparent does not parse");
    }
  }
  return 0;
}
