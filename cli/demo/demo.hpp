#pragma once
// `idem demo`: the reference system end to end, with the duplicate sources of
// DUP-SOURCES and the faults injected, then audited. See docs/demo.md.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "idem/config_keys.hpp"

namespace idem::cli::demo {

/// Which fault phases run (all by default; `--faults` picks a subset).
struct FaultMix {
  bool relay_kills = true;     // SIGKILL the relay at random points, restart it
  bool consumer_kills = true;  // SIGKILL consumers at random points, restart them
  bool rebalance = true;       // SIGKILL one of the two billing consumers for good
  bool provider = true;        // provider: connection reset after commit, 503s
  bool resend = true;          // producer resend: outbox rows published again
  bool malformed = true;       // malformed messages -> DLQ with their reason
  bool dlq_replay = true;      // declines -> DLQ; cause fixed; `idem dlq replay`
  bool offset_reset = true;    // billing group rewound to the earliest offset

  /// Parses "all", "none" or a comma list of relay-kill, consumer-kill, rebalance,
  /// provider, resend, malformed, dlq-replay, offset-reset. Throws idem::Error
  /// (InvalidArgument, Config) naming an unknown entry.
  static FaultMix parse(const std::vector<std::string>& list);
};

struct DemoOptions {
  std::string db;       // empty: a fresh SQLite file in a temp dir
  std::string brokers;  // empty: the embedded dev broker, in this process
  int orders = 300;
  int partitions = 6;  // of the topic, when the demo creates it (embedded broker)
  std::size_t batch = 20;
  std::uint64_t seed = 42;
  std::chrono::seconds timeout{120};
  std::vector<std::string> faults{"all"};
  int relay_kills = 3;
  int consumer_kills = 2;
  double resend_share = 0.10;        // share of published outbox rows published again
  double reset_after_commit = 0.05;  // provider faults while the kills run
  double unavailable = 0.05;
  double decline = 0.20;  // provider declines in the DLQ phase
  std::chrono::milliseconds provider_latency{
      20};            // every new charge waits this long: calls overlap
  bool keep = false;  // keep the temp dir (logs, SQLite files)
};

/// Declares the `demo.*` keys, bound to DemoOptions (its store and brokers come from
/// store.url and kafka.bootstrap.servers).
void declare_demo_keys(SectionKeys<DemoOptions>& keys);

/// Runs the demo; returns the process exit code (0: the invariant holds).
int run_demo(const DemoOptions& options);

}  // namespace idem::cli::demo
