// `idem migrate`: create or upgrade the schema (processed_event, reference tables).
#include <chrono>
#include <iostream>
#include <string>

#include <fmt/format.h>

#include "commands.hpp"
#include "config_options.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"

namespace idem::cli {

void register_migrate(CLI::App& app, ExitCode& /*exit_code*/) {
  struct Options {
    std::string db;
    bool partitioned = false;
    int period_hours = 24;
    int behind = 7;
    int ahead = 3;
    bool reference = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "migrate", "Create or upgrade the schema; safe to re-run and to run from several processes");
  auto cfg = std::make_shared<ConfigOptions>(cmd);
  cfg->bind(cmd->add_option("--db", opts->db,
                            "Store URL: postgresql://... or sqlite:///path.db (key store.url)"),
            "store.url");
  cmd->add_flag("--partitioned", opts->partitioned,
                "PostgreSQL: RANGE-partition processed_event on event_id (UUIDv7 time bounds)");
  cmd->add_flag("--reference", opts->reference,
                "Also create the reference system's tables (orders, billing_ledger, effect_log, "
                "analytics); idem's own tables are always created");
  cmd->add_option("--partition-hours", opts->period_hours, "Partition period in hours")
      ->check(CLI::Range(1, 24 * 31))
      ->capture_default_str();
  cmd->add_option("--partitions-behind", opts->behind, "Periods before now that get a partition")
      ->check(CLI::Range(0, 3660))
      ->capture_default_str();
  cmd->add_option("--partitions-ahead", opts->ahead, "Periods after now that get a partition")
      ->check(CLI::Range(1, 3660))
      ->capture_default_str();
  cmd->callback([opts, cfg] {
    const Config config = cfg->load();
    config.require({"store.url"});
    auto store = open_store(config.store_url, config.store_options);
    MigrateOptions mo;
    mo.partitioned = opts->partitioned;
    mo.partition_period = std::chrono::hours(opts->period_hours);
    mo.partitions_behind = opts->behind;
    mo.partitions_ahead = opts->ahead;
    const MigrationReport report =
        opts->reference ? migrate_reference_system(*store, mo) : store->migrate(mo);
    if (report.applied.empty()) {
      std::cout << fmt::format("{}: schema is up to date at version {}\n", to_string(store->backend()),
                               report.to_version);
    } else {
      for (const auto& name : report.applied) std::cout << "applied " << name << "\n";
      std::cout << fmt::format("{}: schema version {} -> {}\n", to_string(store->backend()),
                               report.from_version, report.to_version);
    }
  });
}

}  // namespace idem::cli
