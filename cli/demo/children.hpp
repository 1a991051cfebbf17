#pragma once
// The demo's child processes: `idem relay`, `idem consume` and `idem provider`, each a
// fork/exec of this very binary (/proc/self/exe), so the demo kills real processes
// with SIGKILL and restarts them, as a crash would.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "idem/devtools/child_process.hpp"

namespace idem::cli::demo {

/// The path of the running idem binary, for fork/exec of its subcommands.
[[nodiscard]] std::string self_program();

/// True when this build of idem has the subcommand `words` (e.g. {"dlq", "replay"}).
[[nodiscard]] bool has_subcommand(const std::vector<std::string>& words);

/// "stopped: delivered=1 processed=2 ..." or "stopped published=3 ..." -> {key: value}.
[[nodiscard]] std::map<std::string, std::uint64_t> parse_counters(const std::string& line);

/// One subcommand run as a child, restartable. Its stderr goes to `log` (appended per
/// generation); its stdout is read for the line that says it is ready and, on a clean
/// stop, for its final counters.
class ManagedChild {
 public:
  /// `ready_prefix`: the start of the stdout line the subcommand prints once it serves.
  ManagedChild(std::string name, std::vector<std::string> args, std::string ready_prefix,
               std::filesystem::path log);

  /// Spawns a new generation and waits (30 s) for its ready line, which it returns.
  /// Throws std::runtime_error naming the log when the child exits or stays silent.
  std::string start();
  /// SIGKILL, then reap: the child gets no chance to finish anything.
  void kill();
  /// SIGTERM, then waits (30 s) for its final "stopped..." line and exit. Returns the
  /// counters of that line (empty when the child printed none); they are also added
  /// to reported_counters().
  std::map<std::string, std::uint64_t> stop();

  [[nodiscard]] bool running() const noexcept { return process_.has_value(); }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] int kills() const noexcept { return kills_; }
  [[nodiscard]] int generations() const noexcept { return generations_; }
  [[nodiscard]] const std::filesystem::path& log() const noexcept { return log_; }
  /// Sum of the counters of every generation that stopped cleanly. SIGKILLed
  /// generations report nothing.
  [[nodiscard]] const std::map<std::string, std::uint64_t>& reported_counters() const noexcept {
    return reported_;
  }
  [[nodiscard]] int clean_stops() const noexcept { return clean_stops_; }

 private:
  std::string name_;
  std::vector<std::string> args_;
  std::string ready_prefix_;
  std::filesystem::path log_;
  std::optional<ChildProcess> process_;
  int kills_ = 0;
  int generations_ = 0;
  int clean_stops_ = 0;
  std::map<std::string, std::uint64_t> reported_;
};

}  // namespace idem::cli::demo
