// Calls/s of idem::http::AsyncClient (one event-loop thread, libcurl multi)
// with 1, 64, 256 and 1024 calls kept in flight, against a loopback cpp-httplib server
// answering after 0 and 10 ms; the synchronous IdempotentClient calling in a loop (one
// call at a time, the billing handler's shape before the concurrent effect path) is the same-run
// baseline. A plain libcurl easy-handle loop on the calling thread (what IdempotentClient was
// before it became an AsyncClient waited on) shows what that unification costs a lone caller.
//
// Each figure is a closed loop for a fixed time: every finished call starts the next, so
// exactly `in flight` calls are outstanding, over at most `connections` connections
// (max_host_connections; calls beyond it queue in the client). The server is a thread per
// connection (cpp-httplib, whose idle keep-alive threads poll every 10 ms): at 1024
// connections on a small machine a figure measures the server more than the client,
// hence 1024 in flight both over 256 connections and over 1024.
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

#include <curl/curl.h>
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

Figure run_async(std::chrono::milliseconds latency, std::size_t in_flight, std::size_t connections,
                 Clock::duration length) {
  auto server = start_server(latency, connections);
  // Declared before the client: its destructor runs the last callbacks, which use them.
  std::atomic<std::size_t> next_key{0};
  std::atomic<std::size_t> completed{0};
  std::atomic<std::size_t> failed{0};
  std::atomic<bool> stopping{false};
  std::function<void()> start_one;

  ClientConfig config;
  config.max_host_connections = connections;
  config.total_timeout = std::chrono::seconds(60);
  AsyncClient client(config);
  // One outstanding chain per slot: each answer starts the slot's next call.
  start_one = [&] {
    client.start(Request{.url = server->url(),
                         .body = std::string(kBody),
                         .idempotency_key = fmt::format("bench-{}", next_key.fetch_add(1))},
                 [&](CallResult r) {
                   if (!r.ok()) failed.fetch_add(1);
                   completed.fetch_add(1);
                   if (!stopping.load()) start_one();
                 });
  };
  for (std::size_t i = 0; i < in_flight; ++i) start_one();
  // Warm-up: every connection opened and used twice (the server's threads, too, have run).
  const auto warm_until = Clock::now() + length / 4;
  while (completed.load() < 2 * in_flight || Clock::now() < warm_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::size_t completed_before = completed.load();
  const std::size_t failed_before = failed.load();
  const auto started = Clock::now();
  std::this_thread::sleep_for(length);
  const std::size_t measured = completed.load() - completed_before;
  const auto elapsed = Clock::now() - started;
  stopping = true;
  Figure f;
  f.calls_per_second =
      static_cast<double>(measured) / std::chrono::duration<double>(elapsed).count();
  f.failed = failed.load() - failed_before;
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
  f.calls_per_second =
      static_cast<double>(completed) / std::chrono::duration<double>(elapsed).count();
  f.failed = failed;
  f.connections = server->connections_accepted();
  return f;
}

// The same POST as IdempotentClient's first attempt, with one reused easy handle.
Figure run_easy_loop(std::chrono::milliseconds latency, Clock::duration length) {
  auto server = start_server(latency, 4);
  CURL* curl = curl_easy_init();
  const std::string url = server->url();
  std::string body;
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  headers = curl_slist_append(headers, "Expect:");
  std::size_t key = 0;
  const auto call = [&] {
    const std::string key_header = fmt::format("Idempotency-Key: easy-{}", key++);
    curl_slist* with_key = curl_slist_append(nullptr, key_header.c_str());
    with_key->next = headers;
    body.clear();
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, kBody.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(kBody.size()));
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, with_key);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(
        curl, CURLOPT_WRITEFUNCTION, +[](char* data, std::size_t size, std::size_t n, void* out) {
          static_cast<std::string*>(out)->append(data, size * n);
          return size * n;
        });
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
    const CURLcode code = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    with_key->next = nullptr;
    curl_slist_free_all(with_key);
    return code == CURLE_OK && status == 200;
  };
  const auto warm_until = Clock::now() + length / 4;
  while (Clock::now() < warm_until) (void)call();
  std::size_t completed = 0;
  std::size_t failed = 0;
  const auto started = Clock::now();
  const auto until = started + length;
  while (Clock::now() < until) {
    if (!call()) ++failed;
    ++completed;
  }
  const auto elapsed = Clock::now() - started;
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  Figure f;
  f.calls_per_second =
      static_cast<double>(completed) / std::chrono::duration<double>(elapsed).count();
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
  const auto length =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  fmt::print("{:>8} {:>34} {:>10} {:>9} {:>12} {:>7}\n", "latency", "client", "calls/s", "vs sync",
             "connections", "failed");
  const auto row = [](std::chrono::milliseconds latency, const std::string& client, const Figure& f,
                      double sync_rate) {
    fmt::print("{:>6}ms {:>34} {:>10.0f} {:>8.2f}x {:>12} {:>7}\n", latency.count(), client,
               f.calls_per_second, f.calls_per_second / sync_rate, f.connections, f.failed);
  };
  struct Shape {
    std::size_t in_flight;
    std::size_t connections;
  };
  constexpr Shape kShapes[] = {{1, 1}, {64, 64}, {256, 256}, {1024, 256}, {1024, 1024}};
  for (const auto latency : {std::chrono::milliseconds(0), std::chrono::milliseconds(10)}) {
    const Figure sync = run_sync(latency, length);
    row(latency, "IdempotentClient (sync), 1 thread", sync, sync.calls_per_second);
    row(latency, "libcurl easy loop, 1 thread", run_easy_loop(latency, length),
        sync.calls_per_second);
    for (const Shape shape : kShapes) {
      const Figure f = run_async(latency, shape.in_flight, shape.connections, length);
      row(latency, fmt::format("AsyncClient, {} in flight", shape.in_flight), f,
          sync.calls_per_second);
    }
  }
  return 0;
}
