// `idem demo`: flags only; the demo itself is in cli/demo/ (run.cpp orchestrates the
// processes and the fault phases, audit.cpp checks the invariant).
#include <memory>

#include "commands.hpp"
#include "demo/demo.hpp"

namespace idem::cli {

void register_demo(CLI::App& app, ExitCode& exit_code) {
  auto opts = std::make_shared<demo::DemoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Run the reference system as child processes (provider, relay, billing and analytics "
      "consumers) on the embedded default, inject duplicates and faults, audit exactly-once effects");
  cmd->add_option("--db", opts->db, "Store URL (default: a fresh SQLite file in a temp dir); "
                                    "postgresql://... selects PostgreSQL");
  cmd->add_option("--brokers", opts->brokers,
                  "Kafka bootstrap servers (default: the embedded dev broker); the topic "
                  "order-service.order.confirmed and its .dlq must exist");
  cmd->add_option("--orders", opts->orders, "Orders to create and confirm")
      ->check(CLI::Range(10, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--partitions", opts->partitions, "Partitions of the topic on the embedded broker")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--batch", opts->batch, "Events per consumer transaction")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--seed", opts->seed, "Random seed (orders, kill points, provider faults)")
      ->capture_default_str();
  cmd->add_option("--faults", opts->faults,
                  "Fault phases: all, none, or a comma list of relay-kill, consumer-kill, rebalance, "
                  "provider, resend, malformed, dlq-replay, offset-reset")
      ->capture_default_str();
  cmd->add_option("--relay-kills", opts->relay_kills, "Relay SIGKILLs")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  cmd->add_option("--consumer-kills", opts->consumer_kills, "Consumer SIGKILLs (with restart)")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  cmd->add_option("--resend", opts->resend_share, "Share of outbox rows the relay publishes again")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--reset-after-commit", opts->reset_after_commit,
                  "Provider: probability of a connection reset after a stored charge")
      ->check(CLI::Range(0.0, 0.5))
      ->capture_default_str();
  cmd->add_option("--unavailable", opts->unavailable, "Provider: probability of a 503")
      ->check(CLI::Range(0.0, 0.5))
      ->capture_default_str();
  cmd->add_option("--decline", opts->decline, "Provider: share of orders declined in the DLQ phase")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--timeout", opts->timeout_s, "Give up after this many seconds")
      ->check(CLI::Range(10, 3600))
      ->capture_default_str();
  cmd->add_flag("--keep", opts->keep, "Keep the temp dir (child logs, SQLite files) after a successful run");
  cmd->callback([opts, &exit_code] { exit_code.value = demo::run_demo(*opts); });
}

}  // namespace idem::cli
