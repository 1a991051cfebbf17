// `idem http-check`, the Idempotency-Key conformance probe, against real servers on
// loopback: a small endpoint that follows the draft (every case passes, apart from idem's
// own provider), endpoints broken on purpose (each relevant case fails, with a reason that
// says why), the CLI's exit codes, JSON and dry run, and `idem provider` as a real process.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "idem/error.hpp"
#include "idem/http/conformance_probe.hpp"
#include "support/cli_run.hpp"
#include "support/nonconforming_servers.hpp"
#include "support/provider_process.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"

namespace idem::http {
namespace http_check_test {

using test::EndpointBehaviour;
using test::PaymentEndpoint;

std::string header_value(const PlannedRequest& request, std::string_view name) {
  for (const auto& [n, v] : request.headers) {
    if (n == name) return v;
  }
  return {};
}

ProbeOptions options_for(const std::string& url) {
  ProbeOptions o;
  o.url = url;
  o.id_pointer = "/payment_id";
  o.client_a_header = std::make_pair(std::string("Authorization"), std::string("Bearer client-a"));
  o.client_b_header = std::make_pair(std::string("Authorization"), std::string("Bearer client-b"));
  o.timeout = std::chrono::seconds(60);
  return o;
}

// Holds the in-flight case's first request at `endpoint` until its second arrives.
void hold_in_flight_case(ProbeOptions& o, PaymentEndpoint& endpoint) {
  o.on_send = [&endpoint, key_header = o.key_header](const PlannedRequest& r) {
    if (r.case_id == CaseId::InFlight && r.label == "first") {
      endpoint.hold_until_duplicate_arrives(header_value(r, key_header));
    }
  };
}

ProbeReport probe(const ProbeOptions& o) {
  return run_probe(o, plan_probe(o));
}

const CaseReport& case_of(const ProbeReport& report, CaseId id) {
  const auto found = std::find_if(report.cases.begin(), report.cases.end(),
                                  [id](const CaseReport& c) { return c.id == id; });
  if (found == report.cases.end()) throw std::runtime_error("case missing from the report");
  return *found;
}

TEST(HttpCheck, EveryCasePassesAgainstAConformingEndpoint) {
  PaymentEndpoint endpoint;
  ProbeOptions o = options_for(endpoint.url());
  o.trigger_5xx_header = std::make_pair(std::string("X-Fail"), std::string("503"));
  hold_in_flight_case(o, endpoint);
  const ProbeReport report = probe(o);
  for (const auto& c : report.cases) {
    EXPECT_EQ(c.result, CaseResult::Pass) << to_string(c.id) << ": " << c.reason;
  }
  EXPECT_TRUE(report.required_cases_passed());
  EXPECT_EQ(report.requests_sent, plan_probe(o).request_count());
  // Every payment the endpoint made is named for clean-up, each once.
  EXPECT_EQ(report.created.size(), endpoint.payments_created());
  EXPECT_NE(case_of(report, CaseId::Replay).reason.find("Idempotent-Replayed"), std::string::npos);
}

TEST(HttpCheck, EndpointWithoutDedupFailsEveryCaseAboutOneKey) {
  PaymentEndpoint endpoint(EndpointBehaviour{.deduplicates = false});
  const ProbeReport report = probe(options_for(endpoint.url()));
  EXPECT_FALSE(report.required_cases_passed());
  const auto expect_fail = [&](CaseId id, std::string_view why) {
    const CaseReport& c = case_of(report, id);
    EXPECT_EQ(c.result, CaseResult::Fail) << to_string(id) << ": " << c.reason;
    EXPECT_NE(c.reason.find(why), std::string::npos) << to_string(id) << ": " << c.reason;
  };
  expect_fail(CaseId::Replay, "processed again");
  expect_fail(CaseId::ChangedPayload, "was processed");
  expect_fail(CaseId::InFlight, "two resources for one key");
  expect_fail(CaseId::KeyForms, "taken as two keys");
  expect_fail(CaseId::Concurrency, "made 8 resources");
  // A key still has to be present and well-formed at this endpoint.
  EXPECT_EQ(case_of(report, CaseId::MissingKey).result, CaseResult::Pass);
  EXPECT_EQ(case_of(report, CaseId::MalformedKey).result, CaseResult::Pass);
  EXPECT_EQ(report.created.size(), endpoint.payments_created());
}

TEST(HttpCheck, EndpointIgnoringThePayloadFailsTheChangedPayloadCase) {
  PaymentEndpoint endpoint(EndpointBehaviour{.compares_payload = false});
  ProbeOptions o = options_for(endpoint.url());
  hold_in_flight_case(o, endpoint);
  const ProbeReport report = probe(o);
  const CaseReport& changed = case_of(report, CaseId::ChangedPayload);
  EXPECT_EQ(changed.result, CaseResult::Fail);
  EXPECT_NE(changed.reason.find("got the first answer"), std::string::npos) << changed.reason;
  EXPECT_NE(changed.reason.find("expected 422"), std::string::npos) << changed.reason;
  EXPECT_EQ(case_of(report, CaseId::Replay).result, CaseResult::Pass);
  EXPECT_FALSE(report.required_cases_passed());
}

TEST(HttpCheck, EndpointSharingKeysAcrossClientsFailsClientScoping) {
  PaymentEndpoint endpoint(EndpointBehaviour{.scopes_keys_by_client = false});
  ProbeOptions o = options_for(endpoint.url());
  hold_in_flight_case(o, endpoint);
  const ProbeReport report = probe(o);
  const CaseReport& scoping = case_of(report, CaseId::ClientScoping);
  EXPECT_EQ(scoping.result, CaseResult::Fail);
  EXPECT_NE(scoping.reason.find("client B received client A's stored answer"), std::string::npos)
      << scoping.reason;
  EXPECT_FALSE(report.required_cases_passed());
}

// A server that makes the second request wait for the first and then replays it never
// shows a 409: the in-flight case cannot pass there, and reports n/a rather than guessing.
TEST(HttpCheck, InFlightIsNotApplicableWhereTheServerQueuesTheSecondRequest) {
  PaymentEndpoint endpoint(EndpointBehaviour{.queues_requests_in_flight = true});
  ProbeOptions o = options_for(endpoint.url());
  hold_in_flight_case(o, endpoint);
  const ProbeReport report = probe(o);
  const CaseReport& in_flight = case_of(report, CaseId::InFlight);
  EXPECT_EQ(in_flight.result, CaseResult::NotApplicable) << in_flight.reason;
  EXPECT_EQ(case_of(report, CaseId::Concurrency).result, CaseResult::Pass);
  EXPECT_TRUE(report.required_cases_passed()) << "n/a does not fail a run";
}

TEST(HttpCheck, RefusesAPlanOverTheRequestBoundAndSendsNothing) {
  PaymentEndpoint endpoint;
  ProbeOptions o = options_for(endpoint.url());
  o.max_requests = 5;
  EXPECT_THROW(static_cast<void>(probe(o)), Error);
  EXPECT_EQ(endpoint.payments_created(), 0U);
}

TEST(HttpCheckCli, ExitCodesJsonAndDryRun) {
  IDEM_REQUIRE_CLI();
  PaymentEndpoint conforming;
  const auto conforming_run = test::run_to_completion(
      IDEM_CLI_PATH, {"http-check", conforming.url(), "--id-pointer", "/payment_id", "--json"});
  EXPECT_EQ(conforming_run.status, 0) << conforming_run.output;
  const auto json = nlohmann::json::parse(conforming_run.output, nullptr, false);
  ASSERT_TRUE(json.is_object()) << conforming_run.output;
  EXPECT_EQ(json.value("conforms", false), true);
  EXPECT_FALSE(json.at("resources_created").empty());

  PaymentEndpoint no_dedup(EndpointBehaviour{.deduplicates = false});
  const auto failing = test::run_to_completion(
      IDEM_CLI_PATH, {"http-check", no_dedup.url(), "--id-pointer", "/payment_id"});
  EXPECT_EQ(failing.status, 1) << failing.output;
  EXPECT_NE(failing.output.find("DOES NOT CONFORM"), std::string::npos) << failing.output;
  EXPECT_NE(failing.output.find("resources created"), std::string::npos) << failing.output;

  PaymentEndpoint untouched;
  const auto dry = test::run_to_completion(
      IDEM_CLI_PATH,
      {"http-check", untouched.url(), "--dry-run", "-H", "Authorization: Bearer s3"});
  EXPECT_EQ(dry.status, 0) << dry.output;
  EXPECT_NE(dry.output.find("Idempotency-Key: \""), std::string::npos) << dry.output;
  EXPECT_EQ(dry.output.find("Bearer s3"), std::string::npos) << "credentials are redacted";
  const auto over_bound = test::run_to_completion(
      IDEM_CLI_PATH, {"http-check", untouched.url(), "--max-requests", "3"});
  EXPECT_EQ(over_bound.status, 2) << over_bound.output;
  EXPECT_EQ(untouched.payments_created(), 0U);
}

// The reference provider follows the draft: every case the probe can observe passes.
TEST(HttpCheckProvider, EveryCasePassesAgainstIdemProvider) {
  IDEM_REQUIRE_CLI();
  // The latency keeps each new charge in flight long enough for a second request to meet
  // it (409); it is no timing assertion: an unobserved overlap would be n/a, not a pass.
  test::ProviderProcess provider(IDEM_CLI_PATH, test::fresh_sqlite_url(), {"--latency", "3000ms"});
  ProbeOptions o = options_for(provider.url() + "/payments/charge");
  const ProbeReport report = probe(o);
  for (const auto& c : report.cases) {
    if (c.id == CaseId::ReplayAfter5xx) {
      EXPECT_EQ(c.result, CaseResult::NotApplicable) << "the provider has no per-request 5xx";
      continue;
    }
    EXPECT_EQ(c.result, CaseResult::Pass) << to_string(c.id) << ": " << c.reason;
  }
  EXPECT_TRUE(report.required_cases_passed());
}

}  // namespace http_check_test
}  // namespace idem::http
