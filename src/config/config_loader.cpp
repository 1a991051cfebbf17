// load_config(): defaults -> TOML file -> environment -> flags, then one validation pass
// that collects every problem before throwing.
#include <algorithm>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "config/problems.hpp"
#include "idem/config.hpp"
#include "idem/config_document.hpp"

namespace idem {

using detail::Problems;
using detail::Settings;

namespace {

constexpr std::string_view kEnvPrefix = "IDEM_";
constexpr std::string_view kConfigFileEnv = "IDEM_CONFIG";
constexpr std::string_view kKafkaEnvPrefix = "IDEM_KAFKA_";
// Reserved for the test and benchmark harnesses and scripts/ (test.sh: IDEM_BUILD_DIR,
// IDEM_JOBS, IDEM_WERROR; check-style.sh: IDEM_TIDY_*; with-postgres.sh: IDEM_PG_*; setup.py
// of idem for Python: IDEM_BUILD_*): never configuration, so never
// reported as unknown keys.
constexpr std::array<std::string_view, 7> kNonConfigEnvPrefixes = {
    "IDEM_TEST_", "IDEM_BENCH_", "IDEM_PG_",  "IDEM_BUILD_",
    "IDEM_JOBS",  "IDEM_WERROR", "IDEM_TIDY_"};

bool is_known_key(const ConfigSchema& schema, std::string_view key) {
  return schema.find(key) != nullptr ||
         (key.starts_with(detail::kKafkaPrefix) && key.size() > detail::kKafkaPrefix.size());
}

// ---- layer 2: the TOML file ------------------------------------------------------------

std::string scalar_text(const toml::node& node, bool& ok) {
  ok = true;
  if (const auto* s = node.as_string()) return s->get();
  if (const auto* i = node.as_integer()) return std::to_string(i->get());
  if (const auto* f = node.as_floating_point()) return fmt::format("{}", f->get());
  if (const auto* b = node.as_boolean()) return b->get() ? "true" : "false";
  ok = false;
  return {};
}

void flatten(const ConfigSchema& schema, const toml::table& table, const std::string& prefix,
             const std::string& path, Settings& out, Problems& problems) {
  for (const auto& [name, node] : table) {
    const std::string key =
        prefix.empty() ? std::string(name.str()) : prefix + "." + std::string(name.str());
    if (prefix.empty() && schema.is_reserved_table(key)) continue;  // its owner reads it
    const ConfigOrigin origin{ConfigLayer::File,
                              fmt::format("{}:{}", path, node.source().begin.line)};
    if (const auto* sub = node.as_table()) {
      flatten(schema, *sub, key, path, out, problems);
      continue;
    }
    if (!is_known_key(schema, key)) {
      problems.add(key, origin, "unknown key");
      continue;
    }
    std::string text;
    if (const auto* array = node.as_array()) {
      for (const auto& element : *array) {
        bool ok = false;
        std::string item = scalar_text(element, ok);
        if (!ok) {
          problems.add(key, origin, "array elements must be strings or numbers");
          break;
        }
        if (!text.empty()) text.push_back(',');
        text += item;
      }
    } else {
      bool ok = false;
      text = scalar_text(node, ok);
      if (!ok) {
        problems.add(key, origin, "expected a string, number or boolean");
        continue;
      }
    }
    out[key] = {std::move(text), origin};
  }
}

std::shared_ptr<const ConfigDocument> apply_file(const ConfigSchema& schema,
                                                 const std::string& path, Settings& out,
                                                 Problems& problems, const ConfigOrigin& named_by) {
  std::string problem;
  std::shared_ptr<const ConfigDocument> document = ConfigDocument::read(path, problem);
  if (!document) {
    problems.add(path, named_by, problem);
    return nullptr;
  }
  flatten(schema, document->table(), "", path, out, problems);
  return document;
}

// ---- layer 3: the environment ----------------------------------------------------------

std::string kafka_key_from_env(std::string_view name) {
  std::string key(detail::kKafkaPrefix);
  for (const char c : name.substr(kKafkaEnvPrefix.size())) {
    key.push_back(c == '_' ? '.' : static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return key;
}

void apply_environment(const ConfigSchema& schema,
                       const std::vector<std::pair<std::string, std::string>>& environment,
                       Settings& out, Problems& problems) {
  // Conventional names first, so IDEM_* names of the same key override them.
  std::map<std::string, std::string, std::less<>> env(environment.begin(), environment.end());
  const auto set_from = [&](const std::string& key, const std::string& var) {
    const auto it = env.find(var);
    if (it != env.end()) out[key] = {it->second, {ConfigLayer::Environment, var}};
  };
  const std::vector<KeySpec> keys = schema.keys();
  for (const KeySpec& spec : keys) {
    for (const auto& var : spec.conventional_env) set_from(spec.name, var);
  }
  set_from("kafka.bootstrap.servers", "KAFKA_BOOTSTRAP_SERVERS");

  std::map<std::string, std::string> known_env;  // IDEM_<KEY> -> key
  for (const KeySpec& spec : keys) known_env.emplace(detail::env_name_of(spec.name), spec.name);
  for (const auto& [name, value] : env) {
    if (!name.starts_with(kEnvPrefix) || name == kConfigFileEnv) continue;
    // An init-capture: clang before 16 cannot capture a structured binding (fuzz builds).
    if (std::any_of(kNonConfigEnvPrefixes.begin(), kNonConfigEnvPrefixes.end(),
                    [&var = name](std::string_view p) { return var.starts_with(p); }))
      continue;
    const ConfigOrigin origin{ConfigLayer::Environment, name};
    if (name.starts_with(kKafkaEnvPrefix) && name.size() > kKafkaEnvPrefix.size()) {
      out[kafka_key_from_env(name)] = {value, origin};
    } else if (const auto it = known_env.find(name); it != known_env.end()) {
      out[it->second] = {value, origin};
    } else {
      problems.add(name, origin, "unknown environment variable (no such configuration key)");
    }
  }
}

std::string problems_text(const std::vector<ConfigProblem>& problems) {
  std::string out = fmt::format("configuration has {} problem{}:", problems.size(),
                                problems.size() == 1 ? "" : "s");
  for (const auto& p : problems) {
    out += fmt::format("\n  {} ({}): {}", p.key, p.origin.describe(), p.message);
  }
  return out;
}

}  // namespace

std::string_view to_string(ConfigLayer layer) noexcept {
  switch (layer) {
    case ConfigLayer::Default: return "default";
    case ConfigLayer::File: return "file";
    case ConfigLayer::Environment: return "env";
    case ConfigLayer::Flag: return "flag";
  }
  return "unknown";
}

std::string ConfigOrigin::describe() const {
  return where.empty() ? std::string(to_string(layer))
                       : fmt::format("{} {}", to_string(layer), where);
}

ConfigError::ConfigError(std::vector<ConfigProblem> problems)
    : Error(ErrorCode::InvalidArgument, ErrorSource::Config, problems_text(problems)),
      problems_(std::move(problems)) {}

Config load_config(const ConfigSources& sources, const ConfigSchema& schema) {
  Settings settings;
  Problems problems;
  for (const KeySpec& spec : schema.keys()) settings[spec.name] = {spec.default_value, {}};

  std::string file = sources.file;
  ConfigOrigin file_named_by{ConfigLayer::Flag, "--config"};
  if (file.empty()) {
    for (const auto& [name, value] : sources.environment) {
      if (name == kConfigFileEnv) {
        file = value;
        file_named_by = {ConfigLayer::Environment, std::string(kConfigFileEnv)};
      }
    }
  }
  std::shared_ptr<const ConfigDocument> document;
  if (!file.empty()) document = apply_file(schema, file, settings, problems, file_named_by);
  apply_environment(schema, sources.environment, settings, problems);
  for (const FlagSetting& f : sources.flags) {
    const ConfigOrigin origin{ConfigLayer::Flag, f.flag};
    if (!is_known_key(schema, f.key)) {
      problems.add(f.key, origin, "unknown key");
      continue;
    }
    settings[f.key] = {f.value, origin};
  }

  Config config = schema.build(settings, problems);
  if (!problems.empty()) throw ConfigError(problems.take());
  config.file = file;
  config.document = std::move(document);
  config.environment = sources.environment;
  return config;
}

}  // namespace idem
