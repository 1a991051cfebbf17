// `idem console`: the operators' web console (library: idem/console/console.hpp,
// docs/console.md). Serves until SIGTERM/SIGINT and prints the URL it listens on.
//
// The token (console.token) is configuration only, from the file or IDEM_CONSOLE_TOKEN,
// never a flag: a flag's value is visible to every user of the machine in the process list.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "config_options.hpp"
#include "idem/config.hpp"
#include "idem/console/console.hpp"
#include "idem/service/admin_endpoints.hpp"
#include "stop_signals.hpp"

namespace idem::cli {

void register_console(CLI::App& app, ExitCode& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "console", "Web console: lag, throughput, dead letters and replay, dedup store health");
  struct Options {
    std::string brokers, db, listen, refresh;
    std::vector<std::string> scrape, groups;
  };
  auto opts = std::make_shared<Options>();
  auto cfg = std::make_shared<ConfigOptions>(cmd);
  cfg->bind(cmd->add_option("--brokers", opts->brokers,
                            "Kafka bootstrap servers host:port,... (kafka.bootstrap.servers)"),
            "kafka.bootstrap.servers");
  cfg->bind(cmd->add_option("--db", opts->db,
                            "Store URL: postgresql://... or sqlite:///path.db (store.url)"),
            "store.url");
  cfg->bind(cmd->add_option("--listen", opts->listen,
                            "host:port to serve on (console.listen, default 127.0.0.1:8480)"),
            "console.listen");
  cfg->bind(cmd->add_option("--refresh", opts->refresh,
                            "Sampling period of lag and throughput (console.refresh, default 2s)"),
            "console.refresh");
  cfg->bind(cmd->add_option("--scrape", opts->scrape,
                            "Admin server host:port of a consumer, for throughput; repeatable "
                            "(console.scrape)"),
            "console.scrape");
  cfg->bind(cmd->add_option("--group", opts->groups,
                            "A consumer group to show besides those the store knows; repeatable "
                            "(console.groups)"),
            "console.groups");
  cmd->callback([cfg, &exit_code] {
    const Config config = cfg->load();
    config.require({"kafka.bootstrap.servers", "store.url"});
    ConsoleOptions options = console_options(config);

    StopSignals signals;  // before the server and librdkafka start their threads
    Console console(std::move(options));
    std::cout << fmt::format("console on http://{}:{}/{}",
                             config.get<ConsoleOptions>().listen.substr(
                                 0, config.get<ConsoleOptions>().listen.rfind(':')),
                             console.port(),
                             config.get<ConsoleOptions>().token.empty()
                                 ? "  (no console.token: replay is off)"
                                 : "")
              << std::endl;
    signals.wait();
    exit_code.value = 0;
  });
}

}  // namespace idem::cli
