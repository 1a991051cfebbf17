#include "config_options.hpp"

#include <fmt/format.h>

namespace idem::cli {

namespace {

// "k=v" -> {k, v}; a malformed one becomes a ConfigProblem naming the flag.
bool split(const std::string& kv, std::string& key, std::string& value) {
  const auto eq = kv.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  key = kv.substr(0, eq);
  value = kv.substr(eq + 1);
  return true;
}

}  // namespace

ConfigOptions::ConfigOptions(CLI::App* cmd) {
  cmd->add_option("--config", file_, "TOML configuration file (default: $IDEM_CONFIG)");
  cmd->add_option("--set", sets_, "Configuration KEY=VALUE, e.g. consumer.batch_size=1000 (repeatable)");
  cmd->add_option("--kafka", kafka_,
                  "librdkafka property KEY=VALUE, passed through (TLS, SASL; repeatable)");
}

CLI::Option* ConfigOptions::bind(CLI::Option* flag, std::string key) {
  bound_.push_back({flag, std::move(key)});
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
    const std::vector<std::string> values = b.option->as<std::vector<std::string>>();
    std::string joined;
    for (const auto& v : values) joined += (joined.empty() ? "" : ",") + v;
    sources.flags.push_back({b.key, joined, b.option->get_name()});
  }
  std::string key;
  std::string value;
  for (const auto& kv : kafka_) {
    if (split(kv, key, value)) {
      sources.flags.push_back({"kafka." + key, value, "--kafka"});
    } else {
      malformed.push_back({"--kafka", {ConfigLayer::Flag, "--kafka"}, "expected PROPERTY=VALUE"});
    }
  }
  for (const auto& kv : sets_) {
    if (split(kv, key, value)) {
      sources.flags.push_back({key, value, "--set"});
    } else {
      malformed.push_back({"--set", {ConfigLayer::Flag, "--set"}, "expected KEY=VALUE"});
    }
  }
  try {
    Config config = load_config(sources);
    if (!malformed.empty()) throw ConfigError(std::move(malformed));
    return config;
  } catch (const ConfigError& e) {
    if (malformed.empty()) throw;
    std::vector<ConfigProblem> all = e.problems();
    all.insert(all.end(), malformed.begin(), malformed.end());
    throw ConfigError(std::move(all));
  }
}

}  // namespace idem::cli
