// `idem maintain`: one retention pass for cron (library: idem/retention.hpp). Prints
// one `maintained ...` line (or `skipped ...` when another instance holds the lock).
// Settings: store.url, dedup.* (shared with consume and migrate, so the retention and
// the partition period cannot disagree) and maintenance.*.
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "commands.hpp"
#include "config_options.hpp"
#include "idem/error.hpp"
#include "idem/retention.hpp"
#include "idem/store.hpp"

namespace idem::cli {

namespace {

// One pass; when the connection is lost on the way (the server went away, a failover to
// another of the hosts store.url names), the pass starts again on a new connection, as
// long as `retry_for` since the first start allows. Each step of a pass commits on its
// own and every step is idempotent, so starting again repeats nothing harmful.
MaintenanceReport run_pass_again_if_cut(const std::string& url, const StoreOptions& options,
                                        const RetentionPolicy& policy,
                                        std::chrono::milliseconds retry_for) {
  const auto give_up = std::chrono::steady_clock::now() + retry_for;
  std::unique_ptr<Store> store;
  while (true) {
    try {
      if (!store) store = open_store(url, options);
      return run_maintenance(*store, policy);
    } catch (const Error& e) {
      if (!e.transient() || std::chrono::steady_clock::now() >= give_up) throw;
      std::cerr << "idem maintain: pass cut short (" << e.what()
                << "); starting it again on a new connection\n";
      store.reset();
      // A pause, not synchronisation: the cluster needs a moment to promote a standby.
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
}

}  // namespace

void register_maintain(CLI::App& app, ExitCode& exit_code) {
  struct Options {
    std::string db;
    std::string retention;
    std::string safety_margin;
    std::string outbox_retention;
    std::string batch_size;
    std::string batch_pause;
    std::string max_batches;
    std::string partition_period;
    std::string partitions_ahead;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "maintain",
      "Retention pass: create partitions ahead, drop expired ones, delete expired rows in batches");
  auto cfg = std::make_shared<ConfigOptions>(cmd);
  cfg->bind(cmd->add_option("--db", opts->db,
                            "Store URL: postgresql://... or sqlite:///path.db (store.url)"),
            "store.url");
  const CLI::Option* retention =
      cfg->bind(cmd->add_option("--retention", opts->retention,
                                "Dedup retention, in event time (dedup.retention, default 7d)"),
                "dedup.retention");
  cfg->bind_old_name(cmd->add_option("--retention-hours"), retention, "h");
  const CLI::Option* safety_margin =
      cfg->bind(cmd->add_option("--safety-margin", opts->safety_margin,
                                "Dedup horizon = retention - margin, reported only; the guard is "
                                "in the consumer (dedup.safety_margin, default 1h)"),
                "dedup.safety_margin");
  cfg->bind_old_name(cmd->add_option("--safety-margin-hours"), safety_margin, "h");
  const CLI::Option* outbox_retention =
      cfg->bind(cmd->add_option("--outbox-retention", opts->outbox_retention,
                                "Delete published outbox rows older than this, 0: keep "
                                "(maintenance.outbox_retention, default 24h)"),
                "maintenance.outbox_retention");
  cfg->bind_old_name(cmd->add_option("--outbox-retention-hours"), outbox_retention, "h");
  cfg->bind(
      cmd->add_option("--batch-size", opts->batch_size,
                      "Rows per DELETE and transaction (maintenance.batch_size, default 5000)"),
      "maintenance.batch_size");
  const CLI::Option* batch_pause =
      cfg->bind(cmd->add_option("--batch-pause", opts->batch_pause,
                                "Pause between batches (maintenance.batch_pause, default 0ms)"),
                "maintenance.batch_pause");
  cfg->bind_old_name(cmd->add_option("--batch-pause-ms"), batch_pause, "ms");
  cfg->bind(cmd->add_option("--max-batches", opts->max_batches,
                            "Batches per table and pass, 0: until done (maintenance.max_batches)"),
            "maintenance.max_batches");
  const CLI::Option* partition_period =
      cfg->bind(cmd->add_option("--partition-period", opts->partition_period,
                                "Partitioned PostgreSQL: partition period, as given to idem "
                                "migrate (dedup.partition_period, default 24h)"),
                "dedup.partition_period");
  cfg->bind_old_name(cmd->add_option("--partition-hours"), partition_period, "h");
  cfg->bind(cmd->add_option("--partitions-ahead", opts->partitions_ahead,
                            "Partitioned PostgreSQL: periods after now that must have a partition "
                            "(dedup.partitions_ahead, default 3)"),
            "dedup.partitions_ahead");
  // `opts` is captured so the strings the bound flags write into outlive this function.
  cmd->callback([opts, cfg, &exit_code] {
    const Config config = cfg->load();
    config.require({"store.url"});
    StoreOptions store_options = config.store_options;
    store_options.application_name = "idem-maintain";
    const MaintenanceReport report = run_pass_again_if_cut(
        config.store_url, store_options, config.retention_policy(), config.maintenance.retry_for);
    std::cout << (report.ran ? "maintained " : "") << report.summary() << '\n' << std::flush;
    for (const std::string& note : report.retention_notes())
      std::cerr << "idem maintain: " << note << '\n';
    exit_code.value = 0;
  });
}

}  // namespace idem::cli
