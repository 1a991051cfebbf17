#include "reference/payment_provider_server.hpp"

#include <optional>

#include <fmt/format.h>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>

#include "idem/error.hpp"
#include "reference/payment_provider_rules.hpp"

namespace idem::http::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

namespace {

// An idle keep-alive connection costs a socket and a few hundred bytes, not a thread,
// so it may stay open long: clients (libcurl) reuse it instead of reconnecting.
constexpr auto kIdleTimeout = std::chrono::seconds(60);
// A client that does not take its answer in this long is dropped.
constexpr auto kWriteTimeout = std::chrono::seconds(30);
constexpr std::size_t kBodyLimit = 64 * 1024;  // a charge request is under 100 bytes

}  // namespace

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, HttpServer& server)
      : stream_(std::move(socket)), server_(server) {}

  void read() {
    parser_.emplace();
    parser_->body_limit(kBodyLimit);
    stream_.expires_after(kIdleTimeout);
    beast::http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void send(HttpResponse response) {
    response_ = std::move(response);
    response_.keep_alive(keep_alive_ && !server_.closing());
    response_.prepare_payload();
    stream_.expires_after(kWriteTimeout);
    beast::http::async_write(stream_, response_,
                             [self = shared_from_this()](beast::error_code ec, std::size_t) {
                               if (ec || !self->response_.keep_alive()) {
                                 self->shut();
                               } else {
                                 self->read();
                               }
                             });
  }

  void break_off(HttpResponse response) {
    response_ = std::move(response);
    response_.prepare_payload();
    serializer_.emplace(response_);
    stream_.expires_after(kWriteTimeout);
    beast::http::async_write_header(
        stream_, *serializer_,
        [self = shared_from_this()](beast::error_code, std::size_t) { self->shut(); });
  }

  /// Closes the connection when no request is being answered on it.
  void close_if_idle() {
    if (!busy_) shut();
  }
  void shut() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

 private:
  void on_read(beast::error_code ec) {
    const bool unparseable =
        ec &&
        ec.category() == beast::http::make_error_code(beast::http::error::bad_method).category() &&
        ec != beast::http::error::end_of_stream && ec != beast::http::error::partial_message;
    if (unparseable) {
      // A request that cannot be parsed (a control character in a header value, a bad
      // field, a body over the limit) is refused with a 400 the client can read, then the
      // connection closes: dropping it silently would look like a crash to the client.
      HttpResponse refusal{beast::http::status::bad_request, 11};
      refusal.set(beast::http::field::content_type,
                  beast::string_view(kProblemContentType.data(), kProblemContentType.size()));
      refusal.body() =
          problem_body(Problem::InvalidRequest,
                       fmt::format("the request could not be parsed: {}", ec.message()));
      keep_alive_ = false;
      send(std::move(refusal));
      return;
    }
    if (ec) {  // the client left or idled out: nothing to answer
      shut();
      return;
    }
    stream_.expires_never();  // a request may wait long for its answer (latency fault)
    keep_alive_ = parser_->get().keep_alive();
    busy_ = true;
    HttpRequest request = parser_->release();
    server_.handler()(request, Reply(shared_from_this()));
  }

  friend class Reply;
  beast::tcp_stream stream_;
  HttpServer& server_;
  beast::flat_buffer buffer_;
  std::optional<beast::http::request_parser<beast::http::string_body>> parser_;
  HttpResponse response_;
  std::optional<beast::http::response_serializer<beast::http::string_body>> serializer_;
  bool keep_alive_ = false;
  bool busy_ = false;
};

void Reply::send(HttpResponse response) {
  if (!session_) return;  // moved from: the request was handed on
  session_->busy_ = false;
  session_->send(std::move(response));
}

void Reply::break_off(HttpResponse response) {
  if (!session_) return;
  session_->busy_ = false;
  session_->break_off(std::move(response));
}

HttpServer::HttpServer(asio::io_context& io, RequestHandler handler)
    : io_(io), acceptor_(io), handler_(std::move(handler)) {}

int HttpServer::listen(const std::string& host, int port) {
  try {
    tcp::resolver resolver(io_);
    const auto endpoints = resolver.resolve(
        host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service);
    const tcp::endpoint endpoint = *endpoints.begin();
    acceptor_.open(endpoint.protocol());
    acceptor_.set_option(asio::socket_base::reuse_address(true));
    acceptor_.bind(endpoint);
    acceptor_.listen(asio::socket_base::max_listen_connections);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::Connection, ErrorSource::Http,
                fmt::format("payment provider: cannot listen on {}:{}: {}", host, port, e.what()));
  }
  accept();
  return acceptor_.local_endpoint().port();
}

void HttpServer::accept() {
  acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      beast::error_code ignored;
      // An answer is one write, but without TCP_NODELAY a small one may still wait for
      // the client's delayed ACK (about 40 ms per request on keep-alive).
      socket.set_option(tcp::no_delay(true), ignored);
      auto session = std::make_shared<HttpSession>(std::move(socket), *this);
      if (sessions_.size() >= prune_at_) {
        std::erase_if(sessions_, [](const auto& s) { return s.expired(); });
        prune_at_ = std::max<std::size_t>(64, 2 * sessions_.size());
      }
      sessions_.push_back(session);
      session->read();
      accept();
      return;
    }
    // Out of descriptors or similar: try again shortly rather than spin.
    auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(50));
    timer->async_wait([this, timer](beast::error_code) {
      if (acceptor_.is_open()) accept();
    });
  });
}

void HttpServer::close() {
  closing_ = true;
  beast::error_code ignored;
  acceptor_.close(ignored);
  for (const auto& weak : sessions_) {
    if (const auto session = weak.lock()) session->close_if_idle();
  }
}

}  // namespace idem::http::detail
