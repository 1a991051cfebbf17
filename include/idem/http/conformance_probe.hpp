#pragma once
/// \file
/// `idem http-check`: a conformance probe for an HTTP endpoint that claims to honour
/// `Idempotency-Key` (the IETF httpapi draft "The Idempotency-Key HTTP Header Field"). Run
/// against a sandbox or test API, it sends the draft's cases (a first request, a replay, a
/// changed payload, a request while the first is in flight, a missing and a malformed key,
/// both key forms, a retry after a 5xx, parallel requests with one key, two clients with
/// one key) and judges each as pass, fail or not applicable, with what it saw.
///
/// The probe creates resources on the server (it has to: that is what it checks). Every
/// request is planned before the first is sent (plan_probe), so the plan can be listed
/// (--dry-run) and bounded (max_requests), and the report names every resource the
/// answers identified, so they can be cleaned up. docs/http-check.md describes the cases.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/http/response_policy.hpp"

namespace idem::http {

/// Header fields of a planned request, in the order they are sent.
using ProbeHeaders = std::vector<std::pair<std::string, std::string>>;

/// How the key is written in its header field. The draft defines the value as a
/// Structured Field sf-string (`"abc"`, RFC 8941); many deployed APIs take it bare (`abc`).
enum class KeyForm { SfString, Bare };

/// `key` as an RFC 8941 sf-string: in double quotes, `\` and `"` escaped with a backslash.
/// Does not check that `key` holds only printable ASCII (the probe's malformed-key case
/// relies on that). Never throws but std::bad_alloc.
[[nodiscard]] std::string format_sf_string(std::string_view key);
/// `key` written in `form`.
[[nodiscard]] std::string format_key(std::string_view key, KeyForm form);

/// The cases, in the order they run.
enum class CaseId {
  FirstRequest,    ///< a new key: the request is processed (2xx)
  Replay,          ///< the same key and body again: the first answer, replayed
  ChangedPayload,  ///< the same key, another amount: 422
  InFlight,        ///< the same key while the first request is still in flight: 409
  MissingKey,      ///< no key where the API requires one: 400
  MalformedKey,    ///< a key with a control character, an unterminated sf-string: 4xx
  KeyForms,        ///< `"k"` and `k`: both accepted, one key
  ReplayAfter5xx,  ///< after a 5xx, the same key again: processed or the 5xx replayed
  Concurrency,     ///< N parallel requests with one new key: one resource
  ClientScoping,   ///< client B with client A's key and body: never A's answer
  ProblemDetails,  ///< every error answer is application/problem+json (RFC 9457)
};

/// `first_request`, `replay`, ... (the names of the table and the JSON output).
[[nodiscard]] std::string_view to_string(CaseId id) noexcept;
/// One line: what the case sends and expects.
[[nodiscard]] std::string_view describe(CaseId id) noexcept;

enum class CaseResult { Pass, Fail, NotApplicable };

/// `pass`, `fail`, `n/a`.
[[nodiscard]] std::string_view to_string(CaseResult result) noexcept;

/// One request the probe sends (or would send: --dry-run).
struct PlannedRequest {
  CaseId case_id = CaseId::FirstRequest;
  std::string label{};  ///< e.g. "first", "client B", "parallel 3 of 8"
  std::string method{};
  std::string url{};
  ProbeHeaders headers{};  ///< everything sent: Content-Type, the key, the options' headers
  std::string body{};
};

/// The options of one run: the endpoint, how to build its requests, how to read its answers.
struct ProbeOptions {
  std::string url{};           ///< http:// or https://
  std::string method{"POST"};  ///< of every request
  ProbeHeaders headers{};      ///< sent with every request (e.g. Authorization)
  std::string content_type{"application/json"};
  /// The body of every request. Placeholders: `{{amount}}` (amount, or changed_amount in
  /// the changed-payload case), `{{unique}}` (a number new for each logical request, e.g.
  /// an order id), `{{uuid}}` (a UUID new for each logical request). Any other `{{...}}`
  /// is refused.
  std::string body_template{R"({"order_id": {{unique}}, "amount": "{{amount}}"})"};
  std::string amount{"10.00"};
  std::string changed_amount{"11.00"};
  /// When set, the changed-payload request is the body with the value at this JSON pointer
  /// replaced by changed_amount (a number stays a number); otherwise it is the template
  /// rendered with changed_amount, which then must contain `{{amount}}`.
  std::string change_pointer{};
  /// How a created resource is told from another: the JSON pointer of its id in a 2xx body
  /// (e.g. `/payment_id`), or the header carrying it (e.g. `Location`). With neither, two
  /// answers are the same resource when their bodies are equal.
  std::string id_pointer{};
  std::string id_header{};
  std::string key_header{"Idempotency-Key"};
  KeyForm key_form = KeyForm::SfString;  ///< of every key but the key-forms case's
  bool key_required = true;              ///< false: the missing-key case is not applicable
  std::size_t parallel = 8;              ///< requests of the concurrency case, 2..64
  /// The client-scoping case runs when both are set: one header each (e.g. two
  /// Authorization values); each replaces a same-named header of `headers`.
  std::optional<std::pair<std::string, std::string>> client_a_header{};
  std::optional<std::pair<std::string, std::string>> client_b_header{};
  /// A header that makes the endpoint answer 5xx (a sandbox's fault switch); the
  /// replay-after-5xx case runs only when it is set.
  std::optional<std::pair<std::string, std::string>> trigger_5xx_header{};
  std::size_t max_requests = 40;             ///< run_probe refuses a plan needing more
  std::chrono::milliseconds timeout{30000};  ///< per request, connection included
  /// Drawn at random when 0: the first `{{unique}}` number (tests fix it).
  std::uint64_t unique_base = 0;
  /// Called before each request is sent, possibly from several threads at once (the
  /// in-flight and concurrency cases). Optional; must not throw.
  std::function<void(const PlannedRequest&)> on_send{};
};

/// A case's requests, planned.
struct PlannedCase {
  CaseId id = CaseId::FirstRequest;
  bool required = true;  ///< a failure makes the run fail
  std::vector<PlannedRequest> requests{};
  /// Non-empty when the options leave the case out (it sends nothing and is n/a).
  std::string not_applicable{};
};

struct ProbePlan {
  std::vector<PlannedCase> cases{};
  /// Requests of every case: the most a run sends (a case whose precondition failed
  /// sends fewer).
  [[nodiscard]] std::size_t request_count() const noexcept;
};

/// Plans every request of a run, with fresh keys and unique values.
/// \throws Error(InvalidArgument, Config) for options that cannot work: an empty URL, a
///   body template with an unknown placeholder, no way to change the payload, a
///   change_pointer that is not in the body, parallel outside 2..64, a header name or
///   value that cannot be sent.
[[nodiscard]] ProbePlan plan_probe(const ProbeOptions& options);

/// One answer (or its absence) as the probe saw it.
struct ObservedAnswer {
  std::string label{};
  long status = 0;      ///< 0: no answer
  std::string error{};  ///< why there was no answer
  ResponseHeaders headers{};
  std::string body{};
  std::string resource_id{};  ///< by id_pointer or id_header; empty when not found
};

struct CaseReport {
  CaseId id = CaseId::FirstRequest;
  bool required = true;
  CaseResult result = CaseResult::NotApplicable;
  std::string reason{};  ///< what was seen, one line
  std::vector<ObservedAnswer> answers{};
};

/// A resource a 2xx answer identified, with the first request that got it.
struct CreatedResource {
  std::string id{};  ///< the resource id, or the body when no id option is set
  CaseId case_id = CaseId::FirstRequest;
  std::string label{};
};

struct ProbeReport {
  std::string url{};
  std::vector<CaseReport> cases{};
  std::vector<CreatedResource> created{};
  std::size_t requests_sent = 0;
  bool resources_identified = false;  ///< id_pointer or id_header was set
  /// True when no required case failed (not applicable does not fail).
  [[nodiscard]] bool required_cases_passed() const noexcept;
};

/// Sends `plan` (from plan_probe(options)) and judges every case. Blocks for the whole
/// run: each request waits at most options.timeout.
/// \throws Error(InvalidArgument, Config) when the plan needs more than
///   options.max_requests requests (nothing is sent then), or for a URL libcurl cannot use;
///   Error(Internal, Http) if libcurl cannot be initialised.
[[nodiscard]] ProbeReport run_probe(const ProbeOptions& options, const ProbePlan& plan);

/// The report as a table, the resources to clean up and a summary line.
[[nodiscard]] std::string format_report(const ProbeReport& report);
/// The report as one JSON object (docs/http-check.md shows its fields).
[[nodiscard]] std::string report_to_json(const ProbeReport& report);
/// Every planned request, readable; values of credential headers (Authorization, Cookie,
/// names with key, token or secret, but not the idempotency key) are redacted.
[[nodiscard]] std::string format_plan(const ProbePlan& plan, const ProbeOptions& options);
/// The plan as JSON, redacted as format_plan.
[[nodiscard]] std::string plan_to_json(const ProbePlan& plan, const ProbeOptions& options);

}  // namespace idem::http
