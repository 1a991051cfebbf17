#pragma once
// The payment provider's HTTP/1.1 server: Boost.Beast on one Asio event loop.
//
// Why Beast/Asio: the provider must hold thousands of slow requests open at once (a
// latency fault, a charge waiting for its group commit). cpp-httplib spends a thread
// per connection, so 2,000 concurrent requests would be 2,000 threads; an event loop
// holds each one as a few hundred bytes of state. Beast over Asio (header-only, from
// Debian's libboost-dev) gives a complete HTTP/1.1 parser and serializer (keep-alive,
// chunked bodies, limits) and Asio's timers, where a hand-written epoll loop would
// need its own incremental parser, write buffering, timeouts and their bugs.
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

namespace idem::http::detail {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;

class HttpSession;

/// The answer to one request. Exactly one of send() or break_off() is called, on the
/// event loop's thread; until then the connection reads nothing more.
class Reply {
 public:
  explicit Reply(std::shared_ptr<HttpSession> session) : session_(std::move(session)) {}
  /// Writes `response` (Content-Length set here); keeps the connection if both sides may.
  void send(HttpResponse response);
  /// Writes the status line and headers of `response`, then closes the connection before
  /// the body they announce: the client sees a transport error, not an answer.
  void break_off(HttpResponse response);

 private:
  std::shared_ptr<HttpSession> session_;
};

/// Called on the event loop's thread for each request; must not block.
using RequestHandler = std::function<void(HttpRequest&, Reply)>;

class HttpServer {
 public:
  HttpServer(boost::asio::io_context& io, RequestHandler handler);
  /// Binds and listens on the calling thread (port 0: any free port); returns the port.
  /// Accepting starts on the event loop. \throws Error(Connection, Http) when it cannot bind.
  int listen(const std::string& host, int port);
  /// On the event loop: accepts no more connections, and closes idle ones. A connection
  /// with a request being answered closes after the answer.
  void close();
  [[nodiscard]] bool closing() const noexcept { return closing_; }
  [[nodiscard]] const RequestHandler& handler() const noexcept { return handler_; }

 private:
  void accept();

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  RequestHandler handler_;
  std::vector<std::weak_ptr<HttpSession>> sessions_;  // for close(); pruned as they end
  std::size_t prune_at_ = 64;
  bool closing_ = false;
};

}  // namespace idem::http::detail
