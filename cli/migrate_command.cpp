// `idem migrate`: create or upgrade the schema (idem's own tables, the console's, and the
// reference system's with --reference).
#include <chrono>
#include <iostream>
#include <string>

#include <fmt/format.h>

#include "commands.hpp"
#include "config_options.hpp"
#include "idem/store.hpp"
#include "store_schema.hpp"

namespace idem::cli {

void register_migrate(CLI::App& app, ExitCode& /*exit_code*/) {
  struct Options {
    std::string db;
    bool partitioned = false;
    std::string period;
    std::string behind;
    std::string ahead;
    bool reference = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "migrate", "Create or upgrade the schema; safe to re-run and to run from several processes");
  auto cfg = std::make_shared<ConfigOptions>(cmd);
  cfg->bind(cmd->add_option("--db", opts->db,
                            "Store URL: postgresql://... or sqlite:///path.db (key store.url)"),
            "store.url");
  cfg->bind_switch(cmd->add_flag("--partitioned", opts->partitioned,
                                 "PostgreSQL: RANGE-partition processed_event on event_id (UUIDv7 "
                                 "time bounds) (dedup.partitioned=true)"),
                   "dedup.partitioned", "true");
  const CLI::Option* period = cfg->bind(
      cmd->add_option("--partition-period", opts->period,
                      "Partition period, whole hours (dedup.partition_period, default 24h)"),
      "dedup.partition_period");
  cfg->bind_old_name(cmd->add_option("--partition-hours"), period, "h");
  cfg->bind(cmd->add_option("--partitions-behind", opts->behind,
                            "Periods before now that get a partition (dedup.partitions_behind, "
                            "default 7)"),
            "dedup.partitions_behind");
  cfg->bind(cmd->add_option("--partitions-ahead", opts->ahead,
                            "Periods after now that get a partition (dedup.partitions_ahead, "
                            "default 3)"),
            "dedup.partitions_ahead");
  cmd->add_flag("--reference", opts->reference,
                "Also create the reference system's tables (orders, billing_ledger, effect_log, "
                "analytics); idem's own tables and the console's are always created");
  cmd->callback([opts, cfg] {
    const Config config = cfg->load();
    auto store = open_configured_store(config);
    const MigrationReport report = migrate_store(*store, config.migrate_options(), opts->reference);
    if (report.applied.empty()) {
      std::cout << fmt::format("{}: schema is up to date at version {}\n",
                               to_string(store->backend()), report.to_version);
    } else {
      for (const auto& name : report.applied) std::cout << "applied " << name << "\n";
      std::cout << fmt::format("{}: schema version {} -> {}\n", to_string(store->backend()),
                               report.from_version, report.to_version);
    }
  });
}

}  // namespace idem::cli
