// The `demo.*` keys of `idem demo`, declared apart from the command: the CLI's schema
// (cli_schema.cpp), which every embedding that loads idem consume's configuration shares,
// knows them without linking the demo.
#include <algorithm>

#include "demo/demo.hpp"

namespace idem::cli {

namespace demo {

void declare_demo_keys(SectionKeys<DemoOptions>& keys) {
  keys.integer("demo.batch", &DemoOptions::batch, "events per consumer transaction", 1, 100000)
      .integer("demo.consumer_kills", &DemoOptions::consumer_kills,
               "consumer SIGKILLs (with restart)", 0, 100)
      .number("demo.decline", &DemoOptions::decline,
              "provider: share of orders declined in the DLQ phase", 0, 1)
      .list("demo.faults", &DemoOptions::faults,
            "fault phases: all, none, or a list of relay-kill, consumer-kill, rebalance, "
            "provider, resend, malformed, dlq-replay, offset-reset",
            {"all", "none", "relay-kill", "consumer-kill", "rebalance", "provider", "resend",
             "malformed", "dlq-replay", "offset-reset"})
      .boolean("demo.keep", &DemoOptions::keep,
               "keep the temp dir (child logs, SQLite files) after a successful run")
      .integer("demo.orders", &DemoOptions::orders, "orders to create and confirm", 10, 1'000'000)
      .integer("demo.partitions", &DemoOptions::partitions,
               "partitions of the topic on the embedded broker", 1, 1000)
      .duration("demo.provider_latency", &DemoOptions::provider_latency,
                "provider: added to every new charge, so billing's calls are in flight together", 0,
                10 * kConfigSecond)
      .integer("demo.relay_kills", &DemoOptions::relay_kills, "relay SIGKILLs", 0, 100)
      .number("demo.resend", &DemoOptions::resend_share,
              "share of outbox rows the relay publishes again", 0, 1)
      .number("demo.reset_after_commit", &DemoOptions::reset_after_commit,
              "provider: probability of a connection reset after a stored charge", 0, 0.5)
      .integer("demo.seed", &DemoOptions::seed,
               "random seed (orders, kill points, provider faults)", 0, 9.0e15)
      .duration("demo.timeout", &DemoOptions::timeout, "give up after this long",
                10 * kConfigSecond, kConfigHour)
      .number("demo.unavailable", &DemoOptions::unavailable, "provider: probability of a 503", 0,
              0.5)
      .check([](DemoOptions& o, SectionProblems& problems) {
        const auto alone = [&](const char* name) {
          return std::find(o.faults.begin(), o.faults.end(), name) != o.faults.end();
        };
        if (o.faults.size() > 1 && (alone("all") || alone("none")))
          problems.fail("demo.faults", "all and none stand alone, not in a list");
      });
}

}  // namespace demo

}  // namespace idem::cli
