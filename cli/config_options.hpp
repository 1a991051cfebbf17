#pragma once
// The flags every command shares to reach the configuration loader (--config, --set,
// --kafka, --print-config), and the mapping of a command's own flags onto configuration
// keys. A command registers its flags with bind(), then calls load() in its callback:
//
//   auto cfg = std::make_shared<ConfigOptions>(cmd);   // --config, --set, --kafka, ...
//   cfg->bind(cmd->add_option("--group", ...), "consumer.group");
//   cmd->callback([cfg] { const idem::Config config = cfg->load(); ... });
//
// Flags set on the command line are the top layer; unset flags leave the key to the
// file, the environment and the defaults (idem/config.hpp). Flags carry no defaults and
// no range checks of their own: the key's default and its one validation apply.
#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "idem/config.hpp"
#include "idem/store.hpp"

namespace idem::cli {

class ConfigOptions {
 public:
  /// Adds --config, --set KEY=VALUE, --kafka PROPERTY=VALUE and --print-config to `cmd`.
  explicit ConfigOptions(CLI::App* cmd);

  /// Maps `cmd`'s option `flag` (already added, storing into a string or string vector
  /// the caller owns) to `key`. `unit`: what a bare number given to the flag means when
  /// the key is a duration (an old flag's unit: `--dedup-retention-hours 48` -> `48h`). Returns the
  /// option.
  CLI::Option* bind(CLI::Option* flag, std::string key, std::string_view unit = {});

  /// Keeps `old_flag` (added with no variable: the loader reads its value) as an older
  /// name of the bound flag `now` (`--retention-hours` of `--retention`): it sets the same
  /// key, a bare number meaning `unit` as the old name said, and is hidden from --help.
  /// The loader warns when it is used and refuses it given together with `now`.
  CLI::Option* bind_old_name(CLI::Option* old_flag, const CLI::Option* now, std::string_view unit);

  /// Maps the switch `flag` (added with add_flag) to `key`: given, it sets `key` to `value`
  /// (`--no-stdin` -> dev_broker.read_stdin=false).
  CLI::Option* bind_switch(CLI::Option* flag, std::string key, std::string value);

  /// Runs the loader on the file, the process environment and the flags given. With
  /// --print-config, prints the configuration (as `idem config check` does) and ends the
  /// program with exit code 0 instead of returning.
  /// \throws ConfigError listing every problem.
  [[nodiscard]] Config load() const;

 private:
  struct Bound {
    CLI::Option* option;
    std::string key;
    std::string unit;          ///< appended to a bare number
    std::string switch_value;  ///< non-empty: a switch setting this value
    std::string new_flag{};    ///< non-empty: an older name of this flag (bind_old_name)
  };
  std::string file_;
  std::vector<std::string> sets_;
  std::vector<std::string> kafka_;
  bool print_config_ = false;
  std::vector<Bound> bound_;
};

/// The configuration as `idem config check` prints it: every key with its value and
/// origin, secrets redacted, and the store that would be opened.
void print_config(const Config& config);

/// Opens the store `config` names (store.url is required), shown to PostgreSQL as
/// `application_name` when one is given (`idem-retention` in pg_stat_activity).
/// \throws ConfigError when store.url is not set.
[[nodiscard]] std::unique_ptr<Store> open_configured_store(const Config& config,
                                                           std::string_view application_name = {});

}  // namespace idem::cli
