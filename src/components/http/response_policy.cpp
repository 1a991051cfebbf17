#include "idem/http/response_policy.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <ctime>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace idem::http {

namespace {

std::string one_line(std::string_view text, std::size_t max) {
  std::string out;
  for (const char c : text.substr(0, max))
    out.push_back(std::iscntrl(static_cast<unsigned char>(c)) != 0 ? ' ' : c);
  if (text.size() > max) out += "...";
  return out;
}

Verdict verdict_of(long status) noexcept {
  if (status >= 200 && status < 300) return Verdict::Done;
  if (status == 409 || status == 429 || status >= 500) return Verdict::Retry;
  if (status == 401 || status == 403 || status == 404) return Verdict::RouteMisconfigured;
  return Verdict::DeadLetter;
}

}  // namespace

bool equals_ignoring_case(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

bool is_problem_json(const ResponseHeaders& headers) {
  const auto type = find_header(headers, "Content-Type");
  if (!type) return false;
  std::string_view media = type->substr(0, type->find(';'));
  while (!media.empty() && media.back() == ' ') media.remove_suffix(1);
  return equals_ignoring_case(media, "application/problem+json");
}

std::optional<std::string_view> find_header(const ResponseHeaders& headers,
                                            std::string_view name) noexcept {
  for (const auto& [n, v] : headers) {
    if (equals_ignoring_case(n, name)) return std::string_view(v);
  }
  return std::nullopt;
}

std::string_view to_string(Verdict verdict) noexcept {
  switch (verdict) {
    case Verdict::Done: return "done";
    case Verdict::Retry: return "retry";
    case Verdict::DeadLetter: return "dead_letter";
    case Verdict::RouteMisconfigured: return "route_misconfigured";
  }
  return "unknown";
}

std::optional<std::chrono::milliseconds> parse_retry_after(
    std::string_view value, std::chrono::system_clock::time_point now) {
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
  std::int64_t seconds = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
  if (ec == std::errc() && end == value.data() + value.size() && seconds >= 0)
    return std::chrono::seconds(std::min<std::int64_t>(seconds, 1'000'000'000));
  // IMF-fixdate, e.g. "Sun, 06 Nov 1994 08:49:37 GMT" (the form RFC 9110 requires senders
  // to use).
  std::tm tm{};
  const std::string text(value);
  const char* parsed = ::strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (parsed == nullptr || *parsed != '\0') return std::nullopt;
  const auto at = std::chrono::system_clock::from_time_t(::timegm(&tm));
  return at <= now ? std::chrono::milliseconds(0)
                   : std::chrono::duration_cast<std::chrono::milliseconds>(at - now);
}

Classification ResponsePolicy::classify(long status, const ResponseHeaders& headers,
                                        std::string_view body,
                                        std::chrono::system_clock::time_point now) const {
  Classification c;
  c.status = status;
  c.verdict = verdict_of(status);
  if (c.verdict == Verdict::Done) return c;
  if (c.verdict == Verdict::Retry) {
    if (const auto value = find_header(headers, "Retry-After")) {
      if (const auto delay = parse_retry_after(*value, now))
        c.retry_after = std::min(*delay, max_retry_after);
    }
  }
  if (is_problem_json(headers)) {
    const auto doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    const auto text_of = [&](const char* key) {
      const auto it = doc.is_object() ? doc.find(key) : doc.end();
      return it != doc.end() && it->is_string() ? one_line(it->get<std::string>(), 256)
                                                : std::string();
    };
    c.problem_type = text_of("type");
    c.problem_title = text_of("title");
    c.problem_detail = text_of("detail");
  }
  if (!c.problem_title.empty() || !c.problem_detail.empty() || !c.problem_type.empty()) {
    c.reason = fmt::format("HTTP {}{}: {}{}{}", status,
                           c.problem_type.empty() ? "" : fmt::format(" ({})", c.problem_type),
                           c.problem_title, c.problem_detail.empty() ? "" : ": ", c.problem_detail);
  } else {
    c.reason = fmt::format("HTTP {}: {}", status, one_line(body, max_reason_body));
  }
  return c;
}

Classification ResponsePolicy::classify_no_answer(std::string_view error) const {
  Classification c;
  c.verdict = Verdict::Retry;
  c.reason = fmt::format("no answer: {}", one_line(error, max_reason_body));
  return c;
}

}  // namespace idem::http
