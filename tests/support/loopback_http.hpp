#pragma once
// Starting a cpp-httplib server on loopback for a test, the one way every test server
// here does it. Header-only: the HTTP client benchmark uses it too, without the test
// support library.
#include <httplib.h>
#include <sys/socket.h>

#include <functional>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>
#include <utility>

namespace idem::test {

/// Binds `server` to a free 127.0.0.1 port, runs its accept loop on `thread`, and returns
/// the port once the server accepts (from then on its stop() works: cpp-httplib 0.11
/// ignores an earlier one). `make_queue` builds the server's task queue, which serves
/// the connections. The listen backlog is raised to SOMAXCONN: cpp-httplib listens with 5,
/// and a client opening dozens of connections at once would see SYNs dropped and
/// connects retried a second later. Throws std::runtime_error when binding fails.
[[nodiscard]] inline int start_on_loopback(httplib::Server& server, std::thread& thread,
                                           std::function<httplib::TaskQueue*()> make_queue) {
  auto accepting = std::make_shared<std::promise<void>>();
  // cpp-httplib creates the task queue after it marked itself running, just before its
  // accept loop.
  server.new_task_queue = [accepting, make = std::move(make_queue)]() -> httplib::TaskQueue* {
    httplib::TaskQueue* queue = make();
    accepting->set_value();
    return queue;
  };
  int listening = -1;
  server.set_socket_options([&listening](socket_t sock) {
    httplib::default_socket_options(sock);
    listening = sock;
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  if (port < 0) throw std::runtime_error("test server: cannot bind a loopback port");
  // listen() again on Linux only raises the backlog of the bound socket.
  if (::listen(listening, SOMAXCONN) != 0) throw std::runtime_error("test server: listen failed");
  std::future<void> accepted = accepting->get_future();
  thread = std::thread([&server] { server.listen_after_bind(); });
  accepted.wait();
  return port;
}

}  // namespace idem::test
