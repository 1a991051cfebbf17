// `idem retention list|forget`: the dedup retention a store's consumers declared
// (library: idem/retention.hpp, docs/retention.md). `list` shows every declaration and
// what maintenance dropped; `forget` removes the declarations of a consumer group that no
// longer runs, so maintenance stops keeping marks for it.
#include <chrono>
#include <iostream>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "commands.hpp"
#include "config_options.hpp"
#include "idem/error.hpp"
#include "idem/retention.hpp"
#include "idem/store.hpp"
#include "idem/timestamp.hpp"

namespace idem::cli {

namespace {

std::string hours(std::chrono::milliseconds d) {
  return fmt::format("{:g}h", static_cast<double>(d.count()) / 3'600'000.0);
}

}  // namespace

void register_retention(CLI::App& app, ExitCode& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "retention", "The dedup retention the consumers of a store declared: list, forget");
  cmd->require_subcommand(1);

  struct Options {
    std::string db;
    std::string group;
    bool force = false;
  };
  auto opts = std::make_shared<Options>();
  const auto add_db = [&](CLI::App* sub) {
    auto cfg = std::make_shared<ConfigOptions>(sub);
    cfg->bind(sub->add_option("--db", opts->db,
                              "Store URL: postgresql://... or sqlite:///path.db (store.url)"),
              "store.url");
    return cfg;
  };

  CLI::App* list = cmd->add_subcommand(
      "list", "Every consumer group's declared retention, its expiry, and what was dropped");
  auto list_cfg = add_db(list);
  list->callback([opts, list_cfg, &exit_code] {
    const auto store = open_configured_store(list_cfg->load(), "idem-retention");
    const auto now =
        std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now());
    std::cout << "consumer_group\tretention\trenewed_at\texpires_at\tstate\tdeclared_by\n";
    for (const auto& d : dedup_retention_declarations(*store)) {
      std::cout << fmt::format("{}\t{}\t{}\t{}\t{}\t{}\n", d.consumer_group, hours(d.retention),
                               format_rfc3339(d.renewed_at), format_rfc3339(d.expires_at()),
                               d.expires_at() > now ? "live" : "expired", d.declared_by);
    }
    const DroppedDedupMarks dropped = dropped_dedup_marks(*store);
    if (dropped.born_before.time_since_epoch().count() == 0) {
      std::cout << "dropped: none recorded\n";
    } else {
      std::cout << fmt::format("dropped: marks of events born before {} (pass at {} kept {})\n",
                               format_rfc3339(dropped.born_before),
                               format_rfc3339(dropped.dropped_at), hours(dropped.retention));
    }
    std::cout << std::flush;
    exit_code.value = 0;
  });

  CLI::App* forget = cmd->add_subcommand(
      "forget", "Remove the declarations of a consumer group that no longer runs");
  auto forget_cfg = add_db(forget);
  forget->add_option("--group", opts->group, "The consumer group")->required();
  forget->add_flag("--force", opts->force,
                   "Also when the group renewed its declaration recently (it still runs)");
  forget->callback([opts, forget_cfg, &exit_code] {
    const auto store = open_configured_store(forget_cfg->load(), "idem-retention");
    const auto now =
        std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now());
    for (const auto& d : dedup_retention_declarations(*store)) {
      if (d.consumer_group != opts->group || opts->force) continue;
      if (d.renewed_at > now - 2 * kDedupRetentionRenewal) {
        std::cerr << fmt::format(
            "idem retention forget: consumer group '{}' renewed its declaration of {} at {} "
            "({}): it still runs, and would lose marks it relies on; stop it first, or pass "
            "--force\n",
            d.consumer_group, hours(d.retention), format_rfc3339(d.renewed_at), d.declared_by);
        exit_code.value = 3;
        return;
      }
    }
    const std::int64_t removed = forget_dedup_retention(*store, opts->group);
    std::cout << fmt::format("forgot consumer_group={} declarations={}\n", opts->group, removed)
              << std::flush;
    exit_code.value = 0;
  });
}

}  // namespace idem::cli
