#include "stop_signals.hpp"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "idem/error.hpp"

namespace idem::cli {

namespace {

[[noreturn]] void fail(std::string_view what, int error) {
  throw Error(ErrorCode::Internal, ErrorSource::Internal,
              fmt::format("stop signals: {}: {}", what, std::strerror(error)));
}

}  // namespace

StopSignals::StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  if (const int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr); rc != 0) {
    fail("blocking SIGTERM/SIGINT", rc);
  }
  ::signal(SIGPIPE, SIG_IGN);
  signal_fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd_ < 0) fail("signalfd", errno);
}

StopSignals::~StopSignals() {
  ::close(signal_fd_);
}

bool StopSignals::take() {
  signalfd_siginfo info{};
  return ::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info);
}

void StopSignals::wait() {
  pollfd fds{signal_fd_, POLLIN, 0};
  while (!take()) {
    static_cast<void>(::poll(&fds, 1, -1));  // EINTR or ready: take() decides
  }
}

OnStopSignal::OnStopSignal(StopSignals& signals, std::function<void()> stop) {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (wake_fd_ < 0) fail("eventfd", errno);
  thread_ = std::thread([this, &signals, stop = std::move(stop)] {
    pollfd fds[2] = {{signals.fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    while (true) {
      if (::poll(fds, 2, -1) < 0) continue;  // EINTR
      if (fds[1].revents != 0) return;
      if (signals.take()) stop();
    }
  });
}

OnStopSignal::~OnStopSignal() {
  const std::uint64_t one = 1;
  static_cast<void>(::write(wake_fd_, &one, sizeof one));
  thread_.join();
  ::close(wake_fd_);
}

}  // namespace idem::cli
