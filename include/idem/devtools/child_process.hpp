#pragma once
/// \file
/// Child processes (Linux): fork/exec a program, talk to it over its stdin/stdout line
/// by line, kill it, reap it. `idem demo` runs the relay, the consumers and the payment
/// provider as children it SIGKILLs and restarts; the crash and race tests do the same
/// with the programs of tests/children/.
///
/// Synchronisation is always by message ("ready", "listening ..."), never by sleeping,
/// and every wait takes a deadline.
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace idem {

/// Reads '\n'-terminated lines from a file descriptor (which it does not own),
/// buffering whatever arrives after the line it returns.
class LineReader {
 public:
  explicit LineReader(int fd) noexcept : fd_(fd) {}

  /// The next line, without its '\n' (and without a '\r' before it). nullopt when
  /// `timeout` passes first or at end of input (eof() tells which). A last line
  /// without '\n' is returned at end of input. Throws std::system_error on a read error.
  [[nodiscard]] std::optional<std::string> read_line(std::chrono::milliseconds timeout);
  /// True once the writer closed its end and every buffered line was returned.
  [[nodiscard]] bool eof() const noexcept { return eof_ && buffer_.empty(); }

 private:
  std::optional<std::string> take_line();

  int fd_;
  std::string buffer_;
  bool eof_ = false;
};

/// A child process with its stdin and stdout connected to pipes; stderr is inherited
/// (a test's children show their diagnostics in the test log) or appended to a file.
/// Move-only. The destructor SIGKILLs and reaps a child that is still running, so a
/// failing caller leaves no process behind.
///
/// Children also get PR_SET_PDEATHSIG=SIGKILL: if the parent dies, they die too.
/// (Linux delivers that signal when the *thread* that forked exits, so spawn children
/// from the thread that outlives them, normally the main thread.)
class ChildProcess {
 public:
  using Env = std::vector<std::pair<std::string, std::string>>;

  /// Starts `path` with `args` (argv[0] is `path`) and the parent's environment plus
  /// `extra_env` (which overrides variables of the same name). A non-empty
  /// `stderr_path` receives the child's stderr (created, or appended to). Throws
  /// std::system_error when the program cannot be started (including exec failing in
  /// the child, or the stderr file not opening).
  [[nodiscard]] static ChildProcess spawn(const std::string& path,
                                          const std::vector<std::string>& args,
                                          const Env& extra_env = {},
                                          const std::string& stderr_path = {});

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }

  /// The next line the child wrote to stdout; nullopt on timeout or when the child
  /// closed stdout (exited). See LineReader::read_line.
  [[nodiscard]] std::optional<std::string> read_line(std::chrono::milliseconds timeout);
  /// True once the child's stdout is closed and fully read.
  [[nodiscard]] bool stdout_closed() const noexcept { return reader_.eof(); }

  /// Writes `line` plus '\n' to the child's stdin. Throws std::system_error if the
  /// child no longer reads it (EPIPE; SIGPIPE is blocked for the call, never raised).
  void write_line(std::string_view line);
  /// Closes the child's stdin: it reads end of input.
  void close_stdin() noexcept;

  /// Sends `sig` (no-op once the child was reaped).
  void kill(int sig) noexcept;

  /// Waits up to `timeout` for the child to exit. Returns its exit status, or minus
  /// the signal number that killed it; nullopt if it is still running.
  [[nodiscard]] std::optional<int> wait_for(std::chrono::milliseconds timeout);
  /// Like wait_for, but a child still running after `timeout` is SIGKILLed, reaped,
  /// and reported as std::runtime_error.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(30));

 private:
  ChildProcess(pid_t pid, int stdin_fd, int stdout_fd) noexcept;
  void reap_blocking() noexcept;
  void close_all() noexcept;

  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  int pidfd_ = -1;  // Linux pidfd: pollable exit notification, so waits can have deadlines
  std::optional<int> status_;
  LineReader reader_{-1};
};

/// Reads lines from `child` until one equals `expected`, up to `timeout` in total.
/// Returns false on timeout or end of output; `seen` (if given) collects the other lines.
[[nodiscard]] bool expect_line(ChildProcess& child, std::string_view expected,
                               std::chrono::milliseconds timeout,
                               std::vector<std::string>* seen = nullptr);

/// Reads lines from `child` until one starts with `prefix` and returns it; nullopt when
/// `timeout` (in total) passes first or the child closes its stdout.
[[nodiscard]] std::optional<std::string> read_line_starting_with(ChildProcess& child,
                                                                 std::string_view prefix,
                                                                 std::chrono::milliseconds timeout);

}  // namespace idem
