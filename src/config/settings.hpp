#pragma once
// The loader's intermediate form, shared by its two halves: config_loader.cpp collects
// settings layer by layer (defaults, TOML file, environment, flags) and
// config_validation.cpp turns them into a Config, collecting every problem.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "idem/config.hpp"

namespace idem::detail {

struct Setting {
  std::string value;
  ConfigOrigin origin;
};

using Settings = std::map<std::string, Setting, std::less<>>;

class Problems {
 public:
  void add(std::string key, ConfigOrigin origin, std::string message) {
    list_.push_back({std::move(key), std::move(origin), std::move(message)});
  }
  [[nodiscard]] bool empty() const noexcept { return list_.empty(); }
  std::vector<ConfigProblem> take() { return std::move(list_); }

 private:
  std::vector<ConfigProblem> list_;
};

/// Validates every setting and builds the Config; each problem goes into `problems`.
Config validate(const Settings& settings, Problems& problems);

}  // namespace idem::detail
