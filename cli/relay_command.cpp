// `idem relay`: publishes outbox rows (library: idem::Relay). Prints `ready` once its
// connections are open, then one `progress ...` line per progress interval; logs go to
// stderr. Stops on SIGTERM/SIGINT after the batches in flight were acknowledged and
// marked, within relay.stop_timeout: if that could not be done in time (broker or
// database gone), exits 1 saying so.
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "config_options.hpp"
#include "idem/config.hpp"
#include "idem/console/console.hpp"
#include "idem/error.hpp"
#include "idem/metrics/metrics.hpp"
#include "idem/relay.hpp"
#include "idem/service/admin_endpoints.hpp"
#include "idem/service/stop_watchdog.hpp"
#include "stop_signals.hpp"

namespace idem::cli {

void register_relay(CLI::App& app, ExitCode& exit_code) {
  struct Options {
    std::string db;
    std::string bootstrap;
    std::string batch_size;
    std::string in_flight;
    std::string mark_connections;
    std::string poll_interval;
    std::string rebalance_interval;
    std::string retention;
    std::string progress_interval;
    std::string stop_timeout;
    std::string publish_after;
    std::string standbys;
    std::string standby_quorum;
    bool no_listen = false;
    bool until_empty = false;
    int timeout_s = 600;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "relay", "Publish outbox rows to Kafka with an idempotent producer, in order per key");
  // Settings with a configuration key come from the loader (file, environment, flags).
  auto cfg = std::make_shared<ConfigOptions>(cmd);
  cfg->bind(cmd->add_option("--db", opts->db, "Store URL (store.url)"), "store.url");
  cfg->bind(cmd->add_option("--brokers", opts->bootstrap,
                            "Kafka bootstrap servers (kafka.bootstrap.servers)"),
            "kafka.bootstrap.servers");
  cfg->bind(cmd->add_option("--batch-size", opts->batch_size, "Rows per claim (relay.batch_size)"),
            "relay.batch_size");
  cfg->bind(cmd->add_option("--in-flight", opts->in_flight,
                            "Batches produced but not yet marked (relay.in_flight)"),
            "relay.in_flight");
  cfg->bind(
      cmd->add_option("--mark-connections", opts->mark_connections,
                      "Connections marking rows published, 0: inline (relay.mark_connections)"),
      "relay.mark_connections");
  const CLI::Option* poll_interval =
      cfg->bind(cmd->add_option("--poll-interval", opts->poll_interval,
                                "Idle polling interval (relay.poll_interval, default 500ms; a bare "
                                "number is milliseconds)"),
                "relay.poll_interval");
  cfg->bind_old_name(cmd->add_option("--poll-interval-ms"), poll_interval, "ms");
  const CLI::Option* retention =
      cfg->bind(cmd->add_option("--retention", opts->retention,
                                "Delete published rows older than this (relay.retention, default "
                                "24h; a bare number is hours)"),
                "relay.retention");
  cfg->bind_old_name(cmd->add_option("--retention-hours"), retention, "h");
  const CLI::Option* progress_interval = cfg->bind(
      cmd->add_option("--progress-interval", opts->progress_interval,
                      "Progress interval, 0: none (relay.progress_interval, default 5s; a "
                      "bare number is milliseconds)"),
      "relay.progress_interval");
  cfg->bind_old_name(cmd->add_option("--progress-ms"), progress_interval, "ms");
  const CLI::Option* rebalance_interval =
      cfg->bind(cmd->add_option("--rebalance-interval", opts->rebalance_interval,
                                "Shard rebalance interval (relay.rebalance_interval, default 2s)"),
                "relay.rebalance_interval");
  cfg->bind_old_name(cmd->add_option("--rebalance-ms"), rebalance_interval, "ms");
  cfg->bind(cmd->add_option("--stop-timeout", opts->stop_timeout,
                            "On SIGTERM, finish the batches in flight and exit within this long, "
                            "else exit 1 saying what was not done (relay.stop_timeout, default "
                            "30s)"),
            "relay.stop_timeout");
  cfg->bind(cmd->add_option("--publish-after", opts->publish_after,
                            "committed: publish rows once committed; replicated: once their "
                            "commits are flushed on the standbys (relay.publish_after)"),
            "relay.publish_after");
  cfg->bind(cmd->add_option("--standbys", opts->standbys,
                            "With replicated: the standbys that count, by application_name, "
                            "comma-separated; empty: the synchronous ones (relay.standbys)"),
            "relay.standbys");
  cfg->bind(cmd->add_option("--standby-quorum", opts->standby_quorum,
                            "With replicated: how many counted standbys must have flushed a "
                            "batch's commits (relay.standby_quorum, default 1)"),
            "relay.standby_quorum");
  cfg->bind_switch(cmd->add_flag("--no-listen", opts->no_listen,
                                 "PostgreSQL: poll only, no LISTEN/NOTIFY (relay.listen=false)"),
                   "relay.listen", "false");
  // --until-empty and --timeout-s choose how this invocation ends (a batch job rather
  // than a service), so they are flags only.
  cmd->add_flag("--until-empty", opts->until_empty,
                "Exit 0 once nothing is left to publish (exit 3 after --timeout-s)");
  cmd->add_option("--timeout-s", opts->timeout_s, "Deadline for --until-empty")
      ->capture_default_str();
  cmd->callback([opts, cfg, &exit_code] {
    const Config settings = cfg->load();
    settings.require({"store.url", "kafka.bootstrap.servers"});
    // Before any thread starts (the admin server's, the relay's, librdkafka's).
    StopSignals signals;
    RelayConfig config = settings.relay_config();
    // The relay returns within the stop timeout by itself unless its own thread is inside
    // a call to a database that stopped answering; a second past it, this ends the process
    // (declared before the relay, so its destruction is covered too).
    StopWatchdog watchdog(
        config.stop_timeout + std::chrono::seconds(1),
        fmt::format(
            "idem: error: relay stop not finished within {}: a call to the database or "
            "the broker has not returned. Rows produced but not marked published are sent again by "
            "the next relay, with the same event_id: at-least-once publication, which "
            "consumers deduplicate",
            format_duration(config.stop_timeout)));
    config.store_options.application_name = "idem-relay";

    RelayObserver observer;
    observer.log = [](std::string_view line) { std::cerr << line << '\n'; };
    observer.on_progress = [](const RelayProgress& p) {
      std::cout << fmt::format(
                       "progress published={} batches={} resent={} rejected={} cleaned={} "
                       "backlog={} rejected_rows={} lag_ms={} shards={} rebuilds={} "
                       "in_flight={} replication_waits={} replication_wait_ms={} "
                       "replication_waiting_ms={}\n",
                       p.published, p.batches, p.resent, p.rejected, p.cleaned, p.backlog,
                       p.rejected_rows,
                       p.oldest_unpublished_age ? p.oldest_unpublished_age->count() : 0,
                       p.owned_shards, p.producer_rebuilds, p.in_flight, p.replication_waits,
                       p.replication_wait_total.count(), p.replication_waiting.count())
                << std::flush;
    };
    // admin.listen set: /metrics, /healthz and /readyz (store reachable) on that port.
    Metrics metrics;
    AdminEndpoints admin;
    if (!settings.get<AdminSettings>().listen.empty()) {
      observer = metrics.instrument(std::move(observer));
      admin = start_admin_endpoints(settings, metrics,
                                    {store_readiness(settings.store_url, settings.store_options)});
      std::cout << fmt::format("admin server on port {}\n", admin.port()) << std::flush;
    }
    Relay relay(std::move(config), std::move(observer));
    const OnStopSignal stop_on_signal(signals, [&relay, &watchdog] {
      watchdog.arm();
      relay.request_stop();
    });
    std::cout << "ready\n" << std::flush;
    if (opts->until_empty) {
      const bool drained = relay.run_until_empty(std::chrono::seconds(opts->timeout_s));
      exit_code.value = drained ? 0 : 3;
    } else {
      relay.run();
      exit_code.value = 0;
    }
    const RelayProgress p = relay.progress();
    std::cout << fmt::format("stopped published={} resent={} rejected={}\n", p.published, p.resent,
                             p.rejected)
              << std::flush;
  });
}

}  // namespace idem::cli
