#pragma once
/// \file
/// What an answer to a call carrying an `Idempotency-Key` means, decided in one place for
/// every client of idem (the billing consumer, sinks declared in a file, the HTTP client's
/// own retries). The rules follow the IETF httpapi draft "The Idempotency-Key HTTP Header
/// Field" (draft-ietf-httpapi-idempotency-key-header, revisions 06 and 07) and common
/// practice (RFC 9110 for Retry-After, RFC 9457 for problem details):
///
///   - 2xx: Done. The effect happened, or had happened and the server replays its first
///     answer.
///   - 409: Retry. The draft: a request with this key is still being processed; retry later
///     with the same key.
///   - 429, 5xx: Retry. The server asks us to slow down, or is in trouble; honour
///     `Retry-After` (RFC 9110).
///   - no answer (timeout, reset, refused): Retry. The server may or may not have done the
///     work: exactly what the key makes safe to repeat.
///   - 401, 403, 404: RouteMisconfigured. Credentials, permissions or the URL are wrong: no
///     call of the route can succeed until an operator fixes them, so a caller pauses the
///     route instead of dead-lettering its stream.
///   - 400, 422, other 4xx, 3xx: DeadLetter. The draft: 400 a missing key, 422 a key reused
///     with another payload; the request itself must change, so sending it unchanged again
///     cannot help.
///
/// A DeadLetter or RouteMisconfigured verdict carries the status and, when the body is
/// `application/problem+json`, its `type`, `title` and `detail`; otherwise a prefix of the
/// body. The draft registers no problem type URIs, so none are interpreted here.

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace idem::http {

/// Response header fields in the order received (names as the server wrote them).
using ResponseHeaders = std::vector<std::pair<std::string, std::string>>;

/// Whether `a` and `b` are equal ignoring ASCII case (header names, media types).
[[nodiscard]] bool equals_ignoring_case(std::string_view a, std::string_view b) noexcept;

/// Whether the answer's Content-Type is `application/problem+json` (RFC 9457), parameters
/// such as charset allowed after `;`.
[[nodiscard]] bool is_problem_json(const ResponseHeaders& headers);

/// The value of the first header named `name` (ASCII case-insensitive), or nullopt.
[[nodiscard]] std::optional<std::string_view> find_header(const ResponseHeaders& headers,
                                                          std::string_view name) noexcept;

enum class Verdict {
  Done,                ///< 2xx
  Retry,               ///< 409, 429, 5xx, no answer: the same request again, later
  DeadLetter,          ///< any other 4xx, a 3xx: the request must change
  RouteMisconfigured,  ///< 401, 403, 404: the route, not this request, is wrong
};

[[nodiscard]] std::string_view to_string(Verdict verdict) noexcept;

/// The meaning of one answer (or of no answer).
struct Classification {
  Verdict verdict = Verdict::Retry;
  long status = 0;  ///< the HTTP status; 0 when there was no answer
  /// Retry: the server's `Retry-After` (delay-seconds or an HTTP-date), capped at
  /// ResponsePolicy::max_retry_after; 0 when it sent none.
  std::chrono::milliseconds retry_after{0};
  /// From an `application/problem+json` body (RFC 9457); empty otherwise.
  std::string problem_type;
  std::string problem_title;
  std::string problem_detail;
  /// One line for a dead letter's reason or a log: `HTTP 422 (type T): title: detail`,
  /// or `HTTP 400: <body prefix>`, or the transport error. Control characters replaced.
  std::string reason;
};

/// The classification rules as one reusable object. Plain data; classify() is const and
/// thread-safe.
struct ResponsePolicy {
  /// Upper bound on a server's Retry-After, so a hostile value cannot stall the caller.
  std::chrono::milliseconds max_retry_after{30000};
  /// Bytes of a non-problem body kept in `reason`.
  std::size_t max_reason_body = 512;

  /// Classifies an answer. `now` is the time an HTTP-date Retry-After is measured from.
  [[nodiscard]] Classification classify(
      long status, const ResponseHeaders& headers, std::string_view body,
      std::chrono::system_clock::time_point now = std::chrono::system_clock::now()) const;
  /// Classifies a call that got no answer (timeout, reset, refused): Retry, `error` as reason.
  [[nodiscard]] Classification classify_no_answer(std::string_view error) const;
};

/// A Retry-After value as a delay from `now`: delay-seconds, or an IMF-fixdate HTTP-date
/// (RFC 9110 section 10.2.3); nullopt when it is neither. A date in the past is 0.
[[nodiscard]] std::optional<std::chrono::milliseconds> parse_retry_after(
    std::string_view value, std::chrono::system_clock::time_point now);

}  // namespace idem::http
