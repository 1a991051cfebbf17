#include "config_options.hpp"

#include "cli_schema.hpp"
#include "configured_sinks_wiring.hpp"

#include <algorithm>
#include <iostream>
#include <stdexcept>

#include <fmt/format.h>

namespace idem::cli {

namespace {

// "k=v" -> {k, v}; false when there is no '=' or no key.
bool split(const std::string& kv, std::string& key, std::string& value) {
  const auto eq = kv.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  key = kv.substr(0, eq);
  value = kv.substr(eq + 1);
  return true;
}

bool is_bare_number(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(),
                                      [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
}

// `--name` of a bound flag: CLI11 names a hidden option (an old name, bind_old_name) with
// an empty string, so its long name is read instead.
std::string flag_name(const CLI::Option* flag) {
  return flag->get_lnames().empty() ? flag->get_name() : "--" + flag->get_lnames().front();
}

ConfigProblem malformed_flag(const std::string& flag, std::string message) {
  ConfigProblem problem;
  problem.key = flag;
  problem.origin.layer = ConfigLayer::Flag;
  problem.origin.where = flag;
  problem.message = std::move(message);
  return problem;
}

}  // namespace

ConfigOptions::ConfigOptions(CLI::App* cmd) {
  cmd->add_option("--config", file_, "TOML configuration file (default: $IDEM_CONFIG)");
  cmd->add_option("--set", sets_,
                  "Configuration KEY=VALUE, e.g. consumer.batch_size=1000 (repeatable)");
  cmd->add_option("--kafka", kafka_,
                  "librdkafka property KEY=VALUE, passed through (TLS, SASL; repeatable)");
  cmd->add_flag("--print-config", print_config_,
                "Print every configuration key as this command line sets it (value and origin, "
                "secrets redacted) and exit without running");
}

CLI::Option* ConfigOptions::bind(CLI::Option* flag, std::string key, std::string_view unit) {
  bound_.push_back({flag, std::move(key), std::string(unit), {}});
  return flag;
}

CLI::Option* ConfigOptions::bind_old_name(CLI::Option* old_flag, const CLI::Option* now,
                                          std::string_view unit) {
  const auto bound =
      std::find_if(bound_.begin(), bound_.end(), [now](const Bound& b) { return b.option == now; });
  if (bound == bound_.end()) throw std::logic_error("bind_old_name: the new flag is not bound");
  Bound old{old_flag, bound->key, std::string(unit), {}, flag_name(now)};
  old_flag->description(fmt::format("Old name of {}", flag_name(now)))->group("");
  bound_.push_back(std::move(old));
  return old_flag;
}

CLI::Option* ConfigOptions::bind_switch(CLI::Option* flag, std::string key, std::string value) {
  bound_.push_back({flag, std::move(key), {}, std::move(value)});
  return flag;
}

Config ConfigOptions::load() const {
  ConfigSources sources;
  sources.file = file_;
  sources.environment = process_environment();
  std::vector<ConfigProblem> malformed;
  // Command-specific flags first, then --kafka, then --set: the most explicit wins.
  for (const Bound& b : bound_) {
    if (b.option->count() == 0) continue;
    std::string joined = b.switch_value;
    if (joined.empty()) {
      for (const auto& v : b.option->as<std::vector<std::string>>()) {
        if (!joined.empty()) joined.push_back(',');
        joined += !b.unit.empty() && is_bare_number(v) ? v + b.unit : v;
      }
    }
    sources.flags.push_back({b.key, std::move(joined), flag_name(b.option), b.new_flag});
  }
  std::string key;
  std::string value;
  for (const auto& kv : kafka_) {
    if (split(kv, key, value)) {
      sources.flags.push_back({"kafka." + key, value, "--kafka"});
    } else {
      malformed.push_back(malformed_flag("--kafka", "expected PROPERTY=VALUE"));
    }
  }
  for (const auto& kv : sets_) {
    if (split(kv, key, value)) {
      sources.flags.push_back({key, value, "--set"});
    } else {
      malformed.push_back(malformed_flag("--set", "expected KEY=VALUE"));
    }
  }
  std::vector<ConfigProblem> problems;
  std::optional<Config> config;
  try {
    config.emplace(load_config(sources, cli_config_schema()));
  } catch (const ConfigError& e) {
    problems = e.problems();
  }
  problems.insert(problems.end(), malformed.begin(), malformed.end());
  if (!problems.empty()) throw ConfigError(std::move(problems));
  for (const std::string& warning : config->renamed_warnings)
    std::cerr << "idem: warning: " << warning << '\n';
  if (print_config_) {
    print_config(*config);
    throw CLI::Success();  // main() exits 0, as after --help
  }
  return std::move(*config);
}

void print_config(const Config& config) {
  std::cout << config.describe();
  for (const std::string& warning : config.warnings) std::cout << "# warning: " << warning << "\n";
  if (!config.store_url.empty()) {
    // store.url with postgres.* (PG*) applied: what the store will actually open.
    std::cout << "# effective store: " << redact_store_url(config.store_url) << "\n";
  }
  (void)print_configured_routes(config);
  std::cout << std::flush;
}

std::unique_ptr<Store> open_configured_store(const Config& config,
                                             std::string_view application_name) {
  config.require({"store.url"});
  StoreOptions options = config.store_options;
  if (!application_name.empty()) options.application_name = application_name;
  return open_store(config.store_url, options);
}

}  // namespace idem::cli
