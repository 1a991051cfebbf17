#pragma once
/// \file
/// The operators' web console (`idem console`): a small web application served by the
/// process itself, every asset compiled in (no CDN, no network access needed), showing
/// each consumer group's lag and throughput, the dead letters with a dry-run-first replay
/// (through replay_dead_letters(), the code of `idem dlq replay`), the replay audit, and
/// the dedup store's health. See docs/console.md.
///
/// Access: it listens on loopback by default. Replays need `token` (header X-Idem-Token),
/// arrive as JSON POSTs, and are refused unless the Host and Origin name the console
/// itself (no cross-site request or DNS-rebound page can send one). Everything taken from
/// a message is rendered as text.
///
/// cpp-httplib and librdkafka are linked privately: this header includes neither.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "idem/dedup_horizon.hpp"
#include "idem/dlq.hpp"
#include "idem/metrics/metrics.hpp"
#include "idem/store.hpp"

namespace idem {

struct ConsoleOptions {
  /// host:port; port 0 picks a free one. Loopback by default: a console on another
  /// address is reachable by whoever reaches that address.
  std::string listen = "127.0.0.1:8480";
  /// Required for replays (compared in constant time); empty: replay is refused.
  std::string token;
  DlqConnection kafka;  ///< the cluster (bootstrap servers, properties, step timeout)
  std::string store_url;
  StoreOptions store_options;
  std::string dlq_suffix = ".dlq";  ///< topics ending with it are dead-letter topics
  DedupHorizon horizon;             ///< what replays refuse, and what the dedup page shows
  std::chrono::milliseconds refresh{2000};
  std::vector<std::string> groups;  ///< consumer groups shown besides the store's
  std::vector<std::string> scrape;  ///< host:port of admin servers read for throughput
  /// The hosting process's metrics in Prometheus text (a console inside a consumer).
  std::function<std::string()> local_metrics;
  /// A consumer's admin port serving the console too (admin.console): with these set the
  /// console also answers /metrics, /healthz and /readyz as AdminServer does, and reads
  /// throughput from `admin_metrics`. `admin_metrics` must outlive the console.
  const Metrics* admin_metrics = nullptr;
  std::vector<ReadinessCheck> readiness;
};

/// Declares the `console.*` keys, bound to ConsoleOptions' members
/// (ConfigSchema::add<ConsoleOptions>); the cluster, the store and the horizon come from
/// the core's keys.
void declare_console_keys(SectionKeys<ConsoleOptions>& keys);

/// The console's HTTP server, serving on a thread of its own until destroyed.
class Console {
 public:
  /// Binds options.listen. \throws Error(Connection, Config) when it cannot;
  /// Error(InvalidArgument, Config) for a bad option.
  explicit Console(ConsoleOptions options);
  ~Console();
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  [[nodiscard]] int port() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idem
