#include "support/loopback_http.hpp"

#include <sys/socket.h>

#include <future>
#include <stdexcept>
#include <utility>

namespace idem::test {

int start_on_loopback(httplib::Server& server, std::thread& thread,
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
