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
  return schema.find(key) != nullptr || schema.renamed_to(key) != nullptr ||
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

  std::map<std::string, std::string> known_env;  // IDEM_<KEY> -> key (or an old name of it)
  for (const KeySpec& spec : keys) {
    known_env.emplace(detail::env_name_of(spec.name), spec.name);
    for (const std::string& old_name : spec.renamed_from)
      known_env.emplace(detail::env_name_of(old_name), old_name);
  }
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

// ---- layer 4: the flags ----------------------------------------------------------------

void apply_flags(const ConfigSchema& schema, const std::vector<FlagSetting>& flags, Settings& out,
                 Problems& problems, std::vector<std::string>& warnings) {
  std::map<std::string, const FlagSetting*, std::less<>> set_by;  // key -> the flag that set it
  for (const FlagSetting& f : flags) {
    const ConfigOrigin origin{ConfigLayer::Flag, f.flag};
    if (!is_known_key(schema, f.key)) {
      problems.add(f.key, origin, "unknown key");
      continue;
    }
    const auto [at, first] = set_by.emplace(f.key, &f);
    if (!first && (at->second->new_flag == f.flag || f.new_flag == at->second->flag)) {
      const FlagSetting& renamed = f.new_flag.empty() ? *at->second : f;
      problems.add(f.key, origin,
                   fmt::format("{} and its old name {} both given: give only {}", renamed.new_flag,
                               renamed.flag, renamed.new_flag));
      continue;
    }
    at->second = &f;
    if (!f.new_flag.empty()) {
      warnings.push_back(
          fmt::format("flag {} is the old name of {} ({}): it still works and the "
                      "value keeps its meaning, but use {}",
                      f.flag, f.new_flag, f.key, f.new_flag));
    }
    out[f.key] = {f.value, origin};
  }
}

// The values the layers left under old names of renamed keys move to the keys' names now,
// one warning each; a key set under both names is a problem naming both.
void resolve_renamed_keys(const ConfigSchema& schema, Settings& settings, Problems& problems,
                          std::vector<std::string>& warnings) {
  for (auto it = settings.begin(); it != settings.end();) {
    const KeySpec* now = schema.renamed_to(it->first);
    if (now == nullptr) {
      ++it;
      continue;
    }
    const std::string& old_name = it->first;
    const detail::Setting& old_setting = it->second;
    detail::Setting& new_setting = settings[now->name];  // present: every key has its default
    const bool from_env = old_setting.origin.layer == ConfigLayer::Environment;
    if (new_setting.origin.layer != ConfigLayer::Default) {
      problems.add(now->name, new_setting.origin,
                   fmt::format("also set as its old name {} ({}): set only {}", old_name,
                               old_setting.origin.describe(), now->name));
    } else {
      warnings.push_back(fmt::format(
          "{} ({}) is the old name of {}: it still works and the value keeps its meaning, but "
          "set {}",
          old_name, old_setting.origin.describe(), now->name,
          from_env ? detail::env_name_of(now->name) : now->name));
      new_setting = old_setting;
    }
    it = settings.erase(it);
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
  std::vector<std::string> renamed_warnings;
  apply_flags(schema, sources.flags, settings, problems, renamed_warnings);
  resolve_renamed_keys(schema, settings, problems, renamed_warnings);

  Config config = schema.build(settings, problems);
  if (!problems.empty()) throw ConfigError(problems.take());
  config.file = file;
  config.document = std::move(document);
  config.environment = sources.environment;
  config.renamed_warnings = std::move(renamed_warnings);
  return config;
}

}  // namespace idem
