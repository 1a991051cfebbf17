#pragma once
// Runs the idem CLI to completion and captures what it printed (stdout and stderr
// together, in order), for tests that judge a command by its output.
#include <chrono>
#include <string>
#include <vector>

#include "support/process.hpp"

namespace idem::test {

struct CliResult {
  int status = -1;     ///< exit status, or minus the signal that killed it
  std::string output;  ///< stdout and stderr, interleaved as written
};

/// Runs `program args...` with `extra_env` added to the environment, waits up to
/// `timeout` (then kills it and throws std::runtime_error).
[[nodiscard]] CliResult run_to_completion(
    const std::string& program, const std::vector<std::string>& args,
    const ChildProcess::Env& extra_env = {},
    std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace idem::test
