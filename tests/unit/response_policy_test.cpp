// http::ResponsePolicy: every row of its table (idem/http/response_policy.hpp), Retry-After
// in both forms and capped, and problem details read from application/problem+json.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "idem/http/response_policy.hpp"

namespace idem::http {
namespace response_policy_test {

using namespace std::chrono_literals;

TEST(ResponsePolicy, ClassesEveryAnswerAsTheIdempotencyKeyDraftExpects) {
  const ResponsePolicy policy;
  const struct {
    long status;
    Verdict verdict;
  } cases[] = {
      {200, Verdict::Done},
      {201, Verdict::Done},
      {409, Verdict::Retry},
      {429, Verdict::Retry},
      {500, Verdict::Retry},
      {503, Verdict::Retry},
      {400, Verdict::DeadLetter},
      {422, Verdict::DeadLetter},
      {402, Verdict::DeadLetter},
      {302, Verdict::DeadLetter},
      {401, Verdict::RouteMisconfigured},
      {403, Verdict::RouteMisconfigured},
      {404, Verdict::RouteMisconfigured},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(policy.classify(c.status, {}, "").verdict, c.verdict) << c.status;
  }
  const Classification none = policy.classify_no_answer("Connection reset by peer");
  EXPECT_EQ(none.verdict, Verdict::Retry);
  EXPECT_EQ(none.reason, "no answer: Connection reset by peer");
}

TEST(ResponsePolicy, HonoursRetryAfterInSecondsAndAsADateCapped) {
  ResponsePolicy policy;
  policy.max_retry_after = 10s;
  EXPECT_EQ(policy.classify(503, {{"retry-after", "3"}}, "").retry_after, 3s);
  EXPECT_EQ(policy.classify(429, {{"Retry-After", "3600"}}, "").retry_after, 10s);
  const auto now = std::chrono::system_clock::from_time_t(784111777);  // 1994-11-06 08:49:37
  EXPECT_EQ(
      policy.classify(503, {{"Retry-After", "Sun, 06 Nov 1994 08:49:42 GMT"}}, "", now).retry_after,
      5s);
  EXPECT_EQ(policy.classify(503, {{"Retry-After", "soon"}}, "").retry_after, 0s);
  EXPECT_EQ(policy.classify(400, {{"Retry-After", "3"}}, "").retry_after, 0s);  // not a retry
}

TEST(ResponsePolicy, ReadsProblemDetailsOrKeepsAPrefixOfTheBody) {
  ResponsePolicy policy;
  policy.max_reason_body = 8;
  const Classification problem = policy.classify(
      422, {{"Content-Type", "application/problem+json; charset=utf-8"}},
      R"({"type":"https://example.com/key-reused","title":"Idempotency-Key reused",)"
      R"("detail":"another payload\nwas sent"})");
  EXPECT_EQ(problem.verdict, Verdict::DeadLetter);
  EXPECT_EQ(problem.problem_type, "https://example.com/key-reused");
  EXPECT_EQ(problem.problem_title, "Idempotency-Key reused");
  EXPECT_EQ(problem.reason,
            "HTTP 422 (https://example.com/key-reused): Idempotency-Key reused: another "
            "payload was sent");
  const Classification plain = policy.classify(400, {}, "missing\r\nkey header");
  EXPECT_EQ(plain.reason, "HTTP 400: missing ...");
}

}  // namespace response_policy_test
}  // namespace idem::http
