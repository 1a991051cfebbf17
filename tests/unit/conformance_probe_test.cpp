// The pure parts of the Idempotency-Key conformance probe (`idem http-check`): the key's
// sf-string form, the plan (which requests, how many, refused options), each case's
// verdict from the answers it saw, and the report's JSON. The probe against real servers
// is tests/integration/http_check_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "http/conformance_cases.hpp"
#include "idem/error.hpp"
#include "idem/http/conformance_probe.hpp"

namespace idem::http {
namespace conformance_probe_test {

ObservedAnswer answer(long status, std::string resource_id = {}, std::string body = {}) {
  ObservedAnswer a;
  a.label = "test";
  a.status = status;
  a.resource_id = std::move(resource_id);
  a.body = body.empty() ? R"({"payment_id":")" + a.resource_id + R"("})" : std::move(body);
  return a;
}

ObservedAnswer problem_answer(long status) {
  ObservedAnswer a = answer(status, {}, R"({"type":"urn:x:problem","title":"no"})");
  a.headers = {{"Content-Type", "application/problem+json"}};
  return a;
}

ProbeOptions options() {
  ProbeOptions o;
  o.url = "http://127.0.0.1:9/payments";
  o.unique_base = 1000;
  return o;
}

std::string header_of(const PlannedRequest& r, const std::string& name) {
  for (const auto& [n, v] : r.headers) {
    if (n == name) return v;
  }
  return "<none>";
}

const PlannedCase& planned(const ProbePlan& plan, CaseId id) {
  for (const auto& c : plan.cases) {
    if (c.id == id) return c;
  }
  throw std::runtime_error("case not planned");
}

TEST(ConformanceProbe, FormatsKeysAsSfStringOrBare) {
  EXPECT_EQ(format_sf_string("abc"), R"("abc")");
  EXPECT_EQ(format_sf_string(R"(a"b\c)"), R"("a\"b\\c")");
  EXPECT_EQ(format_key("abc", KeyForm::SfString), R"("abc")");
  EXPECT_EQ(format_key("abc", KeyForm::Bare), "abc");
}

TEST(ConformanceProbe, PlanCountsEveryRequestOfEveryCase) {
  ProbeOptions o = options();
  EXPECT_EQ(plan_probe(o).request_count(), 18U);  // 1+1+1+2+1+2+2+8, no clients, no 5xx
  o.client_a_header = std::make_pair(std::string("Authorization"), std::string("a"));
  o.client_b_header = std::make_pair(std::string("Authorization"), std::string("b"));
  o.trigger_5xx_header = std::make_pair(std::string("X-Fail"), std::string("503"));
  EXPECT_EQ(plan_probe(o).request_count(), 22U);
  o.key_required = false;
  o.parallel = 4;
  const ProbePlan plan = plan_probe(o);
  EXPECT_EQ(plan.request_count(), 17U);
  EXPECT_FALSE(planned(plan, CaseId::MissingKey).not_applicable.empty());
}

TEST(ConformanceProbe, PlanReusesTheFirstKeyAndChangesOnlyTheAmount) {
  const ProbePlan plan = plan_probe(options());
  const PlannedRequest& first = planned(plan, CaseId::FirstRequest).requests.at(0);
  const PlannedRequest& replay = planned(plan, CaseId::Replay).requests.at(0);
  const PlannedRequest& changed = planned(plan, CaseId::ChangedPayload).requests.at(0);
  EXPECT_EQ(first.body, R"({"order_id": 1000, "amount": "10.00"})");
  EXPECT_EQ(header_of(first, "Idempotency-Key").front(), '"');
  EXPECT_EQ(header_of(replay, "Idempotency-Key"), header_of(first, "Idempotency-Key"));
  EXPECT_EQ(replay.body, first.body);
  EXPECT_EQ(header_of(changed, "Idempotency-Key"), header_of(first, "Idempotency-Key"));
  EXPECT_EQ(changed.body, R"({"order_id": 1000, "amount": "11.00"})");
  EXPECT_EQ(header_of(planned(plan, CaseId::MissingKey).requests.at(0), "Idempotency-Key"),
            "<none>");
  const auto& forms = planned(plan, CaseId::KeyForms).requests;
  EXPECT_EQ(header_of(forms.at(0), "Idempotency-Key"),
            format_sf_string(header_of(forms.at(1), "Idempotency-Key")));
  const auto& malformed = planned(plan, CaseId::MalformedKey).requests;
  EXPECT_NE(header_of(malformed.at(0), "Idempotency-Key").find('\x01'), std::string::npos);
  // Each logical request has its own unique value and key.
  EXPECT_NE(planned(plan, CaseId::InFlight).requests.at(0).body, first.body);
}

TEST(ConformanceProbe, ChangePointerKeepsANumberANumber) {
  ProbeOptions o = options();
  o.body_template = R"({"amount": 10, "ref": "{{uuid}}"})";
  o.change_pointer = "/amount";
  o.changed_amount = "11";
  const ProbePlan plan = plan_probe(o);
  const auto changed =
      nlohmann::json::parse(planned(plan, CaseId::ChangedPayload).requests[0].body);
  EXPECT_EQ(changed.at("amount"), 11);
}

TEST(ConformanceProbe, PlanRefusesOptionsThatCannotWork) {
  ProbeOptions o = options();
  o.body_template = R"({"x": "{{nope}}"})";
  EXPECT_THROW(static_cast<void>(plan_probe(o)), Error);
  o.body_template = R"({"x": 1})";  // nothing to change for the 422 case
  EXPECT_THROW(static_cast<void>(plan_probe(o)), Error);
  o.change_pointer = "/missing";
  EXPECT_THROW(static_cast<void>(plan_probe(o)), Error);
  o = options();
  o.parallel = 1;
  EXPECT_THROW(static_cast<void>(plan_probe(o)), Error);
  o = options();
  o.headers = {{"X-Bad", "a\r\nb"}};
  EXPECT_THROW(static_cast<void>(plan_probe(o)), Error);
}

TEST(ConformanceProbe, RunRefusesAPlanOverMaxRequests) {
  ProbeOptions o = options();
  o.max_requests = 17;
  EXPECT_THROW(static_cast<void>(run_probe(o, plan_probe(o))), Error);
}

TEST(ConformanceProbe, ReplayPassesOnlyWithTheSameStatusAndBody) {
  ObservedAnswer first = answer(201, "pay_1");
  ObservedAnswer replay = first;
  replay.headers = {{"Idempotent-Replayed", "true"}};
  auto v = detail::judge_replay(first, replay);
  EXPECT_EQ(v.result, CaseResult::Pass);
  EXPECT_NE(v.reason.find("Idempotent-Replayed"), std::string::npos);
  v = detail::judge_replay(first, answer(201, "pay_2"));
  EXPECT_EQ(v.result, CaseResult::Fail);
  EXPECT_NE(v.reason.find("processed again"), std::string::npos);
  EXPECT_EQ(detail::judge_replay(first, answer(200, "pay_1")).result, CaseResult::Fail);
}

TEST(ConformanceProbe, ChangedPayloadNeeds422) {
  const ObservedAnswer first = answer(201, "pay_1");
  EXPECT_EQ(detail::judge_changed_payload(first, problem_answer(422)).result, CaseResult::Pass);
  const auto replayed = detail::judge_changed_payload(first, answer(200, "pay_1"));
  EXPECT_EQ(replayed.result, CaseResult::Fail);
  EXPECT_NE(replayed.reason.find("got the first answer"), std::string::npos);
  EXPECT_EQ(detail::judge_changed_payload(first, problem_answer(400)).result, CaseResult::Fail);
}

TEST(ConformanceProbe, InFlightIsNotApplicableWhenNoOverlapWasObserved) {
  const ObservedAnswer a = answer(201, "pay_1");
  EXPECT_EQ(detail::judge_in_flight(a, problem_answer(409), true).result, CaseResult::Pass);
  EXPECT_EQ(detail::judge_in_flight(a, a, false).result, CaseResult::NotApplicable);
  EXPECT_EQ(detail::judge_in_flight(a, a, true).result, CaseResult::NotApplicable);
  const auto twice = detail::judge_in_flight(a, answer(201, "pay_2"), false);
  EXPECT_EQ(twice.result, CaseResult::Fail);
  EXPECT_NE(twice.reason.find("two resources"), std::string::npos);
  EXPECT_EQ(detail::judge_in_flight(a, answer(0), true).result, CaseResult::Fail);
}

TEST(ConformanceProbe, KeyCasesJudgeStatuses) {
  EXPECT_EQ(detail::judge_missing_key(problem_answer(400)).result, CaseResult::Pass);
  EXPECT_EQ(detail::judge_missing_key(answer(201, "pay_1")).result, CaseResult::Fail);
  EXPECT_EQ(detail::judge_malformed_keys({problem_answer(400), problem_answer(422)}).result,
            CaseResult::Pass);
  EXPECT_EQ(detail::judge_malformed_keys({problem_answer(400), answer(201, "pay_1")}).result,
            CaseResult::Fail);
  EXPECT_EQ(detail::judge_key_forms(answer(201, "pay_1"), answer(200, "pay_1")).result,
            CaseResult::Pass);
  EXPECT_EQ(detail::judge_key_forms(answer(201, "pay_1"), answer(201, "pay_2")).result,
            CaseResult::Fail);
  EXPECT_EQ(detail::judge_key_forms(answer(201, "pay_1"), problem_answer(400)).result,
            CaseResult::Fail);
}

TEST(ConformanceProbe, ReplayAfter5xxAcceptsProcessingOrTheStoredError) {
  EXPECT_EQ(detail::judge_replay_after_5xx(answer(201, "pay_1"), answer(201, "pay_1")).result,
            CaseResult::NotApplicable);
  EXPECT_EQ(detail::judge_replay_after_5xx(problem_answer(503), answer(201, "pay_1")).result,
            CaseResult::Pass);
  EXPECT_EQ(detail::judge_replay_after_5xx(problem_answer(503), problem_answer(503)).result,
            CaseResult::Pass);
  EXPECT_EQ(detail::judge_replay_after_5xx(problem_answer(503), problem_answer(409)).result,
            CaseResult::Fail);
}

TEST(ConformanceProbe, ConcurrencyPassesWithExactlyOneResource) {
  std::vector<ObservedAnswer> answers{answer(201, "pay_1"), problem_answer(409),
                                      answer(201, "pay_1")};
  EXPECT_EQ(detail::judge_concurrency(answers).result, CaseResult::Pass);
  answers.push_back(answer(201, "pay_2"));
  const auto two = detail::judge_concurrency(answers);
  EXPECT_EQ(two.result, CaseResult::Fail);
  EXPECT_NE(two.reason.find("made 2 resources"), std::string::npos);
  EXPECT_EQ(detail::judge_concurrency({problem_answer(409), problem_answer(409)}).result,
            CaseResult::Fail);
}

TEST(ConformanceProbe, ClientBMustNeverGetClientAsAnswer) {
  const ObservedAnswer a = answer(201, "pay_1");
  EXPECT_EQ(detail::judge_client_scoping(a, answer(201, "pay_2")).result, CaseResult::Pass);
  EXPECT_EQ(detail::judge_client_scoping(a, problem_answer(403)).result, CaseResult::Pass);
  const auto leaked = detail::judge_client_scoping(a, a);
  EXPECT_EQ(leaked.result, CaseResult::Fail);
  EXPECT_NE(leaked.reason.find("client A's stored answer"), std::string::npos);
}

TEST(ConformanceProbe, ProblemDetailsNeedTheMediaTypeAndATypeOrTitle) {
  const ObservedAnswer good = problem_answer(422);
  ObservedAnswer plain = answer(400, {}, R"({"error":"bad"})");
  plain.headers = {{"Content-Type", "application/json"}};
  ObservedAnswer untitled = answer(409, {}, R"({"detail":"busy"})");
  untitled.headers = {{"content-type", "application/problem+json; charset=utf-8"}};
  const ObservedAnswer ok = answer(201, "pay_1");
  EXPECT_EQ(detail::judge_problem_details({{CaseId::ChangedPayload, &good}}).result,
            CaseResult::Pass);
  EXPECT_EQ(detail::judge_problem_details({{CaseId::FirstRequest, &ok}}).result,
            CaseResult::NotApplicable);
  const auto bad = detail::judge_problem_details({{CaseId::ChangedPayload, &good},
                                                  {CaseId::MissingKey, &plain},
                                                  {CaseId::InFlight, &untitled}});
  EXPECT_EQ(bad.result, CaseResult::Fail);
  EXPECT_NE(bad.reason.find("2 of 3"), std::string::npos) << bad.reason;
}

TEST(ConformanceProbe, ResourceIdsComeFromAPointerOrAHeader) {
  ObservedAnswer a = answer(201, {}, R"({"data":{"id":42}})");
  a.headers = {{"Location", "/payments/7"}};
  EXPECT_EQ(detail::extract_resource_id(a, "/data/id", ""), "42");
  EXPECT_EQ(detail::extract_resource_id(a, "", "location"), "/payments/7");
  EXPECT_EQ(detail::extract_resource_id(a, "/nope", ""), "");
  EXPECT_EQ(detail::extract_resource_id(problem_answer(400), "/type", ""), "");
}

TEST(ConformanceProbe, ReportJsonNamesCasesResultsAndResources) {
  ProbeReport report;
  report.url = "http://x/payments";
  report.requests_sent = 3;
  report.resources_identified = true;
  report.cases.push_back(
      {CaseId::FirstRequest, true, CaseResult::Pass, "HTTP 201", {answer(201, "pay_1")}});
  report.cases.push_back({CaseId::ChangedPayload, true, CaseResult::Fail, "expected 422", {}});
  report.cases.push_back(
      {CaseId::ClientScoping, true, CaseResult::NotApplicable, "no clients", {}});
  report.created.push_back({"pay_1", CaseId::FirstRequest, "first"});
  EXPECT_FALSE(report.required_cases_passed());
  const auto json = nlohmann::json::parse(report_to_json(report));
  EXPECT_EQ(json.at("conforms"), false);
  EXPECT_EQ(json.at("requests_sent"), 3);
  EXPECT_EQ(json.at("cases").at(1).at("case"), "changed_payload");
  EXPECT_EQ(json.at("cases").at(1).at("result"), "fail");
  EXPECT_EQ(json.at("cases").at(2).at("result"), "n/a");
  EXPECT_EQ(json.at("cases").at(0).at("answers").at(0).at("resource_id"), "pay_1");
  EXPECT_EQ(json.at("resources_created").at(0).at("id"), "pay_1");
  const std::string table = format_report(report);
  EXPECT_NE(table.find("DOES NOT CONFORM"), std::string::npos);
  EXPECT_NE(table.find("pay_1"), std::string::npos);
}

TEST(ConformanceProbe, DryRunListingRedactsCredentialsButShowsKeys) {
  ProbeOptions o = options();
  o.headers = {{"Authorization", "Bearer secret-token"}, {"X-Trace", "t1"}};
  const ProbePlan plan = plan_probe(o);
  for (const std::string& text : {format_plan(plan, o), plan_to_json(plan, o)}) {
    EXPECT_EQ(text.find("secret-token"), std::string::npos);
    EXPECT_NE(text.find("<redacted>"), std::string::npos);
    EXPECT_NE(text.find("Idempotency-Key"), std::string::npos);
    EXPECT_NE(text.find("t1"), std::string::npos);
  }
  EXPECT_NE(format_plan(plan, o).find("\\x01"), std::string::npos) << "the control character shows";
  const auto json = nlohmann::json::parse(plan_to_json(plan, o));
  EXPECT_EQ(json.at("requests"), 18);
}

}  // namespace conformance_probe_test
}  // namespace idem::http
