// Issue 12: calls/s of idem::http::AsyncClient (one event-loop thread, libcurl multi)
// with 1, 64, 256 and 1024 calls kept in flight, against a loopback cpp-httplib server
// answering after 0 and 10 ms; the synchronous IdempotentClient calling in a loop (one
// call at a time, the billing handler's shape before issue 12) is the same-run baseline.
//
// Each figure is a closed loop for a fixed time: every finished call starts the next, so
// exactly `in flight` calls are outstanding. max_host_connections = in flight, so every
// outstanding call is on the wire; the server has a thread per connection (cpp-httplib),
// which on a small machine is what a high figure measures as much as the client.
//
//   idem_bench_http_client [seconds per figure, default 2]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "http_test_server.hpp"
#include "idem/http/async_client.hpp"
#include "idem/http/idempotent_client.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using idem::http::AsyncClient;
using idem::http::CallResult;
using idem::http::ClientConfig;
using idem::http::IdempotentClient;
using idem::http::Request;

constexpr std::string_view kBody = R"({"order_id":42,"amount":"19.99"})";

struct Figure {
  double calls_per_second = 0;
  std::size_t failed = 0;
  std::size_t connections = 0;
};

// A server answering every call after `latency` (its processing time).
std::unique_ptr<idem::http::test::LoopbackServer> start_server(std::chrono::milliseconds latency,
                                                               std::size_t threads) {
  return std::make_unique<idem::http::test::LoopbackServer>(
      [latency](const httplib::Request&, httplib::Response& res) {
        if (latency.count() > 0) std::this_thread::sleep_for(latency);
        res.set_content(R"({"payment_id":"p-1"})", "application/json");
      },
      threads);
}

Figure run_async(std::chrono::milliseconds latency, std::size_t in_flight, Clock::duration length) {
  auto server = start_server(latency, in_flight);
  // Declared before the client: its destructor runs the last callbacks, which use them.
  std::atomic<std::size_t> next_key{0};
  std::atomic<std::size_t> completed{0};
  std::atomic<std::size_t> failed{0};
  std::atomic<bool> measuring{false};
  std::atomic<bool> stopping{false};
  std::function<void()> start_one;

  ClientConfig config;
  config.max_host_connections = in_flight;
  config.total_timeout = std::chrono::seconds(60);
  AsyncClient client(config);
  // One outstanding chain per slot: each answer starts the slot's next call.
  start_one = [&] {
    client.start(Request{.url = server->url(),
                         .json_body = std::string(kBody),
                         .idempotency_key = fmt::format("bench-{}", next_key.fetch_add(1))},
                 [&](CallResult r) {
                   if (measuring.load()) {
                     completed.fetch_add(1);
                     if (!r.ok()) failed.fetch_add(1);
                   }
                   if (!stopping.load()) start_one();
                 });
  };
  for (std::size_t i = 0; i < in_flight; ++i) start_one();
  std::this_thread::sleep_for(length / 4);  // warm-up: connections opened, caches filled
  const auto started = Clock::now();
  measuring = true;
  std::this_thread::sleep_for(length);
  measuring = false;
  const auto elapsed = Clock::now() - started;
  stopping = true;
  Figure f;
  f.calls_per_second = static_cast<double>(completed.load()) / std::chrono::duration<double>(elapsed).count();
  f.failed = failed.load();
  f.connections = server->connections_accepted();
  return f;  // the client's destructor cancels the chains' last calls
}

Figure run_sync(std::chrono::milliseconds latency, Clock::duration length) {
  auto server = start_server(latency, 4);
  IdempotentClient client;
  std::size_t key = 0;
  const auto call = [&] {
    return client.post_json(server->url(), kBody, fmt::format("sync-{}", key++));
  };
  const auto warm_until = Clock::now() + length / 4;
  while (Clock::now() < warm_until) (void)call();
  std::size_t completed = 0;
  std::size_t failed = 0;
  const auto started = Clock::now();
  const auto until = started + length;
  while (Clock::now() < until) {
    if (!call().ok()) ++failed;
    ++completed;
  }
  const auto elapsed = Clock::now() - started;
  Figure f;
  f.calls_per_second = static_cast<double>(completed) / std::chrono::duration<double>(elapsed).count();
  f.failed = failed;
  f.connections = server->connections_accepted();
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
  if (!(seconds > 0)) {
    std::fprintf(stderr, "usage: %s [seconds per figure > 0]\n", argv[0]);
    return 2;
  }
  const auto length = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  fmt::print("{:>10} {:>26} {:>12} {:>10} {:>12} {:>7}\n", "latency", "client", "calls/s", "vs sync",
             "connections", "failed");
  for (const auto latency : {std::chrono::milliseconds(0), std::chrono::milliseconds(10)}) {
    const Figure sync = run_sync(latency, length);
    fmt::print("{:>8}ms {:>26} {:>12.0f} {:>9.2f}x {:>12} {:>7}\n", latency.count(),
               "IdempotentClient (sync)", sync.calls_per_second, 1.0, sync.connections, sync.failed);
    for (const std::size_t in_flight : {std::size_t{1}, std::size_t{64}, std::size_t{256}, std::size_t{1024}}) {
      const Figure f = run_async(latency, in_flight, length);
      fmt::print("{:>8}ms {:>26} {:>12.0f} {:>9.2f}x {:>12} {:>7}\n", latency.count(),
                 fmt::format("AsyncClient, {} in flight", in_flight), f.calls_per_second,
                 f.calls_per_second / sync.calls_per_second, f.connections, f.failed);
    }
  }
  return 0;
}
