// `idem maintain`: one retention pass for cron (library: idem/retention.hpp). Prints
// one `maintained ...` line (or `skipped ...` when another instance holds the lock).
#include <chrono>
#include <iostream>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "commands.hpp"
#include "idem/retention.hpp"
#include "idem/store.hpp"

namespace idem::cli {

void register_maintain(CLI::App& app, ExitCode& exit_code) {
  struct Options {
    std::string db;
    int retention_hours = 24 * 7;
    int safety_margin_hours = 1;
    double outbox_retention_hours = 24;
    std::size_t batch_size = 5000;
    int batch_pause_ms = 0;
    std::size_t max_batches = 0;
    int partition_hours = 24;
    int partitions_ahead = 3;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "maintain", "Retention pass: create partitions ahead, drop expired ones, delete expired rows in batches");
  cmd->add_option("--db", opts->db, "Store URL: postgresql://... or sqlite:///path.db")->required();
  cmd->add_option("--retention-hours", opts->retention_hours, "Dedup retention, in event time")
      ->check(CLI::Range(1, 24 * 3650))->capture_default_str();
  cmd->add_option("--safety-margin-hours", opts->safety_margin_hours,
                  "Dedup horizon = retention - margin (reported only; the guard is in the consumer)")
      ->check(CLI::Range(0, 24 * 3650))->capture_default_str();
  cmd->add_option("--outbox-retention-hours", opts->outbox_retention_hours,
                  "Delete published outbox rows older than this (0: keep)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--batch-size", opts->batch_size, "Rows per DELETE (and transaction)")
      ->check(CLI::Range(1, 1'000'000))->capture_default_str();
  cmd->add_option("--batch-pause-ms", opts->batch_pause_ms, "Pause between batches")
      ->check(CLI::Range(0, 60'000))->capture_default_str();
  cmd->add_option("--max-batches", opts->max_batches, "Batches per table and pass (0: until done)")
      ->capture_default_str();
  cmd->add_option("--partition-hours", opts->partition_hours,
                  "Partitioned PostgreSQL: partition period (as given to idem migrate)")
      ->check(CLI::Range(1, 24 * 366))->capture_default_str();
  cmd->add_option("--partitions-ahead", opts->partitions_ahead,
                  "Partitioned PostgreSQL: periods after now that must have a partition")
      ->check(CLI::Range(0, 1000))->capture_default_str();
  cmd->callback([opts, &exit_code] {
    RetentionPolicy policy;
    policy.dedup.retention = std::chrono::hours(opts->retention_hours);
    policy.dedup.safety_margin = std::chrono::hours(opts->safety_margin_hours);
    policy.outbox_retention = std::chrono::milliseconds(
        static_cast<std::int64_t>(opts->outbox_retention_hours * 3'600'000.0));
    policy.batch_size = opts->batch_size;
    policy.batch_pause = std::chrono::milliseconds(opts->batch_pause_ms);
    policy.max_batches = opts->max_batches;
    policy.partition_period = std::chrono::hours(opts->partition_hours);
    policy.partitions_ahead = opts->partitions_ahead;
    StoreOptions store_options;
    store_options.application_name = "idem-maintain";
    const auto store = open_store(opts->db, store_options);
    const MaintenanceReport report = run_maintenance(*store, policy);
    std::cout << (report.ran ? "maintained " : "") << report.summary() << '\n' << std::flush;
    exit_code.value = 0;
  });
}

}  // namespace idem::cli
