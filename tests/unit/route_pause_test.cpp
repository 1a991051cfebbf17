// http::RoutePause, the one rule for a route whose calls are refused alike (401, 403, 404),
// and the billing consumer's call phase deciding by it as configured routes do: every charge
// refused pauses billing and retries the orders instead of dead-lettering them; a refusal
// among successes is that order's own.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/http/route_pause.hpp"
#include "idem/reference/billing.hpp"
#include "support/waited_completion.hpp"

namespace idem {
namespace route_pause_test {

using http::RoutePause;
using Refusal = http::RoutePause::Refusal;

/// The observer's calls, in order.
struct Changes {
  std::vector<std::string> seen;
  RoutePause::Observer observer() {
    return [this](bool paused, std::string_view why) {
      seen.push_back(fmt::format("{} {}", paused ? "paused" : "resumed", why));
    };
  }
};

TEST(RoutePauseTest, EveryCallRefusedPausesAndTheFirstSuccessResumes) {
  Changes changes;
  RoutePause pause(changes.observer());
  const RoutePause::Start first = pause.at_start();
  const RoutePause::Start second = pause.at_start();
  EXPECT_EQ(pause.refused(first, "HTTP 401: bad token"), Refusal::Paused);
  EXPECT_EQ(pause.paused_reason(), "HTTP 401: bad token");
  EXPECT_EQ(pause.refused(second, "HTTP 401: bad token"), Refusal::Paused);
  // A call sent while paused, answered after the route came back: tried again.
  const RoutePause::Start while_paused = pause.at_start();
  EXPECT_TRUE(while_paused.paused);
  pause.succeeded();
  EXPECT_EQ(pause.paused_reason(), "");
  EXPECT_EQ(pause.refused(while_paused, "HTTP 401: bad token"), Refusal::AfterRecovery);
  // Sent while the route runs, refused while another succeeds: the request's own.
  const RoutePause::Start running = pause.at_start();
  pause.succeeded();
  EXPECT_EQ(pause.refused(running, "HTTP 404: no such account"), Refusal::RequestsOwn);
  EXPECT_EQ(pause.paused_reason(), "");
  EXPECT_EQ(changes.seen,
            (std::vector<std::string>{"paused HTTP 401: bad token", "resumed a call succeeded"}));
}

http::CallResult answered(long status, http::Verdict verdict, http::CallStatus call_status) {
  http::CallResult r;
  r.status = call_status;
  r.http_status = status;
  r.classification.verdict = verdict;
  r.classification.status = status;
  r.classification.reason = fmt::format("HTTP {}", status);
  r.body = R"({"payment_id":"pay-1"})";
  return r;
}

/// complete_charge's outcome for `result` of a charge sent at `started`, and its reason.
std::pair<Outcome, std::string> complete(const http::CallResult& result, RoutePause& pause,
                                         RoutePause::Start started) {
  auto port = std::make_shared<test::WaitedCompletion>();
  complete_charge(result, test::completion_into<BillingCharge>(port), pause, started);
  const auto outcome = port->wait();
  EXPECT_TRUE(outcome.has_value());
  return {outcome.value_or(Outcome::Retry), port->reason()};
}

TEST(RoutePauseTest, BillingRetriesOrdersWhileEveryChargeIsRefused) {
  Changes changes;
  RoutePause pause(changes.observer());
  const auto refused =
      answered(401, http::Verdict::RouteMisconfigured, http::CallStatus::Permanent);
  const auto charged = answered(200, http::Verdict::Done, http::CallStatus::Success);
  const RoutePause::Start first = pause.at_start();
  const auto [outcome, reason] = complete(refused, pause, first);
  EXPECT_EQ(outcome, Outcome::Retry) << "an order dead-lettered for the provider's credentials";
  EXPECT_NE(reason.find("billing paused"), std::string::npos) << reason;
  EXPECT_EQ(complete(charged, pause, pause.at_start()).first, Outcome::Done);
  // Refused while other charges succeed: that order's own answer.
  const RoutePause::Start running = pause.at_start();
  EXPECT_EQ(complete(charged, pause, pause.at_start()).first, Outcome::Done);
  EXPECT_EQ(complete(answered(404, http::Verdict::RouteMisconfigured, http::CallStatus::Permanent),
                     pause, running)
                .first,
            Outcome::DeadLetter);
  // Any other permanent answer is the order's, paused or not.
  EXPECT_EQ(complete(answered(422, http::Verdict::DeadLetter, http::CallStatus::Permanent), pause,
                     pause.at_start())
                .first,
            Outcome::DeadLetter);
  EXPECT_EQ(changes.seen.size(), 2u);
}

}  // namespace route_pause_test
}  // namespace idem
