#pragma once
// AsyncClient's insides, shared by its two source files: async_client.cpp (the event loop,
// start() and the stop) and async_attempts.cpp (one attempt's life: a connection slot, the
// transfer, what its end means, the endpoint's circuit breaker).
#include <curl/curl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "http/curl_support.hpp"
#include "http/endpoint_breaker.hpp"
#include "idem/http/async_client.hpp"
#include "idem/retry.hpp"

namespace idem::http {

namespace detail {

struct Call;

/// Closes a file descriptor it owns (the loop's epoll set and its wakeup eventfd).
class OwnedFd {
 public:
  explicit OwnedFd(int fd) : fd_(fd) {}
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_;
};

/// The transfers of one host (scheme, host, port) handed to libcurl, the calls waiting
/// for one of its connections, and its circuit breaker with the calls waiting for it.
struct HostSlots {
  explicit HostSlots(const BreakerPolicy& policy) : breaker(policy) {}
  std::size_t active = 0;
  std::deque<std::unique_ptr<Call>> queued;
  detail::EndpointBreaker breaker;
  std::deque<std::unique_ptr<Call>> held;  // while the breaker is open
};

/// One call: the request, its caller's callback, and the state of its current attempt.
struct Call {
  Request request;
  std::function<void(CallResult)> done;
  CallResult result;
  detail::Url url;
  detail::EasyHandle easy;           // created for the first attempt, re-added for each retry
  detail::HeaderList headers;        // rebuilt per attempt only when every attempt gets a new key
  std::string response;              // the body of the current attempt's answer
  ResponseHeaders response_headers;  // and its header fields
  std::string host;                  // scheme://host:port, the connection limit's key
  HostSlots* slots = nullptr;        // of `host`; set by the loop
  bool probe = false;                // this attempt is its host's breaker's probe
  // Attempts spent before the call waited out an outage: they do not count toward
  // max_attempts, so a call sent again when its endpoint is back gets all of them.
  int attempts_forgiven = 0;
};

}  // namespace detail

struct AsyncClient::Impl {
  using Clock = std::chrono::steady_clock;
  using milliseconds = std::chrono::milliseconds;
  using Call = detail::Call;
  using HostSlots = detail::HostSlots;
  using OwnedFd = detail::OwnedFd;

  explicit Impl(ClientConfig c)
      : config(std::move(c)),
        backoff(config.retry),
        epoll(::epoll_create1(EPOLL_CLOEXEC)),
        wakeup(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

  // noexcept: an allocation failure inside the loop ends the process, since no caller
  // is there to receive it and the calls' callbacks could no longer be guaranteed.
  void run() noexcept;

  // The loop's steps; all run on the loop thread.
  [[nodiscard]] bool take_new_calls();
  void start_due_retries(Clock::time_point now);
  void start_attempt(std::unique_ptr<Call> call);
  void take_slot(std::unique_ptr<Call> call);
  void send_attempt(std::unique_ptr<Call> call);
  void release_slot(HostSlots& slots);
  void start_due_probes(Clock::time_point now);
  [[nodiscard]] bool through_breaker(std::unique_ptr<Call>& call);
  void release_held(HostSlots& slots);
  [[nodiscard]] bool prepare_transfer(Call& call);
  void finish_transfers();
  void attempt_ended(std::unique_ptr<Call> call, CURLcode code);
  [[nodiscard]] int wait_timeout_ms() const;
  void wake() const noexcept;
  void drain_wakeups() const noexcept;
  // libcurl's callbacks (CURLMOPT_SOCKETFUNCTION, CURLMOPT_TIMERFUNCTION), called on the
  // loop thread from inside curl_multi_socket_action or curl_multi_add_handle/remove_handle.
  static int on_socket(CURL* easy, curl_socket_t socket, int what, void* self,
                       void* socket_data) noexcept;
  static int on_timer(CURLM* multi, long timeout_ms, void* self) noexcept;
  void cancel_everything();
  void notify_retry(int attempt, milliseconds wait, std::string_view why) const noexcept;
  void notify_breaker(const std::string& host, bool open, std::string_view why) const noexcept;
  void complete(std::unique_ptr<Call> call, CallStatus status) noexcept;

  const ClientConfig config;
  idem::Backoff backoff;  // loop thread only (its random generator is not thread-safe)
  // Declared before `multi`, destroyed after it: curl_multi_cleanup still reports the
  // sockets it closes to on_socket.
  OwnedFd epoll;
  OwnedFd wakeup;
  detail::MultiHandle multi;
  std::optional<Clock::time_point> curl_due;  // loop thread only: libcurl's next timeout
  std::atomic<std::size_t> in_flight{0};

  std::mutex mutex;
  std::vector<std::unique_ptr<Call>> new_calls;  // guarded by mutex
  bool stopping = false;                         // guarded by mutex: the destructor runs
  // guarded by mutex: the loop has ended. A start() racing the destructor from another
  // thread is the caller's bug, but its callback still runs once instead of never.
  bool closed = false;

  // Loop thread only. Every started call is in exactly one of `transferring`, `waiting`
  // or a host's `queued` (or on its way between them in a function of the loop).
  std::unordered_map<CURL*, std::unique_ptr<Call>> transferring;
  std::multimap<Clock::time_point, std::unique_ptr<Call>> waiting;  // backoff timers
  // Never erased: calls keep a pointer to their host's entry (unordered_map entries stay
  // put), and a client talks to few hosts.
  std::unordered_map<std::string, HostSlots> hosts;

  std::thread loop;
};

}  // namespace idem::http
