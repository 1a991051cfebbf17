// `idem config check`: loads the configuration exactly as the other commands do and
// prints every key of every command (set or not) with its effective value and where it
// came from (file, env, flag, default), secrets redacted; for a file with routes, only
// the keys `idem consume` reads with them (the consumer, store, Kafka and admin keys),
// then the routes. Exits 1 with every problem listed when the configuration is invalid.
// `idem <command> ... --print-config` prints every key for one command's own flags.
// `idem config test`: runs the tests the file carries for its routes (route_tests.hpp).
#include <algorithm>
#include <array>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "config_options.hpp"
#include "configured_sinks_wiring.hpp"

namespace idem::cli {

namespace {

// The sections `idem consume --config` reads beside the routes. The demo's, the
// provider's, the console's, the relay's, ... are not a sink user's: listing them hid the
// few that are among about a hundred lines.
constexpr std::array<std::string_view, 9> kSinkSections = {"consumer.", "store.", "postgres.",
                                                           "sqlite.",   "kafka.", "admin.",
                                                           "dedup.",    "log.",   "tracing."};

bool read_by_sinks(const ConfigEntry& e) {
  // The built-in handlers' keys: routes replace them, so they are shown only when set
  // (`idem consume` then refuses consumer.handler beside routes).
  if ((e.key == "consumer.handler" || e.key == "consumer.provider_url") &&
      e.origin.layer == ConfigLayer::Default)
    return false;
  return std::any_of(kSinkSections.begin(), kSinkSections.end(),
                     [&](std::string_view section) { return e.key.starts_with(section); });
}

// print_config() for a file with routes: the keys of a consumer with routes, the routes.
void print_sink_config(const Config& config) {
  std::vector<std::pair<std::string, const ConfigEntry*>> lines;
  std::size_t width = 0;
  for (const ConfigEntry& e : config.entries) {
    if (!read_by_sinks(e)) continue;
    lines.emplace_back(fmt::format("{} = {}", e.key, e.display_value()), &e);
    width = std::max(width, lines.back().first.size());
  }
  std::cout << "# the settings idem consume reads with these routes (every key: idem consume "
               "--config FILE --print-config)\n";
  for (const auto& [text, e] : lines)
    std::cout << fmt::format("{:<{}}  # {}\n", text, width, e->origin.describe());
  for (const std::string& warning : config.warnings) std::cout << "# warning: " << warning << "\n";
  if (!config.store_url.empty())
    std::cout << "# effective store: " << redact_store_url(config.store_url) << "\n";
  (void)print_configured_routes(config);
  std::cout << std::flush;
}

}  // namespace

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
    // Read first: a file whose routes are wrong prints its problems only.
    if (configured_routes(config)) {
      print_sink_config(config);
    } else {
      print_config(config);
    }
    check_configured_routes(config);
    exit_code.value = 0;
  });

  CLI::App* test = group->add_subcommand(
      "test",
      "Run the tests written in the configuration file ([[tests]]): sample events through "
      "the routes, in a transaction rolled back on the store (a throwaway SQLite one without "
      "store.url), calls answered by a stub endpoint; exit 1 when one fails");
  auto test_opts = std::make_shared<Options>();
  auto test_cfg = std::make_shared<ConfigOptions>(test);
  test_cfg->bind(test->add_option("--db", test_opts->db,
                                  "Store the tests run on, rolled back (store.url; default: a "
                                  "throwaway in-memory SQLite store)"),
                 "store.url");
  test_cfg->bind(test->add_option("--group", test_opts->group, "$consumer_group's value"),
                 "consumer.group");
  test->callback([test_opts, test_cfg, &exit_code] {
    exit_code.value = run_configured_route_tests(test_cfg->load()) ? 0 : 1;
  });
}

}  // namespace idem::cli
