// ConfigSchema: the keys the loader knows, each bound to a member of its section's
// settings struct, and the pass that applies the layered settings to a Config.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "config/problems.hpp"
#include "idem/config.hpp"

namespace idem {

using detail::KeyBinding;
using detail::SectionDeclaration;

struct ConfigSchema::Parts {
  struct Section {
    std::type_index type;
    std::function<std::shared_ptr<void>()> make;  // null: the core's, applied to the Config
    SectionDeclaration declaration;
  };
  std::vector<Section> sections;
  // Key name -> (section, key) index.
  std::map<std::string, std::pair<std::size_t, std::size_t>, std::less<>> index;
  // Old name of a renamed key -> its name now (KeySpec::renamed_from).
  std::map<std::string, std::string, std::less<>> renamed;
  std::vector<std::function<void(const Config&, std::vector<std::string>&)>> warnings;
  std::set<std::string, std::less<>> reserved_tables;
};

namespace {

[[noreturn]] void schema_error(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, ErrorSource::Config, message);
}

// Where a section's checks report: the problem gets the origin of the key it names.
class CheckProblems final : public SectionProblems {
 public:
  CheckProblems(const detail::Settings& settings, detail::Problems& problems)
      : settings_(settings), problems_(problems) {}
  void fail(std::string_view key, std::string message) override {
    const auto it = settings_.find(key);
    problems_.add(std::string(key), it != settings_.end() ? it->second.origin : ConfigOrigin{},
                  std::move(message));
  }
  [[nodiscard]] std::string shown(std::string_view key) const override {
    const auto it = settings_.find(key);
    const std::string value = it != settings_.end() ? it->second.value : std::string();
    return is_secret_key(key) ? "<redacted>" : fmt::format("'{}'", value);
  }

 private:
  const detail::Settings& settings_;
  detail::Problems& problems_;
};

}  // namespace

ConfigSchema::ConfigSchema() : parts_(std::make_unique<Parts>()) {
  SectionDeclaration core;
  SectionKeys<Config> keys(core);
  detail::declare_core_keys(keys);
  add_section(typeid(Config), nullptr, std::move(core));
  add<detail::PostgresParams>(detail::declare_postgres_keys);
}

ConfigSchema::~ConfigSchema() = default;
ConfigSchema::ConfigSchema(const ConfigSchema& other)
    : parts_(std::make_unique<Parts>(*other.parts_)) {}
ConfigSchema& ConfigSchema::operator=(const ConfigSchema& other) {
  if (this != &other) parts_ = std::make_unique<Parts>(*other.parts_);
  return *this;
}

void ConfigSchema::add_section(const std::type_info& type,
                               std::function<std::shared_ptr<void>()> make,
                               SectionDeclaration declaration) {
  for (const auto& s : parts_->sections) {
    if (s.type == std::type_index(type)) schema_error("configuration section added twice");
  }
  const std::size_t section = parts_->sections.size();
  for (std::size_t k = 0; k < declaration.keys.size(); ++k) {
    const std::string& name = declaration.keys[k].spec.name;
    if (!parts_->index.emplace(name, std::make_pair(section, k)).second ||
        parts_->renamed.contains(name))
      schema_error(fmt::format("configuration key {} declared twice", name));
  }
  for (const KeyBinding& binding : declaration.keys) {
    for (const std::string& old_name : binding.spec.renamed_from) {
      if (parts_->index.contains(old_name) ||
          !parts_->renamed.emplace(old_name, binding.spec.name).second)
        schema_error(fmt::format("configuration key {} declared twice", old_name));
    }
  }
  parts_->sections.push_back({std::type_index(type), std::move(make), std::move(declaration)});
}

ConfigSchema& ConfigSchema::warn(
    std::function<void(const Config&, std::vector<std::string>&)> check) {
  parts_->warnings.push_back(std::move(check));
  return *this;
}

ConfigSchema& ConfigSchema::reserve_table(std::string name) {
  parts_->reserved_tables.insert(std::move(name));
  return *this;
}

std::vector<KeySpec> ConfigSchema::keys() const {
  std::vector<KeySpec> out;
  for (const auto& [name, at] : parts_->index)
    out.push_back(parts_->sections[at.first].declaration.keys[at.second].spec);
  return out;  // the index is sorted by name
}

const KeySpec* ConfigSchema::find(std::string_view name) const {
  const auto it = parts_->index.find(name);
  if (it == parts_->index.end()) return nullptr;
  return &parts_->sections[it->second.first].declaration.keys[it->second.second].spec;
}

const KeySpec* ConfigSchema::renamed_to(std::string_view old_name) const {
  const auto it = parts_->renamed.find(old_name);
  return it == parts_->renamed.end() ? nullptr : find(it->second);
}

bool ConfigSchema::is_reserved_table(std::string_view name) const {
  return parts_->reserved_tables.contains(name);
}

Config ConfigSchema::build(const detail::Settings& settings, detail::Problems& problems) const {
  Config c;
  std::vector<void*> targets;
  for (const auto& section : parts_->sections) {
    if (!section.make) {
      targets.push_back(&c);
      continue;
    }
    auto object = section.make();
    targets.push_back(object.get());
    c.sections_.emplace(section.type, std::move(object));
  }
  for (const auto& [key, setting] : settings) {
    // A default is the member's own value already (config_keys.hpp).
    if (setting.origin.layer == ConfigLayer::Default) continue;
    const auto it = parts_->index.find(key);
    if (it == parts_->index.end()) continue;  // kafka.*, or reported unknown by the loader
    const KeyBinding& binding =
        parts_->sections[it->second.first].declaration.keys[it->second.second];
    // Set to nothing: text and lists become empty; any other type keeps its default.
    const KeyType type = binding.spec.type;
    if (setting.value.empty() && type != KeyType::String && type != KeyType::List &&
        type != KeyType::DurationList)
      continue;
    if (auto problem = binding.apply(targets[it->second.first], setting.value))
      problems.add(key, setting.origin, std::move(*problem));
  }
  CheckProblems check_problems(settings, problems);
  for (std::size_t i = 0; i < parts_->sections.size(); ++i) {
    for (const auto& check : parts_->sections[i].declaration.checks)
      check(targets[i], check_problems);
  }
  detail::apply_kafka_properties(settings, c, problems);
  for (const auto& [key, setting] : settings)
    c.entries.push_back({key, setting.value, is_secret_key(key), setting.origin});
  for (const auto& warning : parts_->warnings) warning(c, c.warnings);
  return c;
}

const void* Config::section(const std::type_info& type) const {
  const auto it = sections_.find(std::type_index(type));
  if (it == sections_.end()) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                fmt::format("no configuration section {} in this schema", type.name()));
  }
  return it->second.get();
}

const ConfigEntry* Config::entry(std::string_view key) const {
  const auto it =
      std::lower_bound(entries.begin(), entries.end(), key,
                       [](const ConfigEntry& e, std::string_view k) { return e.key < k; });
  return it != entries.end() && it->key == key ? &*it : nullptr;
}

ConsumerConfig Config::consumer_config() const {
  ConsumerConfig c = consumer;
  c.bootstrap_servers = bootstrap_servers;
  c.kafka = kafka;
  c.dedup_horizon = dedup.horizon;
  return c;
}

RetentionPolicy Config::retention_policy() const {
  RetentionPolicy p = maintenance.policy;
  p.dedup = dedup.horizon;
  p.partition_period = dedup.partitions.partition_period;
  p.partitions_ahead = dedup.partitions.partitions_ahead;
  return p;
}

RelayConfig Config::relay_config() const {
  RelayConfig r = relay;
  r.store_url = store_url;
  r.store_options = store_options;
  r.producer.bootstrap_servers = bootstrap_servers;
  r.producer.client_id = "idem-relay";
  r.producer.kafka = kafka;
  return r;
}

void Config::require(std::initializer_list<std::string_view> keys) const {
  std::vector<ConfigProblem> missing;
  for (const auto key : keys) {
    const ConfigEntry* e = entry(key);
    if (e == nullptr || e->value.empty()) {
      ConfigProblem problem;  // origin: none (a default); named object for GCC's -O3 flow analysis
      problem.key = std::string(key);
      problem.message = fmt::format("required; set it in the file, as {} or with a flag",
                                    detail::env_name_of(key));
      missing.push_back(std::move(problem));
    }
  }
  if (!missing.empty()) throw ConfigError(std::move(missing));
}

std::string Config::describe() const {
  std::size_t width = 0;
  std::vector<std::pair<std::string, const ConfigEntry*>> lines;
  for (const auto& e : entries) {
    lines.emplace_back(fmt::format("{} = {}", e.key, e.display_value()), &e);
    width = std::max(width, lines.back().first.size());
  }
  std::string out;
  for (const auto& [text, e] : lines) {
    out += fmt::format("{:<{}}  # {}\n", text, width, e->origin.describe());
  }
  return out;
}

}  // namespace idem
