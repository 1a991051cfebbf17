#include "support/cli_run.hpp"

#include <algorithm>
#include <stdexcept>

namespace idem::test {

CliResult run_to_completion(const std::string& program, const std::vector<std::string>& args,
                            const ChildProcess::Env& extra_env, std::chrono::milliseconds timeout) {
  // sh merges stderr into stdout, so the one pipe ChildProcess reads sees both.
  std::vector<std::string> sh_args = {"-c", "exec \"$0\" \"$@\" 2>&1", program};
  sh_args.insert(sh_args.end(), args.begin(), args.end());
  ChildProcess child = ChildProcess::spawn("/bin/sh", sh_args, extra_env);
  CliResult result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!child.stdout_closed()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    if (auto line = child.read_line(left)) result.output += *line + "\n";
  }
  result.status = child.wait(
      std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 deadline - std::chrono::steady_clock::now())));
  return result;
}

}  // namespace idem::test
