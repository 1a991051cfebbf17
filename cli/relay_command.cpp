// `idem relay`: publishes outbox rows (library: idem::Relay). Prints `ready` once its
// connections are open, then one `progress ...` line per progress interval; logs go to
// stderr. Stops on SIGTERM/SIGINT after the batches in flight were acknowledged and
// marked (bounded by --shutdown-timeout-ms).
#include <signal.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "idem/error.hpp"
#include "idem/relay.hpp"

namespace idem::cli {
namespace {

std::atomic<Relay*> g_relay{nullptr};

extern "C" void relay_stop_handler(int /*sig*/) {
  if (Relay* r = g_relay.load()) r->request_stop();  // only an atomic store
}

}  // namespace

void register_relay(CLI::App& app, ExitCode& exit_code) {
  struct Options {
    std::string db;
    std::string bootstrap;
    std::size_t batch_size = 1000;
    std::size_t in_flight = 8;
    int poll_interval_ms = 500;
    int rebalance_ms = 2000;
    double retention_hours = 24;
    int progress_ms = 5000;
    int shutdown_timeout_ms = 10'000;
    bool no_listen = false;
    bool until_empty = false;
    int timeout_s = 600;
    std::vector<std::string> kafka;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "relay", "Publish outbox rows to Kafka with an idempotent producer, in order per key");
  cmd->add_option("--db", opts->db, "Store URL: postgresql://... or sqlite:///path.db")->required();
  cmd->add_option("--brokers", opts->bootstrap, "Kafka bootstrap servers (host:port,...)")->required();
  cmd->add_option("--batch-size", opts->batch_size, "Rows per claim")
      ->check(CLI::Range(1, 100'000))->capture_default_str();
  cmd->add_option("--in-flight", opts->in_flight, "Batches produced but not yet marked")
      ->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_option("--poll-interval-ms", opts->poll_interval_ms, "Idle polling interval")
      ->check(CLI::Range(1, 600'000))->capture_default_str();
  cmd->add_option("--rebalance-ms", opts->rebalance_ms, "Shard rebalance interval")
      ->check(CLI::Range(10, 600'000))->capture_default_str();
  cmd->add_option("--retention-hours", opts->retention_hours,
                  "Delete published rows older than this")->capture_default_str();
  cmd->add_option("--progress-ms", opts->progress_ms, "Progress interval (0: none)")
      ->check(CLI::Range(0, 3'600'000))->capture_default_str();
  cmd->add_option("--shutdown-timeout-ms", opts->shutdown_timeout_ms,
                  "On SIGTERM, wait this long for acknowledgements")->capture_default_str();
  cmd->add_flag("--no-listen", opts->no_listen, "PostgreSQL: poll only, no LISTEN/NOTIFY");
  cmd->add_flag("--until-empty", opts->until_empty,
                "Exit 0 once nothing is left to publish (exit 3 after --timeout-s)");
  cmd->add_option("--timeout-s", opts->timeout_s, "Deadline for --until-empty")
      ->capture_default_str();
  cmd->add_option("--kafka", opts->kafka, "librdkafka property KEY=VALUE; repeatable");
  cmd->callback([opts, &exit_code] {
    RelayConfig config;
    config.store_url = opts->db;
    config.store_options.application_name = "idem-relay";
    config.producer.bootstrap_servers = opts->bootstrap;
    config.producer.client_id = "idem-relay";
    for (const std::string& kv : opts->kafka) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) {
        throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                    "--kafka expects KEY=VALUE, got " + kv);
      }
      config.producer.kafka.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    }
    config.batch_size = opts->batch_size;
    config.max_batches_in_flight = opts->in_flight;
    config.poll_interval = std::chrono::milliseconds(opts->poll_interval_ms);
    config.rebalance_interval = std::chrono::milliseconds(opts->rebalance_ms);
    config.retention = std::chrono::milliseconds(
        static_cast<std::int64_t>(opts->retention_hours * 3'600'000.0));
    config.progress_interval = std::chrono::milliseconds(opts->progress_ms);
    config.shutdown_timeout = std::chrono::milliseconds(opts->shutdown_timeout_ms);
    config.listen = !opts->no_listen;

    RelayObserver observer;
    observer.log = [](std::string_view line) { std::cerr << line << '\n'; };
    observer.on_progress = [](const RelayProgress& p) {
      std::cout << fmt::format(
                       "progress published={} batches={} resent={} cleaned={} backlog={} "
                       "lag_ms={} shards={} rebuilds={}\n",
                       p.published, p.batches, p.resent, p.cleaned, p.backlog,
                       p.oldest_unpublished_age ? p.oldest_unpublished_age->count() : 0,
                       p.owned_shards, p.producer_rebuilds)
                << std::flush;
    };
    Relay relay(std::move(config), std::move(observer));
    g_relay.store(&relay);
    struct sigaction sa {};
    sa.sa_handler = &relay_stop_handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    std::cout << "ready\n" << std::flush;
    if (opts->until_empty) {
      const bool drained = relay.run_until_empty(std::chrono::seconds(opts->timeout_s));
      exit_code.value = drained ? 0 : 3;
    } else {
      relay.run();
      exit_code.value = 0;
    }
    g_relay.store(nullptr);
    const RelayProgress p = relay.progress();
    std::cout << fmt::format("stopped published={} resent={}\n", p.published, p.resent)
              << std::flush;
  });
}

}  // namespace idem::cli
