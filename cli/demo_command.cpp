// `idem demo`: flags and keys only; the demo itself is in cli/demo/ (run.cpp
// orchestrates the processes and the fault phases, audit.cpp checks the invariant).
// Settings: store.url, kafka.bootstrap.servers and demo.*.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include "commands.hpp"
#include "config_options.hpp"
#include "demo/demo.hpp"

namespace idem::cli {

namespace {

demo::DemoOptions demo_options(const Config& config) {
  demo::DemoOptions o = config.get<demo::DemoOptions>();
  o.db = config.store_url;
  o.brokers = config.bootstrap_servers;
  return o;
}

}  // namespace

void register_demo(CLI::App& app, ExitCode& exit_code) {
  struct Options {
    std::string db, brokers, orders, partitions, batch, seed, faults, relay_kills, consumer_kills,
        resend, reset_after_commit, unavailable, decline, provider_latency, timeout;
    bool keep = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Run the reference system as child processes (provider, relay, billing and analytics "
      "consumers) on the embedded default, inject duplicates and faults, audit exactly-once "
      "effects");
  auto cfg = std::make_shared<ConfigOptions>(cmd);
  cfg->bind(cmd->add_option("--db", opts->db,
                            "Store URL (default: a fresh SQLite file in a temp dir); "
                            "postgresql://... selects PostgreSQL (store.url)"),
            "store.url");
  cfg->bind(cmd->add_option("--brokers", opts->brokers,
                            "Kafka bootstrap servers (default: the embedded dev broker); the topic "
                            "order-service.order.confirmed and its .dlq must exist "
                            "(kafka.bootstrap.servers)"),
            "kafka.bootstrap.servers");
  cfg->bind(cmd->add_option("--orders", opts->orders,
                            "Orders to create and confirm (demo.orders, default 300)"),
            "demo.orders");
  cfg->bind(cmd->add_option(
                "--partitions", opts->partitions,
                "Partitions of the topic on the embedded broker (demo.partitions, default 6)"),
            "demo.partitions");
  cfg->bind(cmd->add_option("--batch", opts->batch,
                            "Events per consumer transaction (demo.batch, default 20)"),
            "demo.batch");
  const CLI::Option* provider_latency =
      cfg->bind(cmd->add_option("--provider-latency", opts->provider_latency,
                                "Added by the provider to every new charge; billing keeps many "
                                "charges in flight (demo.provider_latency, default 20ms)"),
                "demo.provider_latency");
  cfg->bind_old_name(cmd->add_option("--provider-latency-ms"), provider_latency, "ms");
  cfg->bind(
      cmd->add_option("--seed", opts->seed,
                      "Random seed: orders, kill points, provider faults (demo.seed, default 42)"),
      "demo.seed");
  cfg->bind(
      cmd->add_option("--faults", opts->faults,
                      "Fault phases: all, none, or a comma list of relay-kill, consumer-kill, "
                      "rebalance, provider, resend, malformed, dlq-replay, offset-reset "
                      "(demo.faults, default all)"),
      "demo.faults");
  cfg->bind(cmd->add_option("--relay-kills", opts->relay_kills,
                            "Relay SIGKILLs (demo.relay_kills, default 3)"),
            "demo.relay_kills");
  cfg->bind(cmd->add_option("--consumer-kills", opts->consumer_kills,
                            "Consumer SIGKILLs, with restart (demo.consumer_kills, default 2)"),
            "demo.consumer_kills");
  cfg->bind(
      cmd->add_option("--resend", opts->resend,
                      "Share of outbox rows the relay publishes again (demo.resend, default 0.1)"),
      "demo.resend");
  cfg->bind(cmd->add_option("--reset-after-commit", opts->reset_after_commit,
                            "Provider: probability of a connection reset after a stored charge "
                            "(demo.reset_after_commit, default 0.05)"),
            "demo.reset_after_commit");
  cfg->bind(cmd->add_option("--unavailable", opts->unavailable,
                            "Provider: probability of a 503 (demo.unavailable, default 0.05)"),
            "demo.unavailable");
  cfg->bind(cmd->add_option(
                "--decline", opts->decline,
                "Provider: share of orders declined in the DLQ phase (demo.decline, default 0.2)"),
            "demo.decline");
  cfg->bind(cmd->add_option("--timeout", opts->timeout,
                            "Give up after this long (demo.timeout, default 120s; a bare number is "
                            "seconds)"),
            "demo.timeout", "s");
  cfg->bind_switch(cmd->add_flag("--keep", opts->keep,
                                 "Keep the temp dir (child logs, SQLite files) after a successful "
                                 "run (demo.keep=true)"),
                   "demo.keep", "true");
  // `opts` is captured so the strings the bound flags write into outlive this function.
  cmd->callback(
      [opts, cfg, &exit_code] { exit_code.value = demo::run_demo(demo_options(cfg->load())); });
}

}  // namespace idem::cli
