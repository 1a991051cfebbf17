#pragma once
// The flags every command shares to reach the configuration loader (--config, --set,
// --kafka), and the mapping of a command's own flags onto configuration keys. A command
// registers its flags with bind(), then calls load() in its callback:
//
//   auto cfg = std::make_shared<ConfigOptions>(cmd);   // --config, --set, --kafka
//   cfg->bind(cmd->add_option("--group", ...), "consumer.group");
//   cmd->callback([cfg] { const idem::Config config = cfg->load(); ... });
//
// Flags set on the command line are the top layer; unset flags leave the key to the
// file, the environment and the defaults (idem/config.hpp).
#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "idem/config.hpp"

namespace idem::cli {

class ConfigOptions {
 public:
  /// Adds --config, --set KEY=VALUE and --kafka PROPERTY=VALUE to `cmd`.
  explicit ConfigOptions(CLI::App* cmd);

  /// Maps `cmd`'s option `flag` (already added, storing into a string or string vector
  /// the caller owns) to `key`. Returns the option for chaining.
  CLI::Option* bind(CLI::Option* flag, std::string key);

  /// Runs the loader on the file, the process environment and the flags given.
  /// \throws ConfigError listing every problem.
  [[nodiscard]] Config load() const;

 private:
  struct Bound {
    CLI::Option* option;
    std::string key;
  };
  std::string file_;
  std::vector<std::string> sets_;
  std::vector<std::string> kafka_;
  std::vector<Bound> bound_;
};

}  // namespace idem::cli
