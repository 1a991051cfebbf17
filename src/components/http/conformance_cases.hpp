#pragma once
// How each case of the conformance probe judges what it saw: pure functions of the
// answers, so every verdict and its reason can be tested without a server.
#include <string>
#include <vector>

#include "idem/http/conformance_probe.hpp"

namespace idem::http::detail {

struct CaseVerdict {
  CaseResult result = CaseResult::NotApplicable;
  std::string reason;
};

/// One line about an answer: `HTTP 201, resource pay_1`, `HTTP 422 (type T): title`,
/// `no answer: Timeout was reached`. Control characters replaced.
[[nodiscard]] std::string summarize(const ObservedAnswer& answer);

/// True for a 2xx answer.
[[nodiscard]] bool succeeded(const ObservedAnswer& answer) noexcept;

/// The same resource: equal resource ids when both have one, else equal bodies (as JSON
/// when both parse, so a key order does not matter).
[[nodiscard]] bool same_resource(const ObservedAnswer& a, const ObservedAnswer& b);

/// The resource id of a 2xx answer: the value at `id_pointer` in its JSON body (a string
/// or a number, as text) or the header `id_header`; empty when neither is set or found.
[[nodiscard]] std::string extract_resource_id(const ObservedAnswer& answer,
                                              const std::string& id_pointer,
                                              const std::string& id_header);

/// `resources_identified`: an id option is set, so a 2xx answer without an id is a fail.
[[nodiscard]] CaseVerdict judge_first_request(const ObservedAnswer& first,
                                              bool resources_identified);
[[nodiscard]] CaseVerdict judge_replay(const ObservedAnswer& first, const ObservedAnswer& replay);
[[nodiscard]] CaseVerdict judge_changed_payload(const ObservedAnswer& first,
                                                const ObservedAnswer& changed);
/// `overlapped`: the second request was sent after the first was fully sent, and answered
/// before any byte of the first's answer arrived.
[[nodiscard]] CaseVerdict judge_in_flight(const ObservedAnswer& first, const ObservedAnswer& second,
                                          bool overlapped);
[[nodiscard]] CaseVerdict judge_missing_key(const ObservedAnswer& answer);
[[nodiscard]] CaseVerdict judge_malformed_keys(const std::vector<ObservedAnswer>& answers);
[[nodiscard]] CaseVerdict judge_key_forms(const ObservedAnswer& sf_string,
                                          const ObservedAnswer& bare);
[[nodiscard]] CaseVerdict judge_replay_after_5xx(const ObservedAnswer& triggered,
                                                 const ObservedAnswer& retry);
[[nodiscard]] CaseVerdict judge_concurrency(const std::vector<ObservedAnswer>& answers);
[[nodiscard]] CaseVerdict judge_client_scoping(const ObservedAnswer& client_a,
                                               const ObservedAnswer& client_b);

/// An answer of a case, for the problem-details case, which judges the others' errors.
struct CaseAnswer {
  CaseId case_id = CaseId::FirstRequest;
  const ObservedAnswer* answer = nullptr;
};
/// Every answer with status >= 400 must be `application/problem+json` with a JSON object
/// holding a string `type` or `title` (RFC 9457). Not applicable without error answers.
[[nodiscard]] CaseVerdict judge_problem_details(const std::vector<CaseAnswer>& answers);

}  // namespace idem::http::detail
