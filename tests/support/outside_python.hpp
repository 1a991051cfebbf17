#pragma once
// The outside client of the multi-process tests: python3 with Debian's
// python3-confluent-kafka, a client nobody on this project wrote, and the scripts it runs
// (tests/fault/*.py). Inline: IDEM_TEST_CHILD_DIR is a definition of the test programs.
#include <chrono>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli_run.hpp"
#include "support/test_env.hpp"

namespace idem::test {

/// A python3 that can import confluent_kafka: IDEM_TEST_PYTHON, else every python3 on
/// PATH in order, else /usr/bin/python3. (The first python3 on PATH may be a pyenv or
/// venv interpreter without Debian's dist-packages.)
inline std::optional<std::string> find_python_with_confluent_kafka() {
  std::vector<std::string> candidates;
  if (auto p = env("IDEM_TEST_PYTHON")) candidates.push_back(*p);
  if (auto path = env("PATH")) {
    std::stringstream dirs(*path);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
      if (!dir.empty()) candidates.push_back(dir + "/python3");
    }
  }
  candidates.emplace_back("/usr/bin/python3");
  std::set<std::string> tried;
  for (const auto& c : candidates) {
    std::error_code ec;
    if (!tried.insert(c).second || !std::filesystem::exists(c, ec)) continue;
    try {
      const auto r =
          run_to_completion(c, {"-c", "import confluent_kafka"}, {}, std::chrono::seconds(30));
      if (r.status == 0) return c;
    } catch (const std::exception&) {
      // not runnable: try the next one
    }
  }
  return std::nullopt;
}

/// tests/fault/`name`, or the path in the environment variable `override_env`. __FILE__
/// is absolute, or (when ccache rewrote the command line relative to the build directory)
/// relative to the top build directory, which is the parent of IDEM_TEST_CHILD_DIR.
inline std::optional<std::filesystem::path> fault_test_script(const std::string& name,
                                                              const char* override_env) {
  if (auto p = env(override_env)) return std::filesystem::path(*p);
  const std::filesystem::path fault =
      std::filesystem::path(__FILE__).parent_path().parent_path() / "fault";
  std::vector<std::filesystem::path> candidates = {fault / name};
  if (fault.is_relative())
    candidates.push_back(std::filesystem::path(IDEM_TEST_CHILD_DIR).parent_path() / fault / name);
  for (const auto& c : candidates) {
    std::error_code ec;
    if (std::filesystem::exists(c, ec)) return std::filesystem::weakly_canonical(c, ec);
  }
  return std::nullopt;
}

}  // namespace idem::test
