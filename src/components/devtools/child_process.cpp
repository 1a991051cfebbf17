#include "idem/devtools/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

extern char** environ;  // NOLINT: POSIX

namespace idem {

namespace {

using SteadyClock = std::chrono::steady_clock;

[[noreturn]] void throw_errno(const char* what) {
  throw std::system_error(errno, std::generic_category(), what);
}

int remaining_ms(SteadyClock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
  if (left.count() <= 0) return 0;
  return left.count() > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(left.count());
}

/// poll(2) one descriptor for input until `deadline`; false on timeout.
bool wait_readable(int fd, SteadyClock::time_point deadline) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return true;  // readable, hung up or error: read() tells which
    if (n == 0) return false;
    if (errno != EINTR) throw_errno("poll");
  }
}

int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -1000;  // stopped/continued are not requested (no WUNTRACED), so not reached
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

// ---- LineReader ------------------------------------------------------------------

std::optional<std::string> LineReader::take_line() {
  const auto nl = buffer_.find('\n');
  if (nl == std::string::npos) return std::nullopt;
  std::string line = buffer_.substr(0, nl);
  buffer_.erase(0, nl + 1);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

std::optional<std::string> LineReader::read_line(std::chrono::milliseconds timeout) {
  const auto deadline = SteadyClock::now() + timeout;
  for (;;) {
    if (auto line = take_line()) return line;
    if (eof_) {
      if (buffer_.empty()) return std::nullopt;
      std::string last = std::move(buffer_);
      buffer_.clear();
      return last;
    }
    if (!wait_readable(fd_, deadline)) return std::nullopt;
    char chunk[4096];
    const ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n > 0) {
      buffer_.append(chunk, static_cast<std::size_t>(n));
    } else if (n == 0) {
      eof_ = true;
    } else if (errno != EINTR && errno != EAGAIN) {
      throw_errno("read");
    }
  }
}

// ---- ChildProcess ------------------------------------------------------------------

ChildProcess::ChildProcess(pid_t pid, int stdin_fd, int stdout_fd) noexcept
    : pid_(pid),
      stdin_fd_(stdin_fd),
      stdout_fd_(stdout_fd),
      pidfd_(open_pidfd(pid)),
      reader_(stdout_fd) {}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      stdin_fd_(std::exchange(other.stdin_fd_, -1)),
      stdout_fd_(std::exchange(other.stdout_fd_, -1)),
      pidfd_(std::exchange(other.pidfd_, -1)),
      status_(other.status_),
      reader_(std::move(other.reader_)) {
  other.reader_ = LineReader(-1);
}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    reap_blocking();
    close_all();
    pid_ = std::exchange(other.pid_, -1);
    stdin_fd_ = std::exchange(other.stdin_fd_, -1);
    stdout_fd_ = std::exchange(other.stdout_fd_, -1);
    pidfd_ = std::exchange(other.pidfd_, -1);
    status_ = other.status_;
    reader_ = std::move(other.reader_);
    other.reader_ = LineReader(-1);
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  reap_blocking();
  close_all();
}

void ChildProcess::reap_blocking() noexcept {
  if (pid_ <= 0 || status_) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  // After SIGKILL the child exits without running any code of its own, so this
  // returns promptly.
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  status_ = decode_status(status);
}

void ChildProcess::close_all() noexcept {
  for (int* fd : {&stdin_fd_, &stdout_fd_, &pidfd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

ChildProcess ChildProcess::spawn(const std::string& path, const std::vector<std::string>& args,
                                 const Env& extra_env, const std::string& stderr_path) {
  // Everything the child needs is built before fork(): between fork and exec in a
  // multi-threaded process only async-signal-safe calls are allowed (no malloc).
  std::vector<std::string> argv_store;
  argv_store.reserve(args.size() + 1);
  argv_store.push_back(path);
  argv_store.insert(argv_store.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(argv_store.size() + 1);
  for (auto& a : argv_store) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::vector<std::string> env_store;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view key = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& [k, v] : extra_env) overridden = overridden || k == key;
    if (!overridden) env_store.emplace_back(entry);
  }
  for (const auto& [k, v] : extra_env) env_store.push_back(std::string(k).append("=").append(v));
  std::vector<char*> envp;
  envp.reserve(env_store.size() + 1);
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);

  // O_CLOEXEC from creation, so a child spawned concurrently never inherits another
  // child's pipe ends (which would keep that child's stdin open after close_stdin()).
  int in[2] = {-1, -1};
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  auto close_pair = [](int(&p)[2]) {
    for (int& fd : p) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  };
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    close_pair(in);
    close_pair(out);
    close_pair(err);
    throw std::system_error(e, std::generic_category(), "pipe2");
  }

  int stderr_fd = -1;
  if (!stderr_path.empty()) {
    stderr_fd = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (stderr_fd < 0) {
      const int e = errno;
      close_pair(in);
      close_pair(out);
      close_pair(err);
      throw std::system_error(e, std::generic_category(), "open " + stderr_path);
    }
  }

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    close_pair(in);
    close_pair(out);
    close_pair(err);
    if (stderr_fd >= 0) ::close(stderr_fd);
    throw std::system_error(e, std::generic_category(), "fork");
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
    // dup2 onto 0/1 clears O_CLOEXEC on the new descriptors only.
    if (::dup2(in[0], STDIN_FILENO) < 0 || ::dup2(out[1], STDOUT_FILENO) < 0 ||
        (stderr_fd >= 0 && ::dup2(stderr_fd, STDERR_FILENO) < 0)) {
      const int e = errno;
      (void)!::write(err[1], &e, sizeof e);
      ::_exit(127);
    }
    ::execve(path.c_str(), argv.data(), envp.data());
    const int e = errno;
    (void)!::write(err[1], &e, sizeof e);
    ::_exit(127);
  }

  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  if (stderr_fd >= 0) ::close(stderr_fd);
  ChildProcess child(pid, in[1], out[0]);

  // The error pipe closes on a successful exec (O_CLOEXEC) or carries exec's errno.
  int exec_errno = 0;
  const auto deadline = SteadyClock::now() + std::chrono::seconds(30);
  ssize_t n = -1;
  if (wait_readable(err[0], deadline)) {
    do {
      n = ::read(err[0], &exec_errno, sizeof exec_errno);
    } while (n < 0 && errno == EINTR);
  }
  ::close(err[0]);
  if (n != 0) {
    // n > 0: exec failed in the child; n < 0: no answer in time. Either way the child
    // is no use; its destructor kills and reaps it.
    throw std::system_error(n > 0 ? exec_errno : ETIMEDOUT, std::generic_category(),
                            fmt::format("cannot start '{}'", path));
  }
  return child;
}

std::optional<std::string> ChildProcess::read_line(std::chrono::milliseconds timeout) {
  if (stdout_fd_ < 0) return std::nullopt;
  return reader_.read_line(timeout);
}

void ChildProcess::write_line(std::string_view line) {
  if (stdin_fd_ < 0)
    throw std::system_error(EBADF, std::generic_category(), "child stdin is closed");
  std::string data(line);
  data += '\n';
  // A child that exited makes write() raise SIGPIPE, which would kill the test process.
  // Block it for this thread, and consume it if it became pending.
  sigset_t pipe_set;
  sigset_t old_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  std::size_t done = 0;
  int error = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(stdin_fd_, data.data() + done, data.size() - done);
    if (n >= 0) {
      done += static_cast<std::size_t>(n);
    } else if (errno != EINTR) {
      error = errno;
      break;
    }
  }
  if (error == EPIPE) {
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  if (error != 0) throw std::system_error(error, std::generic_category(), "write to child stdin");
}

void ChildProcess::close_stdin() noexcept {
  if (stdin_fd_ >= 0) ::close(stdin_fd_);
  stdin_fd_ = -1;
}

void ChildProcess::kill(int sig) noexcept {
  if (pid_ > 0 && !status_) ::kill(pid_, sig);
}

std::optional<int> ChildProcess::wait_for(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return std::nullopt;
  if (status_) return status_;
  const auto deadline = SteadyClock::now() + timeout;
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      status_ = decode_status(status);
      return status_;
    }
    if (r < 0 && errno != EINTR) throw_errno("waitpid");
    if (r < 0) continue;
    if (SteadyClock::now() >= deadline) return std::nullopt;
    if (pidfd_ >= 0) {
      // The pidfd becomes readable when the child exits.
      if (!wait_readable(pidfd_, deadline)) return std::nullopt;
    } else {
      // No pidfd (kernel < 5.3): a child that exits closes its stdout; wait for that
      // end of output, dropping any lines nobody read.
      if (stdout_fd_ < 0 || reader_.eof()) {
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        status_ = decode_status(status);
        return status_;
      }
      (void)reader_.read_line(std::chrono::milliseconds(remaining_ms(deadline)));
    }
  }
}

int ChildProcess::wait(std::chrono::milliseconds timeout) {
  if (auto status = wait_for(timeout)) return *status;
  reap_blocking();
  throw std::runtime_error(
      fmt::format("child {} did not exit within {} ms; killed it", pid_, timeout.count()));
}

bool expect_line(ChildProcess& child, std::string_view expected, std::chrono::milliseconds timeout,
                 std::vector<std::string>* seen) {
  const auto deadline = SteadyClock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (left.count() < 0) return false;
    auto line = child.read_line(left);
    if (!line) return false;
    if (*line == expected) return true;
    if (seen != nullptr) seen->push_back(std::move(*line));
  }
}

std::optional<std::string> read_line_starting_with(ChildProcess& child, std::string_view prefix,
                                                   std::chrono::milliseconds timeout) {
  const auto deadline = SteadyClock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (left.count() < 0) return std::nullopt;
    auto line = child.read_line(left);
    if (!line) return std::nullopt;
    if (line->starts_with(prefix)) return line;
  }
}

}  // namespace idem
