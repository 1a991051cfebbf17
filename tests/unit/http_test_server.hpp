#pragma once
// Loopback HTTP servers for the HTTP client tests (http_client_test.cpp,
// async_client_test.cpp): cpp-httplib on 127.0.0.1 with a connection count kept on the
// server's side, and a server answering from a script.
#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/loopback_http.hpp"

namespace idem::http::test {

/// cpp-httplib runs each accepted connection, from accept to close, as one task of its
/// task queue: a queue that wraps its thread pool counts the connections exactly.
/// A connection counts as open from its accept, also while it waits for a free thread.
class ConnectionCounter {
 public:
  void accepted() {
    std::lock_guard lock(mutex_);
    ++accepted_;
    ++open_;
    max_open_ = std::max(max_open_, open_);
  }
  void closed() {
    std::lock_guard lock(mutex_);
    --open_;
  }
  [[nodiscard]] std::size_t total_accepted() const {
    std::lock_guard lock(mutex_);
    return accepted_;
  }
  [[nodiscard]] std::size_t max_open() const {
    std::lock_guard lock(mutex_);
    return max_open_;
  }

 private:
  mutable std::mutex mutex_;
  std::size_t accepted_ = 0;
  std::size_t open_ = 0;
  std::size_t max_open_ = 0;
};

class CountingTaskQueue final : public httplib::TaskQueue {
 public:
  CountingTaskQueue(std::size_t threads, ConnectionCounter& counter)
      : pool_(threads), counter_(counter) {}
  void enqueue(std::function<void()> serve_connection) override {
    counter_.accepted();
    pool_.enqueue([this, serve = std::move(serve_connection)] {
      serve();
      counter_.closed();
    });
  }
  void shutdown() override { pool_.shutdown(); }

 private:
  httplib::ThreadPool pool_;
  ConnectionCounter& counter_;
};

/// A server on a free loopback port answering POST /call with `handler`, with up to
/// `threads` connections served at once (cpp-httplib is a thread per connection).
/// Connections are kept alive as long as the client wants (no per-connection request
/// limit, a minute's idle timeout), so every new connection is the client's choice.
/// Destroy the clients first: cpp-httplib's stop() waits for open connections to close.
class LoopbackServer {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  explicit LoopbackServer(Handler handler, std::size_t threads = 8) {
    server_.Post("/call", std::move(handler));
    server_.set_keep_alive_max_count(1'000'000);
    server_.set_keep_alive_timeout(60);
    // cpp-httplib writes an answer's headers and body separately: without this, Nagle
    // holds the body back until the client's delayed ACK, some 40 ms per call.
    server_.set_tcp_nodelay(true);
    port_ =
        idem::test::start_on_loopback(server_, thread_, [this, threads]() -> httplib::TaskQueue* {
          return new CountingTaskQueue(threads, counter_);
        });
  }
  ~LoopbackServer() {
    server_.stop();
    thread_.join();
  }
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  [[nodiscard]] std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/call";
  }
  [[nodiscard]] std::size_t connections_accepted() const { return counter_.total_accepted(); }
  [[nodiscard]] std::size_t max_open_connections() const { return counter_.max_open(); }

 private:
  ConnectionCounter counter_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

/// One scripted answer. `reset`: headers, then the connection closes before the body.
/// `hang`: no answer until the server is destroyed (the client's timeout must fire, or
/// the client gives up first).
struct Scripted {
  int status = 200;
  std::string body = R"({"ok":true})";
  std::string retry_after;
  bool reset = false;
  bool hang = false;
};

inline Scripted answer(int status, std::string body = R"({"ok":true})") {
  Scripted s;
  s.status = status;
  s.body = std::move(body);
  return s;
}
inline Scripted retry_after(int status, std::string seconds) {
  Scripted s = answer(status);
  s.retry_after = std::move(seconds);
  return s;
}
inline Scripted broken_off() {
  Scripted s;
  s.reset = true;
  return s;
}
inline Scripted no_answer() {
  Scripted s;
  s.hang = true;
  return s;
}

/// Answers POST /call with the scripted answers in order (the last one repeats) and
/// records each request's Idempotency-Key and traceparent.
class ScriptedServer {
 public:
  ScriptedServer(std::initializer_list<Scripted> script)
      : ScriptedServer(std::vector<Scripted>(script)) {}
  explicit ScriptedServer(const std::vector<Scripted>& script, std::size_t threads = 8)
      : script_(script.begin(), script.end()),
        server_(std::make_unique<LoopbackServer>(
            [this](const httplib::Request& req, httplib::Response& res) { serve(req, res); },
            threads)) {}
  ~ScriptedServer() {
    {
      std::lock_guard lock(mutex_);
      released_ = true;
    }
    changed_.notify_all();
    server_.reset();  // joins the handlers, which use the members below
  }
  ScriptedServer(const ScriptedServer&) = delete;
  ScriptedServer& operator=(const ScriptedServer&) = delete;

  [[nodiscard]] std::string url() const { return server_->url(); }
  [[nodiscard]] std::size_t connections_accepted() const { return server_->connections_accepted(); }
  [[nodiscard]] std::vector<std::string> keys() const {
    std::lock_guard lock(mutex_);
    return keys_;
  }
  [[nodiscard]] std::vector<std::string> traceparents() const {
    std::lock_guard lock(mutex_);
    return traceparents_;
  }
  /// Blocks until `count` requests have arrived (or a minute passed, to fail, not hang).
  [[nodiscard]] bool wait_for_requests(std::size_t count) const {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::minutes(1), [&] { return keys_.size() >= count; });
  }

 private:
  void serve(const httplib::Request& req, httplib::Response& res) {
    Scripted s;
    {
      std::unique_lock lock(mutex_);
      keys_.push_back(req.get_header_value("Idempotency-Key"));
      traceparents_.push_back(req.get_header_value("traceparent"));
      s = script_.size() > 1 ? script_.front() : script_.back();
      if (script_.size() > 1) script_.pop_front();
      changed_.notify_all();
      if (s.hang) changed_.wait(lock, [this] { return released_; });
    }
    res.status = s.status;
    if (!s.retry_after.empty()) res.set_header("Retry-After", s.retry_after);
    if (s.reset) {
      res.set_content_provider(s.body.size(), "application/json",
                               [](std::size_t, std::size_t, httplib::DataSink&) { return false; });
    } else {
      res.set_content(s.body, "application/json");
    }
  }

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  bool released_ = false;
  std::deque<Scripted> script_;
  std::vector<std::string> keys_;
  std::vector<std::string> traceparents_;
  std::unique_ptr<LoopbackServer> server_;  // last: its handlers use everything above
};

}  // namespace idem::http::test
