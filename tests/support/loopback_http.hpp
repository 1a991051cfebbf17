#pragma once
// Starting a cpp-httplib server on loopback for a test, the one way every test server
// here does it.
#include <httplib.h>

#include <functional>
#include <thread>

namespace idem::test {

/// Binds `server` to a free 127.0.0.1 port, runs its accept loop on `thread`, and returns
/// the port once the server accepts (from then on its stop() works: cpp-httplib 0.11
/// ignores an earlier one). `make_queue` builds the server's task queue, which serves
/// the connections. The listen backlog is raised to SOMAXCONN: cpp-httplib listens with 5,
/// and a client opening dozens of connections at once would see SYNs dropped and
/// connects retried a second later. Throws std::runtime_error when binding fails.
[[nodiscard]] int start_on_loopback(httplib::Server& server, std::thread& thread,
                                    std::function<httplib::TaskQueue*()> make_queue);

}  // namespace idem::test
