#include "idem/http/async_client.hpp"

#include <curl/curl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "http/async_client_impl.hpp"
#include "http/curl_support.hpp"
#include "idem/error.hpp"
#include "idem/retry.hpp"
#include "idem/uuid.hpp"

// The event loop is libcurl's socket interface (curl_multi_socket_action, the shape of
// its hiperfifo.c example) over epoll, written here by hand: libcurl tells us which
// sockets to watch (CURLMOPT_SOCKETFUNCTION) and when its next timeout is due
// (CURLMOPT_TIMERFUNCTION), and each turn hands it only the sockets that are ready.
// curl_multi_poll + curl_multi_perform (multi-app.c) was simpler but costs O(transfers)
// per turn: poll() over every socket, and perform walks every transfer (each checking
// its socket with another poll). With 1,024 calls in flight that was about a fifth of the
// machine's CPU in bench_billing (perf: libcurl 13%, the kernel's poll 5%). An event
// library (libevent, libuv) would add a dependency for about forty lines of epoll.
// An eventfd in the same epoll set lets start() and the destructor wake the loop, and
// our own timers (the waits between attempts) only shorten the epoll timeout.
//
// Calls beyond max_host_connections wait in a queue per host here, not in libcurl's
// pending queue: libcurl starts an attempt's timeout clock when the handle is added, so a
// call queued behind slow ones would time out (and spend an attempt) without having been
// sent. Handing libcurl only as many transfers per host as it may have connections keeps
// total_timeout about the request; CURLMOPT_MAX_HOST_CONNECTIONS stays set as the limit
// itself, and libcurl's connection cache still decides which connection a transfer reuses.
//
// Each host also has its circuit breaker (idem/http/circuit_breaker.hpp): while it is open,
// a call about to start an attempt waits in the host's `held` queue instead, and the loop
// sends one of them as the probe when the breaker's time for one has come.

namespace idem::http {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The longest the loop sleeps when nothing is due. New calls and the destructor wake it
// at once, so this is no tick, only a bound on a lost wakeup's cost.
constexpr milliseconds kIdlePoll{10000};

}  // namespace

void AsyncClient::Impl::run() noexcept {
  std::array<epoll_event, 256> ready{};
  int running = 0;  // libcurl's count; the loop keeps its own (transferring)
  while (take_new_calls()) {
    start_due_retries(Clock::now());
    start_due_probes(Clock::now());
    // Returns when a socket is ready, libcurl's timeout or the earliest retry is due, or
    // another thread wrote the eventfd. EINTR (a signal) is one more turn. A transfer
    // just added asks for a timeout of 0 (on_timer), so the wait does not hold it back.
    const int n =
        ::epoll_wait(epoll.get(), ready.data(), static_cast<int>(ready.size()), wait_timeout_ms());
    for (int i = 0; i < n; ++i) {
      const epoll_event& event = ready[static_cast<std::size_t>(i)];
      if (event.data.fd == wakeup.get()) {
        drain_wakeups();
        continue;
      }
      int mask = 0;
      if ((event.events & EPOLLIN) != 0) mask |= CURL_CSELECT_IN;
      if ((event.events & EPOLLOUT) != 0) mask |= CURL_CSELECT_OUT;
      if ((event.events & (EPOLLERR | EPOLLHUP)) != 0) mask |= CURL_CSELECT_ERR;
      // A socket an earlier action of this turn closed is unknown to libcurl by now: it
      // answers CURLM_BAD_SOCKET and does nothing, which is right.
      curl_multi_socket_action(multi.get(), event.data.fd, mask, &running);
    }
    if (curl_due && *curl_due <= Clock::now()) {
      curl_due.reset();
      curl_multi_socket_action(multi.get(), CURL_SOCKET_TIMEOUT, 0, &running);
    }
    finish_transfers();
  }
  cancel_everything();
}

int AsyncClient::Impl::on_socket(CURL* /*easy*/, curl_socket_t socket, int what, void* self,
                                 void* /*socket_data*/) noexcept {
  const int epoll_fd = static_cast<Impl*>(self)->epoll.get();
  if (what == CURL_POLL_REMOVE) {
    // libcurl may already have closed it (epoll then dropped it itself): nothing to undo.
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, socket, nullptr);
    return 0;
  }
  epoll_event event{};
  if ((what & CURL_POLL_IN) != 0) event.events |= EPOLLIN;
  if ((what & CURL_POLL_OUT) != 0) event.events |= EPOLLOUT;
  event.data.fd = socket;
  if (::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, socket, &event) == 0) return 0;
  if (errno == ENOENT && ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, socket, &event) == 0) return 0;
  return -1;  // libcurl fails the transfers of this socket (an attempt that failed: retried)
}

int AsyncClient::Impl::on_timer(CURLM* /*multi*/, long timeout_ms, void* self) noexcept {
  auto& due = static_cast<Impl*>(self)->curl_due;
  if (timeout_ms < 0) {
    due.reset();
  } else {
    due = Clock::now() + milliseconds(timeout_ms);
  }
  return 0;
}

void AsyncClient::Impl::wake() const noexcept {
  const std::uint64_t one = 1;
  // EAGAIN means the counter is full of unread wakeups: the loop wakes anyway.
  [[maybe_unused]] const auto written = ::write(wakeup.get(), &one, sizeof one);
}

void AsyncClient::Impl::drain_wakeups() const noexcept {
  std::uint64_t count = 0;
  [[maybe_unused]] const auto read = ::read(wakeup.get(), &count, sizeof count);
}

bool AsyncClient::Impl::take_new_calls() {
  std::vector<std::unique_ptr<Call>> taken;
  {
    std::lock_guard lock(mutex);
    if (stopping) return false;
    taken.swap(new_calls);
  }
  const auto now = Clock::now();
  for (auto& call : taken) {
    // A first attempt asked to wait (Request::not_before) waits as a retry does.
    const auto not_before = call->request.not_before;
    if (not_before > now) {
      waiting.emplace(not_before, std::move(call));
    } else {
      start_attempt(std::move(call));
    }
  }
  return true;
}

void AsyncClient::Impl::start_due_retries(Clock::time_point now) {
  while (!waiting.empty() && waiting.begin()->first <= now) {
    auto due = waiting.extract(waiting.begin());
    start_attempt(std::move(due.mapped()));
  }
}

int AsyncClient::Impl::wait_timeout_ms() const {
  std::optional<Clock::time_point> due = curl_due;
  if (!waiting.empty() && (!due || waiting.begin()->first < *due)) due = waiting.begin()->first;
  for (const auto& [host, slots] : hosts) {
    const auto probe = slots.breaker.next_probe();
    if (probe && !(slots.held.empty() && slots.queued.empty()) && (!due || *probe < *due))
      due = probe;
  }
  if (!due) return static_cast<int>(kIdlePoll.count());
  // Rounded up: a wait rounded down to 0 ms would spin until the timer is due.
  const auto until_due = std::chrono::ceil<milliseconds>(*due - Clock::now());
  return static_cast<int>(std::clamp(until_due, milliseconds(0), kIdlePoll).count());
}

void AsyncClient::Impl::notify_retry(int attempt, milliseconds wait,
                                     std::string_view why) const noexcept {
  if (!config.on_retry) return;
  try {
    config.on_retry(attempt, wait, why);
  } catch (...) {
    // An observer's failure must not end the loop that drives every other call.
  }
}

void AsyncClient::Impl::complete(std::unique_ptr<Call> call, CallStatus status) noexcept {
  call->result.status = status;
  auto done = std::move(call->done);
  CallResult result = std::move(call->result);
  call.reset();  // frees the transfer before the callback, which may start the next call
  try {
    done(std::move(result));
  } catch (...) {
    // The callback's contract is not to throw; if it does, the loop still has to drive
    // every other call, so the exception ends here.
  }
  in_flight.fetch_sub(1, std::memory_order_acq_rel);
}

void AsyncClient::Impl::cancel_everything() {
  const auto cancel = [this](std::unique_ptr<Call> call) {
    call->result.error = "cancelled";
    complete(std::move(call), CallStatus::RetriesExhausted);
  };
  auto in_transfer = std::move(transferring);
  transferring.clear();
  for (auto& [easy, call] : in_transfer) {
    curl_multi_remove_handle(multi.get(), easy);
    call->result.http_status = 0;  // this attempt got no answer
    call->result.body.clear();
    cancel(std::move(call));
  }
  auto between_attempts = std::move(waiting);
  waiting.clear();
  for (auto& [due, call] : between_attempts) cancel(std::move(call));
  for (auto& [host, slots] : hosts) {
    auto queued = std::move(slots.queued);
    slots.queued.clear();
    for (auto& call : queued) cancel(std::move(call));
    auto held = std::move(slots.held);
    slots.held.clear();
    for (auto& call : held) cancel(std::move(call));
  }
  // Calls started before the loop ended, including by the callbacks above. Once
  // `closed` is set, start() cancels on its caller's thread instead.
  while (true) {
    std::vector<std::unique_ptr<Call>> taken;
    {
      std::lock_guard lock(mutex);
      if (new_calls.empty()) {
        closed = true;
        return;
      }
      taken.swap(new_calls);
    }
    for (auto& call : taken) cancel(std::move(call));
  }
}

AsyncClient::AsyncClient(ClientConfig config) {
  if (config.max_attempts < 1) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "http client: max_attempts must be >= 1");
  }
  if (config.connect_timeout.count() <= 0 || config.total_timeout.count() <= 0) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "http client: connect_timeout and total_timeout must be positive");
  }
  if (config.policy.max_retry_after.count() < 0) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "http client: policy.max_retry_after must not be negative");
  }
  if (config.max_host_connections < 1 ||
      config.max_host_connections > static_cast<std::size_t>(LONG_MAX)) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "http client: max_host_connections must be >= 1");
  }
  detail::init_curl_once();
  impl_ = std::make_unique<Impl>(std::move(config));  // Backoff checks the retry policy
  if (impl_->epoll.get() < 0 || impl_->wakeup.get() < 0) {
    throw Error(ErrorCode::Internal, ErrorSource::Http,
                fmt::format("http client: epoll/eventfd: {}", std::strerror(errno)));
  }
  epoll_event wakeups{};
  wakeups.events = EPOLLIN;
  wakeups.data.fd = impl_->wakeup.get();
  if (::epoll_ctl(impl_->epoll.get(), EPOLL_CTL_ADD, impl_->wakeup.get(), &wakeups) != 0) {
    throw Error(ErrorCode::Internal, ErrorSource::Http,
                fmt::format("http client: epoll_ctl: {}", std::strerror(errno)));
  }
  impl_->multi.reset(curl_multi_init());
  if (!impl_->multi) throw Error(ErrorCode::Internal, ErrorSource::Http, "curl_multi_init failed");
  CURLM* multi = impl_->multi.get();
  curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, &Impl::on_socket);
  curl_multi_setopt(multi, CURLMOPT_SOCKETDATA, impl_.get());
  curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, &Impl::on_timer);
  curl_multi_setopt(multi, CURLMOPT_TIMERDATA, impl_.get());
  // The loop queues calls beyond the limit itself (see the top of this file); finished
  // connections stay in the multi handle's cache for the next call (keep-alive).
  curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS,
                    static_cast<long>(impl_->config.max_host_connections));
  // libcurl's default cache holds 4 idle connections per transfer added at that moment:
  // when many calls finish in one turn, before the next ones are added, it closed
  // connections the next calls then opened again (at 0 ms, 64 in flight: 104-125
  // connections in 2 s instead of 64). A fixed size, room for a few hosts at the limit.
  const long cache = static_cast<long>(
      std::min<std::size_t>(impl_->config.max_host_connections, LONG_MAX / 4) * 4);
  curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, cache);
  impl_->loop = std::thread([impl = impl_.get()] { impl->run(); });
}

AsyncClient::~AsyncClient() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake();
  impl_->loop.join();
}

void AsyncClient::start(Request request, std::function<void(CallResult)> done) {
  validate_idempotency_key(request.idempotency_key);
  detail::validate_header_name(request.idempotency_header);
  detail::validate_header_name(request.method);  // a method is a token, as a header name
  detail::validate_header_value("Content-Type", request.content_type);
  for (const auto& [name, value] : request.extra_headers) {
    detail::validate_header_name(name);
    detail::validate_header_value(name, value);
  }
  if (!done) throw Error(ErrorCode::InvalidArgument, ErrorSource::Http, "start: no callback");
  auto call = std::make_unique<detail::Call>();
  call->url = detail::parse_http_url(request.url);
  call->host = detail::host_of(call->url.get());
  call->request = std::move(request);
  call->done = std::move(done);

  impl_->in_flight.fetch_add(1, std::memory_order_acq_rel);
  bool wake = false;
  std::unique_ptr<detail::Call> refused;  // the loop has ended
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->closed) {
      refused = std::move(call);
    } else {
      // One wakeup per batch: a non-empty queue already has one on its way.
      wake = impl_->new_calls.empty();
      impl_->new_calls.push_back(std::move(call));
    }
  }
  if (refused) {
    refused->result.error = "cancelled";
    impl_->complete(std::move(refused), CallStatus::RetriesExhausted);
    return;
  }
  if (wake) impl_->wake();
}

std::size_t AsyncClient::in_flight() const noexcept {
  return impl_->in_flight.load(std::memory_order_acquire);
}

}  // namespace idem::http