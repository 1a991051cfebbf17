// `idem config check`: loads the configuration exactly as the other commands do and
// prints every key of every command (set or not) with its effective value and where it
// came from (file, env, flag, default), secrets redacted. Exits 1 with every problem
// listed when the configuration is invalid. `idem <command> ... --print-config` prints
// the same for one command's own flags.
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "config_options.hpp"
#include "configured_sinks_wiring.hpp"

namespace idem::cli {

void register_config(CLI::App& app, ExitCode& exit_code) {
  CLI::App* group = app.add_subcommand("config", "Inspect the configuration");
  group->require_subcommand(1);
  CLI::App* check = group->add_subcommand(
      "check", "Print the effective configuration (secrets redacted) or every problem in it");
  struct Options {
    std::string db;
    std::string brokers;
    std::string group;
    std::vector<std::string> topics;
  };
  auto opts = std::make_shared<Options>();
  auto cfg = std::make_shared<ConfigOptions>(check);
  // The flags most commands share; a command line with any other command's flags is
  // checked with `idem <command> ... --print-config`.
  cfg->bind(check->add_option("--db", opts->db, "Store URL"), "store.url");
  cfg->bind(check->add_option("--brokers", opts->brokers, "Kafka bootstrap servers"),
            "kafka.bootstrap.servers");
  cfg->bind(check->add_option("--group", opts->group, "Consumer group"), "consumer.group");
  cfg->bind(check->add_option("--topic", opts->topics, "Topic (repeatable)"), "consumer.topics");
  // `opts` is captured so the strings the bound flags write into outlive this function.
  check->callback([opts, cfg, &exit_code] {
    const Config config = cfg->load();
    print_config(config);
    check_configured_routes(config);
    exit_code.value = 0;
  });
}

}  // namespace idem::cli
