#include "demo/children.hpp"

#include <signal.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

namespace idem::cli::demo {

using namespace std::chrono_literals;

std::string self_program() {
  std::error_code ec;
  auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot find the idem binary (/proc/self/exe): " + ec.message());
  return path.string();
}

namespace {

/// The names of the subcommands listed by `idem <words...> --help`.
std::vector<std::string> listed_subcommands(const std::vector<std::string>& words) {
  std::vector<std::string> args = words;
  args.emplace_back("--help");
  ChildProcess child = ChildProcess::spawn(self_program(), args, {}, "/dev/null");
  std::vector<std::string> names;
  bool in_list = false;
  while (auto line = child.read_line(10s)) {
    if (line->starts_with("Subcommands:")) {
      in_list = true;
    } else if (in_list && line->starts_with("  ")) {
      std::istringstream in(*line);
      std::string name;
      in >> name;
      names.push_back(name);
    }
  }
  (void)child.wait(10s);
  return names;
}

}  // namespace

bool has_subcommand(const std::vector<std::string>& words) {
  // `idem a b --help` prints the help of the deepest known subcommand and exits 0 even
  // when b is unknown, so the exit status does not tell: look for b in a's list.
  for (std::size_t depth = 0; depth < words.size(); ++depth) {
    const auto names =
        listed_subcommands({words.begin(), words.begin() + static_cast<std::ptrdiff_t>(depth)});
    if (std::find(names.begin(), names.end(), words[depth]) == names.end()) return false;
  }
  return true;
}

std::map<std::string, std::uint64_t> parse_counters(const std::string& line) {
  std::map<std::string, std::uint64_t> out;
  std::istringstream in(line);
  std::string word;
  while (in >> word) {
    const auto eq = word.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    try {
      out[word.substr(0, eq)] = std::stoull(word.substr(eq + 1));
    } catch (const std::exception&) {
      // not a counter (e.g. a topic list): ignore
    }
  }
  return out;
}

ManagedChild::ManagedChild(std::string name, std::vector<std::string> args,
                           std::string ready_prefix, std::filesystem::path log)
    : name_(std::move(name)),
      args_(std::move(args)),
      ready_prefix_(std::move(ready_prefix)),
      log_(std::move(log)) {}

std::string ManagedChild::start() {
  if (process_) throw std::logic_error(name_ + " is already running");
  // A child that exits before it is ready is started again (3 attempts): on SQLite a
  // starting consumer's migration check can time out on the database lock while a
  // billing batch holds it through its calls to the provider.
  for (int attempt = 1; attempt <= 3; ++attempt) {
    ++generations_;
    process_.emplace(ChildProcess::spawn(self_program(), args_, {}, log_.string()));
    if (auto line = read_line_starting_with(*process_, ready_prefix_, 30s)) return *line;
    const bool exited = process_->stdout_closed();
    process_.reset();    // SIGKILLs and reaps
    if (!exited) break;  // silent for 30 s: starting again will not help
  }
  throw std::runtime_error(
      fmt::format("{} did not start (no '{}' line); see {}", name_, ready_prefix_, log_.string()));
}

void ManagedChild::kill() {
  if (!process_) return;
  process_->kill(SIGKILL);
  (void)process_->wait(30s);
  process_.reset();
  ++kills_;
}

std::map<std::string, std::uint64_t> ManagedChild::stop() {
  std::map<std::string, std::uint64_t> counters;
  if (!process_) return counters;
  process_->kill(SIGTERM);
  if (auto line = read_line_starting_with(*process_, "stopped", 30s))
    counters = parse_counters(*line);
  const int status = process_->wait(30s);
  process_.reset();
  if (status == 0) {
    ++clean_stops_;
    for (const auto& [k, v] : counters) reported_[k] += v;
  }
  return counters;
}

}  // namespace idem::cli::demo
