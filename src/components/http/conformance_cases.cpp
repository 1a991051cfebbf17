#include "http/conformance_cases.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace idem::http::detail {

namespace {

using nlohmann::json;

CaseVerdict pass(std::string reason) {
  return {CaseResult::Pass, std::move(reason)};
}
CaseVerdict fail(std::string reason) {
  return {CaseResult::Fail, std::move(reason)};
}
CaseVerdict not_applicable(std::string reason) {
  return {CaseResult::NotApplicable, std::move(reason)};
}

std::string printable(std::string_view text, std::size_t limit) {
  std::string out;
  for (const char c : text.substr(0, limit)) {
    const auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7f) ? ' ' : c;
  }
  if (text.size() > limit) out += "...";
  return out;
}

// "pay_1" for a resource id, else a prefix of the body (what "the same resource" compares).
std::string identity(const ObservedAnswer& a) {
  return a.resource_id.empty() ? "body " + printable(a.body, 60) : a.resource_id;
}

bool is_conflict(long status) {
  return status == 409;
}

// "201×1, 409×7": the statuses of a group of answers, in order of status.
std::string status_counts(const std::vector<ObservedAnswer>& answers) {
  std::map<long, int> counts;
  for (const auto& a : answers) ++counts[a.status];
  std::vector<std::string> parts;
  parts.reserve(counts.size());
  for (const auto& [status, n] : counts) {
    parts.push_back(
        fmt::format("{}×{}", status == 0 ? std::string("no answer") : std::to_string(status), n));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

bool succeeded(const ObservedAnswer& answer) noexcept {
  return answer.status >= 200 && answer.status < 300;
}

std::string summarize(const ObservedAnswer& answer) {
  if (answer.status == 0) return "no answer: " + printable(answer.error, 120);
  if (succeeded(answer)) {
    return answer.resource_id.empty() ? fmt::format("HTTP {}", answer.status)
                                      : fmt::format("HTTP {}, resource {}", answer.status,
                                                    printable(answer.resource_id, 80));
  }
  // The policy's reason names a problem's type, title and detail, or a body prefix.
  ResponsePolicy policy;
  policy.max_reason_body = 120;
  return policy.classify(answer.status, answer.headers, answer.body).reason;
}

bool same_resource(const ObservedAnswer& a, const ObservedAnswer& b) {
  if (!a.resource_id.empty() && !b.resource_id.empty()) return a.resource_id == b.resource_id;
  if (a.body == b.body) return true;
  const json ja = json::parse(a.body, nullptr, false);
  const json jb = json::parse(b.body, nullptr, false);
  return !ja.is_discarded() && !jb.is_discarded() && ja == jb;
}

std::string extract_resource_id(const ObservedAnswer& answer, const std::string& id_pointer,
                                const std::string& id_header) {
  if (!succeeded(answer)) return {};
  if (!id_header.empty()) {
    const auto value = find_header(answer.headers, id_header);
    return value ? std::string(*value) : std::string();
  }
  if (id_pointer.empty()) return {};
  const json body = json::parse(answer.body, nullptr, false);
  if (body.is_discarded()) return {};
  try {
    const json::json_pointer pointer(id_pointer);
    if (!body.contains(pointer)) return {};
    const json& value = body.at(pointer);
    if (value.is_string()) return value.get<std::string>();
    if (value.is_number()) return value.dump();
  } catch (const json::exception&) {
    // A pointer that does not parse was refused when the run was planned.
  }
  return {};
}

CaseVerdict judge_first_request(const ObservedAnswer& first, bool resources_identified) {
  if (!succeeded(first)) return fail("not processed: " + summarize(first));
  if (resources_identified && first.resource_id.empty()) {
    return fail(
        fmt::format("HTTP {}, but no resource id where the options say it is", first.status));
  }
  return pass(summarize(first));
}

CaseVerdict judge_replay(const ObservedAnswer& first, const ObservedAnswer& replay) {
  const bool marked = find_header(replay.headers, "Idempotent-Replayed").has_value();
  const std::string note = marked ? "; Idempotent-Replayed header present" : "";
  if (replay.status == 0) return fail("no answer: " + printable(replay.error, 120));
  if (succeeded(replay) && !same_resource(first, replay)) {
    return fail(fmt::format("processed again: another resource ({}, first {})", identity(replay),
                            identity(first)));
  }
  if (replay.status != first.status) {
    return fail(fmt::format("HTTP {} where the first answer was {}: {}", replay.status,
                            first.status, summarize(replay)));
  }
  if (replay.body != first.body) {
    if (same_resource(first, replay) && replay.resource_id.empty()) {
      return pass(fmt::format("HTTP {}, the same JSON body (reformatted){}", replay.status, note));
    }
    return fail(
        fmt::format("HTTP {} with a body other than the first answer's{}", replay.status, note));
  }
  return pass(fmt::format("HTTP {}, the same body{}", replay.status, note));
}

CaseVerdict judge_changed_payload(const ObservedAnswer& first, const ObservedAnswer& changed) {
  if (changed.status == 422) return pass(summarize(changed));
  if (succeeded(changed)) {
    return fail(same_resource(first, changed)
                    ? fmt::format("HTTP {}: the changed request got the first answer "
                                  "(the payload is not compared), expected 422",
                                  changed.status)
                    : fmt::format("HTTP {}: the changed request was processed ({}), "
                                  "expected 422",
                                  changed.status, identity(changed)));
  }
  return fail(fmt::format("expected 422, got {}", summarize(changed)));
}

CaseVerdict judge_in_flight(const ObservedAnswer& first, const ObservedAnswer& second,
                            bool overlapped) {
  if (first.status == 0 || second.status == 0) {
    return fail(fmt::format("no answer: first {}, second {}", summarize(first), summarize(second)));
  }
  const bool first_ok = succeeded(first);
  const bool second_ok = succeeded(second);
  if ((first_ok && is_conflict(second.status)) || (second_ok && is_conflict(first.status))) {
    return pass(fmt::format("{} and {}", summarize(first), summarize(second)));
  }
  if (first_ok && second_ok) {
    if (!same_resource(first, second)) {
      return fail(
          fmt::format("two resources for one key ({}, {})", identity(first), identity(second)));
    }
    return not_applicable(
        overlapped ? "the second got the first's resource while the first's answer had not "
                     "arrived: the server had finished the first, 409 not observable"
                   : "the server answered the first before the second overlapped it "
                     "(too fast to observe)");
  }
  return fail(fmt::format("expected one 2xx and one 409, got first {}, second {}", summarize(first),
                          summarize(second)));
}

CaseVerdict judge_missing_key(const ObservedAnswer& answer) {
  if (answer.status == 400) return pass(summarize(answer));
  if (succeeded(answer)) {
    return fail(fmt::format("processed without a key ({}), expected 400", summarize(answer)));
  }
  return fail("expected 400, got " + summarize(answer));
}

CaseVerdict judge_malformed_keys(const std::vector<ObservedAnswer>& answers) {
  // Every variant is reported: a server may refuse one and accept the other.
  std::vector<std::string> seen;
  bool all_refused = true;
  for (const auto& a : answers) {
    if (a.status >= 400 && a.status < 500) {
      seen.push_back(fmt::format("{}: HTTP {}", a.label, a.status));
      continue;
    }
    all_refused = false;
    seen.push_back(succeeded(a) ? fmt::format("{}: accepted ({})", a.label, summarize(a))
                                : fmt::format("{}: expected 4xx, got {}", a.label, summarize(a)));
  }
  const std::string what = fmt::format("{}", fmt::join(seen, "; "));
  return all_refused ? pass(what) : fail(what);
}

CaseVerdict judge_key_forms(const ObservedAnswer& sf_string, const ObservedAnswer& bare) {
  if (!succeeded(sf_string)) return fail("the sf-string form was refused: " + summarize(sf_string));
  if (!succeeded(bare)) return fail("the bare form was refused: " + summarize(bare));
  if (!same_resource(sf_string, bare)) {
    return fail(fmt::format("the two forms were taken as two keys: two resources ({}, {})",
                            identity(sf_string), identity(bare)));
  }
  return pass(fmt::format("both accepted, one resource ({})", identity(sf_string)));
}

CaseVerdict judge_replay_after_5xx(const ObservedAnswer& triggered, const ObservedAnswer& retry) {
  if (triggered.status < 500 || triggered.status > 599) {
    return not_applicable("the trigger did not produce a 5xx: " + summarize(triggered));
  }
  if (succeeded(retry)) {
    return pass(fmt::format("after HTTP {}, the retry was processed: {}", triggered.status,
                            summarize(retry)));
  }
  if (retry.status == triggered.status && retry.body == triggered.body) {
    return pass(fmt::format("the stored HTTP {} answer was replayed", triggered.status));
  }
  if (is_conflict(retry.status)) {
    return fail("the key stays locked after the 5xx: " + summarize(retry));
  }
  return fail(fmt::format("after HTTP {}, the retry got {}", triggered.status, summarize(retry)));
}

CaseVerdict judge_concurrency(const std::vector<ObservedAnswer>& answers) {
  std::vector<const ObservedAnswer*> distinct;
  for (const auto& a : answers) {
    if (!succeeded(a)) {
      if (is_conflict(a.status) || a.status == 429) continue;
      return fail(
          fmt::format("{}: {} (statuses {})", a.label, summarize(a), status_counts(answers)));
    }
    const bool known = std::any_of(distinct.begin(), distinct.end(),
                                   [&](const ObservedAnswer* d) { return same_resource(*d, a); });
    if (!known) distinct.push_back(&a);
  }
  if (distinct.empty()) {
    return fail(fmt::format("none of {} requests was processed (statuses {})", answers.size(),
                            status_counts(answers)));
  }
  if (distinct.size() > 1) {
    std::vector<std::string> ids;
    ids.reserve(distinct.size());
    for (const auto* d : distinct) ids.push_back(identity(*d));
    return fail(fmt::format("{} parallel requests with one key made {} resources: {}",
                            answers.size(), distinct.size(), fmt::join(ids, ", ")));
  }
  return pass(fmt::format("one resource ({}); statuses {}", identity(*distinct.front()),
                          status_counts(answers)));
}

CaseVerdict judge_client_scoping(const ObservedAnswer& client_a, const ObservedAnswer& client_b) {
  if (!succeeded(client_a)) return fail("client A's request failed: " + summarize(client_a));
  if (succeeded(client_b)) {
    if (same_resource(client_a, client_b)) {
      return fail(
          fmt::format("client B received client A's stored answer ({})", identity(client_a)));
    }
    return pass(fmt::format("client B got a resource of its own ({})", identity(client_b)));
  }
  if (client_b.status >= 400 && client_b.status < 500) {
    return pass("client B was refused, not given A's answer: " + summarize(client_b));
  }
  return fail("client B: " + summarize(client_b));
}

CaseVerdict judge_problem_details(const std::vector<CaseAnswer>& answers) {
  // Offenders grouped by case, status and what is wrong, so eight parallel 409s are one
  // entry with a count.
  std::map<std::string, int> wrong;
  std::vector<std::string> order;
  std::size_t errors = 0;
  std::size_t offenders = 0;
  for (const auto& [case_id, answer] : answers) {
    if (answer == nullptr || answer->status < 400) continue;
    ++errors;
    std::string why;
    if (!is_problem_json(answer->headers)) {
      const auto type = find_header(answer->headers, "Content-Type");
      why = fmt::format("Content-Type {}", type ? printable(*type, 60) : std::string("missing"));
    } else {
      const json body = json::parse(answer->body, nullptr, false);
      const auto has_text = [&](const char* member) {
        return body.is_object() && body.contains(member) && body[member].is_string();
      };
      if (has_text("type") || has_text("title")) continue;
      why = "not a JSON object with a type or title";
    }
    ++offenders;
    const std::string entry =
        fmt::format("{} HTTP {}: {}", to_string(case_id), answer->status, why);
    if (wrong[entry]++ == 0) order.push_back(entry);
  }
  if (errors == 0) return not_applicable("no error answers seen");
  if (offenders == 0) return pass(fmt::format("all {} error answers", errors));
  std::vector<std::string> listed;
  for (const auto& entry : order) {
    const int n = wrong[entry];
    listed.push_back(n == 1 ? entry : fmt::format("{} (×{})", entry, n));
  }
  return fail(
      fmt::format("{} of {} error answers: {}", offenders, errors, fmt::join(listed, "; ")));
}

}  // namespace idem::http::detail
