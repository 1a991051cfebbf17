// `idem dev-broker`: runs the embedded Kafka-protocol broker (librdkafka's mock
// cluster) in the foreground so that other processes can use it.
//
// stdout carries exactly one line, the bootstrap servers, followed by one answer
// line per control command read from stdin (see docs/dev-broker.md). The broker runs
// until SIGTERM or SIGINT; EOF on stdin only stops the control channel. Settings:
// dev_broker.* (`--brokers N` here is a count, dev_broker.brokers, not bootstrap servers).
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "config_options.hpp"
#include "idem/devtools/dev_broker.hpp"
#include "idem/error.hpp"
#include "stop_signals.hpp"

namespace idem::cli {
namespace {

constexpr std::size_t kMaxControlLine = 4096;

std::optional<int> parse_int(std::string_view text) {
  int value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return value;
}

std::vector<std::string_view> split_words(std::string_view line) {
  std::vector<std::string_view> words;
  std::size_t pos = 0;
  while (pos < line.size()) {
    const std::size_t start = line.find_first_not_of(" \t\r", pos);
    if (start == std::string_view::npos) break;
    std::size_t end = line.find_first_of(" \t\r", start);
    if (end == std::string_view::npos) end = line.size();
    words.push_back(line.substr(start, end - start));
    pos = end;
  }
  return words;
}

std::string usage_error(std::string_view usage) {
  return fmt::format("error: usage: {}", usage);
}

/// Runs one control command and returns its one-line answer: `ok` or `error: <reason>`.
std::string run_control_command(DevBroker& broker, const std::vector<std::string_view>& words) {
  const std::string_view cmd = words.front();
  const auto arg_int = [&](std::size_t i) { return parse_int(words[i]); };
  try {
    if (cmd == "create-topic") {
      if (words.size() != 3 || !arg_int(2)) return usage_error("create-topic NAME PARTITIONS");
      broker.create_topic(words[1], *arg_int(2));
    } else if (cmd == "broker-down" || cmd == "broker-up") {
      if (words.size() != 2 || !arg_int(1)) return usage_error(fmt::format("{} ID", cmd));
      if (cmd == "broker-down") {
        broker.set_broker_down(*arg_int(1));
      } else {
        broker.set_broker_up(*arg_int(1));
      }
    } else if (cmd == "rtt") {
      if (words.size() != 3 || !arg_int(1) || !arg_int(2)) return usage_error("rtt ID MS");
      broker.set_broker_rtt(*arg_int(1), std::chrono::milliseconds(*arg_int(2)));
    } else if (cmd == "request-errors") {
      constexpr std::string_view kUsage = "request-errors API_KEY ERR[,ERR...]";
      if (words.size() != 3 || !arg_int(1)) return usage_error(kUsage);
      std::vector<int> codes;
      std::string_view list = words[2];
      while (true) {
        const std::size_t comma = list.find(',');
        const std::optional<int> code = parse_int(list.substr(0, comma));
        if (!code) return usage_error(kUsage);
        codes.push_back(*code);
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
      }
      broker.push_request_errors(*arg_int(1), codes);
    } else if (cmd == "topic-error") {
      if (words.size() != 3 || !arg_int(2)) return usage_error("topic-error NAME ERR");
      broker.set_topic_error(words[1], *arg_int(2));
    } else {
      return fmt::format(
          "error: unknown command '{}' (expected create-topic, broker-down, broker-up, rtt, "
          "request-errors, topic-error)",
          cmd);
    }
  } catch (const Error& e) {
    return fmt::format("error: {}", e.what());
  }
  return "ok";
}

void answer(std::string line) {
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';  // one answer, one line
  }
  std::cout << line << '\n' << std::flush;
}

/// Splits what arrives on stdin into lines and answers each non-blank one.
class ControlChannel {
 public:
  explicit ControlChannel(DevBroker& broker) : broker_(broker) {}

  /// Reads what is available on fd. Returns false at EOF or on a read error.
  bool read_from(int fd) {
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (n <= 0) {
      if (!pending_.empty()) handle_line(pending_);  // a last line without '\n'
      pending_.clear();
      return false;
    }
    pending_.append(buf, static_cast<std::size_t>(n));
    std::size_t newline = 0;
    while ((newline = pending_.find('\n')) != std::string::npos) {
      handle_line(std::string_view(pending_).substr(0, newline));
      pending_.erase(0, newline + 1);
    }
    if (pending_.size() > kMaxControlLine) {
      answer(fmt::format("error: line longer than {} bytes", kMaxControlLine));
      pending_.clear();
      discarding_ = true;  // drop the rest of that line
    }
    return true;
  }

 private:
  void handle_line(std::string_view line) {
    if (discarding_) {
      discarding_ = false;
      return;
    }
    const std::vector<std::string_view> words = split_words(line);
    if (words.empty()) return;  // blank lines get no answer
    answer(run_control_command(broker_, words));
  }

  DevBroker& broker_;
  std::string pending_;
  bool discarding_ = false;
};

[[noreturn]] void fail_system(std::string_view what) {
  throw Error(ErrorCode::Internal, ErrorSource::Internal,
              fmt::format("dev-broker: {}: {}", what, std::strerror(errno)));
}

void run_dev_broker(const DevBrokerSettings& settings) {
  DevBrokerOptions options = settings.options;

  // Before librdkafka starts its threads; the signals then arrive only through fd().
  StopSignals signals;
  DevBroker broker(std::move(options));
  std::cout << broker.bootstrap_servers() << '\n' << std::flush;
  if (::isatty(STDERR_FILENO)) {
    std::cerr << fmt::format("idem dev-broker: {} broker(s) at {}; stop with Ctrl-C or SIGTERM\n",
                             broker.broker_count(), broker.bootstrap_servers());
  }

  ControlChannel control(broker);
  pollfd fds[2] = {{signals.fd(), POLLIN, 0}, {settings.read_stdin ? STDIN_FILENO : -1, POLLIN, 0}};
  while (true) {
    // No timeout: the process only wakes for a signal or a control line.
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      fail_system("poll");
    }
    if ((fds[0].revents & POLLIN) && signals.take()) break;
    if (fds[1].fd >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL))) {
      if ((fds[1].revents & POLLNVAL) || !control.read_from(fds[1].fd)) {
        fds[1].fd = -1;  // EOF: stop reading, keep serving until a signal
      }
    }
  }
  // `broker` goes out of scope here: the cluster closes its connections and stops.
}

}  // namespace

void register_dev_broker(CLI::App& app, ExitCode& exit_code) {
  struct Options {
    std::string brokers;
    std::vector<std::string> topics;
    bool no_stdin = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "dev-broker",
      "Run an in-memory Kafka-protocol broker (librdkafka's mock cluster) until SIGTERM/SIGINT; "
      "prints its bootstrap servers on stdout");
  auto cfg = std::make_shared<ConfigOptions>(cmd);
  cfg->bind(cmd->add_option("--brokers", opts->brokers,
                            "Number of brokers (dev_broker.brokers, default 1)"),
            "dev_broker.brokers");
  cfg->bind(cmd->add_option("--topic", opts->topics,
                            "Topic to create, NAME or NAME:PARTITIONS (3 partitions by default); "
                            "repeatable (dev_broker.topics)"),
            "dev_broker.topics");
  cfg->bind_switch(cmd->add_flag("--no-stdin", opts->no_stdin,
                                 "Do not read control commands from stdin (create-topic, "
                                 "broker-down, broker-up, rtt, request-errors, topic-error) "
                                 "(dev_broker.read_stdin=false)"),
                   "dev_broker.read_stdin", "false");
  // `opts` is captured so the strings the bound flags write into outlive this function.
  cmd->callback([opts, cfg, &exit_code] {
    run_dev_broker(cfg->load().get<DevBrokerSettings>());
    exit_code.value = 0;
  });
}

}  // namespace idem::cli
