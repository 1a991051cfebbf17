// The web console's request checks (src/components/console/guard.cpp), its metrics parsing and its
// input validation: pure functions, every refusal branch reached without a server.
#include "console/guard.hpp"

#include <gtest/gtest.h>

#include "console/console_api.hpp"
#include "console/sampler.hpp"

namespace idem::console {
namespace console_guard_test {

StateChangeRequest good_replay() {
  return {"POST",        "127.0.0.1:8480", "http://127.0.0.1:8480", "application/json",
          "same-origin", "s3cret"};
}

TEST(ConsoleGuard, ALoopbackConsoleAnswersOnlyItsOwnLoopbackNameAndPort) {
  const ListenAddress listen{"127.0.0.1", 8480};
  EXPECT_FALSE(check_host(listen, "127.0.0.1:8480"));
  EXPECT_FALSE(check_host(listen, "localhost:8480"));
  EXPECT_FALSE(check_host(listen, "[::1]:8480"));
  // A rebound DNS name reaching 127.0.0.1 still sends its own name.
  EXPECT_TRUE(check_host(listen, "evil.example:8480"));
  EXPECT_TRUE(check_host(listen, "127.0.0.1:9999"));
  EXPECT_TRUE(check_host(listen, "127.0.0.1"));
  EXPECT_TRUE(check_host(listen, ""));
  // Bound to every address on purpose: the operator chose who reaches it.
  EXPECT_FALSE(check_host({"0.0.0.0", 8480}, "console.internal:8480"));
}

TEST(ConsoleGuard, AReplayNeedsPostJsonSameOriginAndTheToken) {
  EXPECT_FALSE(check_state_change(good_replay(), "s3cret"));
  StateChangeRequest no_origin = good_replay();
  no_origin.origin = "";
  no_origin.fetch_site = "";
  EXPECT_FALSE(check_state_change(no_origin, "s3cret")) << "curl sends neither";

  auto refused = [](StateChangeRequest r, std::string_view token = "s3cret") {
    return check_state_change(r, token).has_value();
  };
  StateChangeRequest r = good_replay();
  r.method = "GET";
  EXPECT_TRUE(refused(r));
  r = good_replay();
  r.content_type = "text/plain";  // what a cross-site form can send without a preflight
  EXPECT_TRUE(refused(r));
  r = good_replay();
  r.content_type = "application/x-www-form-urlencoded";
  EXPECT_TRUE(refused(r));
  r = good_replay();
  r.origin = "http://evil.example";
  EXPECT_TRUE(refused(r));
  r = good_replay();
  r.fetch_site = "cross-site";
  EXPECT_TRUE(refused(r));
  r = good_replay();
  r.token = "";
  EXPECT_TRUE(refused(r));
  r = good_replay();
  r.token = "s3creT";
  EXPECT_TRUE(refused(r));
  r = good_replay();
  r.token = "s3cret-and-more";
  EXPECT_TRUE(refused(r));
  EXPECT_TRUE(refused(good_replay(), "")) << "no configured token: replay is off";
  EXPECT_EQ(check_state_change(good_replay(), "").value_or(""),
            "replay is off: no console.token is configured");
}

TEST(ConsoleGuard, ADryRunNeedsSameOriginButNoToken) {
  StateChangeRequest r = good_replay();
  r.token = "";
  EXPECT_FALSE(check_same_origin(r));
  r.origin = "http://evil.example";
  EXPECT_TRUE(check_same_origin(r));
}

TEST(ConsoleGuard, ConstantTimeEqualIsEquality) {
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "ab"));
  EXPECT_FALSE(constant_time_equal("", "a"));
}

TEST(ConsoleMetrics, CountersAreSummedPerGroupAcrossReasonsAndSources) {
  std::map<std::string, GroupCounters> counters;
  add_counters(
      "# HELP idem_consumer_events_processed_total Handler effects committed\n"
      "# TYPE idem_consumer_events_processed_total counter\n"
      "idem_consumer_events_processed_total{group=\"billing\"} 120\n"
      "idem_consumer_events_processed_total{group=\"a\\\"b\"} 3\n"
      "idem_consumer_duplicates_skipped_total{group=\"billing\"} 7\n"
      "idem_consumer_dead_lettered_total{group=\"billing\",reason=\"validation\"} 2\n"
      "idem_consumer_dead_lettered_total{reason=\"handler\",group=\"billing\"} 1\n"
      "idem_consumer_lag_records{group=\"billing\",topic=\"t\",partition=\"0\"} 99\n"
      "idem_consumer_events_processed_total{subgroup=\"x\"} 5\n"
      "garbage line\n",
      counters);
  add_counters("idem_consumer_events_processed_total{group=\"billing\"} 30\n", counters);
  ASSERT_EQ(counters.size(), 2U);
  EXPECT_EQ(counters["billing"].processed, 150);
  EXPECT_EQ(counters["billing"].duplicates, 7);
  EXPECT_EQ(counters["billing"].dead_lettered, 3);
  EXPECT_EQ(counters["a\"b"].processed, 3);
}

TEST(ConsoleMetrics, RouteCountersAreSummedPerGroupAndRoute) {
  std::map<std::string, GroupCounters> counters;
  const std::string source =
      "idem_route_events_applied_total{group=\"pay\",route=\"balance\"} 40\n"
      "idem_route_duplicates_skipped_total{group=\"pay\",route=\"balance\"} 4\n"
      "idem_route_dead_lettered_total{group=\"pay\",route=\"balance\",reason=\"a\"} 1\n"
      "idem_route_dead_lettered_total{group=\"pay\",route=\"balance\",reason=\"b\"} 2\n"
      "idem_route_call_duration_seconds_sum{group=\"pay\",route=\"charge\"} 0.5\n"
      "idem_route_call_duration_seconds_count{group=\"pay\",route=\"charge\"} 5\n"
      "idem_route_call_duration_seconds_bucket{group=\"pay\",route=\"charge\",le=\"1\"} 5\n"
      "idem_route_paused{group=\"pay\",route=\"charge\"} 0\n"
      "idem_route_events_applied_total{route=\"balance\"} 9\n";
  add_counters(source, counters);
  add_counters(
      "idem_route_events_applied_total{group=\"pay\",route=\"balance\"} 2\n"
      "idem_route_paused{group=\"pay\",route=\"charge\"} 1\n",
      counters);
  ASSERT_EQ(counters.size(), 1U);
  const auto& routes = counters["pay"].routes;
  ASSERT_EQ(routes.size(), 2U);
  EXPECT_EQ(routes.at("balance").applied, 42);
  EXPECT_EQ(routes.at("balance").duplicates, 4);
  EXPECT_EQ(routes.at("balance").dead_lettered, 3);
  EXPECT_EQ(routes.at("charge").call_seconds, 0.5);
  EXPECT_EQ(routes.at("charge").calls, 5);
  EXPECT_TRUE(routes.at("charge").paused);  // one source says so
  EXPECT_FALSE(routes.at("balance").paused);
  EXPECT_EQ(counters["pay"].processed, 0);  // route lines are not the group's totals
}

TEST(ConsoleApi, TopicAndOperatorNamesAreValidatedBeforeUse) {
  EXPECT_TRUE(valid_topic_name("orders.dlq"));
  EXPECT_TRUE(valid_topic_name("a_b-C.9"));
  EXPECT_FALSE(valid_topic_name(""));
  EXPECT_FALSE(valid_topic_name(".."));
  EXPECT_FALSE(valid_topic_name("orders dlq"));
  EXPECT_FALSE(valid_topic_name("<script>"));
  EXPECT_FALSE(valid_topic_name(std::string(250, 'a')));
  EXPECT_TRUE(valid_operator_name("Ada Lovelace"));
  EXPECT_FALSE(valid_operator_name(""));
  EXPECT_FALSE(valid_operator_name(std::string(65, 'a')));
  EXPECT_FALSE(valid_operator_name("line\nbreak"));
}

}  // namespace console_guard_test
}  // namespace idem::console
