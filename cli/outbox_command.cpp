// `idem outbox rejected|requeue`: the outbox rows the relay set aside because the
// producer or the broker refused them for good (library: list_rejected_outbox_rows,
// requeue_rejected_outbox_row in idem/outbox.hpp; docs/outbox.md).
//
// `rejected` prints one tab-separated line per row (id, topic, key, payload bytes,
// rejected at, reason) under a header, and exits 0 (also when there are none).
// `requeue ID...` puts each row back in line for the relay; exit 1 when one of them was
// not a rejected row.
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "config_options.hpp"
#include "idem/outbox.hpp"
#include "idem/store.hpp"
#include "idem/timestamp.hpp"

namespace idem::cli {

namespace {

std::shared_ptr<ConfigOptions> bind_store(CLI::App* cmd, std::string& db) {
  auto cfg = std::make_shared<ConfigOptions>(cmd);
  cfg->bind(cmd->add_option("--db", db, "Store URL (store.url)"), "store.url");
  return cfg;
}

}  // namespace

void register_outbox(CLI::App& app, ExitCode& exit_code) {
  struct Options {
    std::string db;
    std::int64_t limit = 1000;
    std::vector<std::int64_t> ids;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* outbox = app.add_subcommand(
      "outbox", "Outbox rows the relay set aside because Kafka refused them for good");
  outbox->require_subcommand(1);

  CLI::App* rejected = outbox->add_subcommand(
      "rejected", "List rejected rows: id, topic, key, payload bytes, when, and why");
  auto rejected_cfg = bind_store(rejected, opts->db);
  rejected->add_option("--limit", opts->limit, "At most this many rows, oldest id first")
      ->capture_default_str();
  rejected->callback([opts, rejected_cfg] {
    auto store = open_configured_store(rejected_cfg->load());
    std::cout << "id\ttopic\tkey\tbytes\trejected_at\treason\n";
    for (const RejectedOutboxRow& r : list_rejected_outbox_rows(*store, opts->limit)) {
      const Timestamp at{std::chrono::milliseconds(r.rejected_at_ms)};
      std::cout << fmt::format("{}\t{}\t{}\t{}\t{}\t{}\n", r.id, r.topic, r.message_key,
                               r.payload_bytes, format_rfc3339(at), r.reason);
    }
  });

  CLI::App* requeue = outbox->add_subcommand(
      "requeue", "Put rejected rows back in line for the relay once the cause is fixed");
  auto requeue_cfg = bind_store(requeue, opts->db);
  requeue->add_option("ids", opts->ids, "Ids of rejected rows (from `idem outbox rejected`)")
      ->required();
  requeue->callback([opts, requeue_cfg, &exit_code] {
    auto store = open_configured_store(requeue_cfg->load());
    for (const std::int64_t id : opts->ids) {
      if (requeue_rejected_outbox_row(*store, id)) {
        std::cout << fmt::format("requeued {}\n", id);
      } else {
        std::cerr << fmt::format("idem outbox requeue: {} is not a rejected row\n", id);
        exit_code.value = 1;
      }
    }
  });
}

}  // namespace idem::cli
