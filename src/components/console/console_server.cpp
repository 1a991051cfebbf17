// The console's HTTP server: embedded assets, the JSON API (console_api.cpp) and the
// request checks (guard.cpp) in front of it.
#include <httplib.h>

#include <thread>

#include <fmt/format.h>

#include "console/assets.hpp"
#include "console/console_api.hpp"
#include "console/guard.hpp"
#include "console/kafka_view.hpp"
#include "console/sampler.hpp"
#include "console/store_access.hpp"
#include "idem/config.hpp"
#include "idem/console/console.hpp"
#include "idem/error.hpp"
#include "idem/metrics/admin_endpoints.hpp"

namespace idem {

namespace {

using console::ApiError;
using nlohmann::json;

// Pages load only their own files: no inline script, no other origin, no framing.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

void send_json(httplib::Response& res, const json& body, int status = 200) {
  res.status = status;
  // Payloads are attacker-controlled and may not be UTF-8: replace, never throw.
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json; charset=utf-8");
}

console::Params params_of(const httplib::Request& req) {
  console::Params p;
  for (const auto& [k, v] : req.params) p[k] = v;
  return p;
}

console::StateChangeRequest state_change_of(const httplib::Request& req) {
  const auto header = [&](const char* name) -> std::string_view {
    const auto it = req.headers.find(name);
    return it == req.headers.end() ? std::string_view() : std::string_view(it->second);
  };
  return {req.method,
          header("Host"),
          header("Origin"),
          header("Content-Type"),
          header("Sec-Fetch-Site"),
          header("X-Idem-Token")};
}

console::ListenAddress parse_listen(const std::string& listen) {
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                fmt::format("console: listen expects host:port, got '{}'", listen));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "127.0.0.1";
  return {host, std::atoi(listen.c_str() + colon + 1)};
}

}  // namespace

struct Console::Impl {
  ConsoleOptions options;
  console::StoreAccess store;
  console::KafkaView kafka;
  console::Sampler sampler;
  console::ApiContext api;
  console::ListenAddress listen;
  httplib::Server server;
  std::thread thread;

  static ConsoleOptions with_local_metrics(ConsoleOptions o) {
    if (o.admin_metrics != nullptr && !o.local_metrics) {
      o.local_metrics = [m = o.admin_metrics] { return m->scrape(); };
    }
    return o;
  }

  explicit Impl(ConsoleOptions o)
      : options(with_local_metrics(std::move(o))),
        store(options.store_url, options.store_options),
        kafka(options.kafka),
        sampler(kafka, store,
                console::SamplerOptions{options.refresh, std::chrono::minutes(10),
                                        std::chrono::seconds(30), options.groups, options.scrape,
                                        options.local_metrics}),
        api{options, store, kafka},
        listen(parse_listen(options.listen)) {}

  template <class F>
  void get(const char* path, F f) {
    server.Get(path, [f](const httplib::Request& req, httplib::Response& res) {
      try {
        send_json(res, f(req));
      } catch (const ApiError& e) {
        send_json(res, {{"error", e.what()}}, e.status);
      } catch (const std::exception& e) {
        send_json(res, {{"error", e.what()}}, 500);
      }
    });
  }

  void routes() {
    if (options.admin_metrics != nullptr) {
      mount_admin_endpoints(server, *options.admin_metrics, std::move(options.readiness));
    }
    for (const console::Asset& asset : console::assets()) {
      const std::string path = asset.path == "/index.html" ? "/" : std::string(asset.path);
      server.Get(path, [asset](const httplib::Request&, httplib::Response& res) {
        res.set_content(std::string(asset.body), std::string(asset.content_type));
      });
    }
    get("/api/overview", [this](const httplib::Request&) { return sampler.overview(); });
    get("/api/dlq/topics", [this](const httplib::Request&) { return console::dlq_topics(api); });
    get("/api/dlq/letters", [this](const httplib::Request& req) {
      return console::list_dead_letters(api, params_of(req));
    });
    get("/api/dlq/letter", [this](const httplib::Request& req) {
      return console::show_dead_letter(api, params_of(req));
    });
    get("/api/audit", [this](const httplib::Request&) { return console::audit(api); });
    get("/api/dedup", [this](const httplib::Request&) { return console::dedup_health(api); });
    server.Post("/api/dlq/replay", [this](const httplib::Request& req, httplib::Response& res) {
      try {
        const json body = json::parse(req.body, nullptr, false);
        if (body.is_discarded() || !body.is_object())
          throw ApiError(400, "the body must be a JSON object");
        const bool dry_run = body.value("dry_run", true);  // a replay must be asked for
        const auto request = state_change_of(req);
        const auto refused = dry_run ? console::check_same_origin(request)
                                     : console::check_state_change(request, options.token);
        if (refused) throw ApiError(403, *refused);
        const std::string who = body.contains("operator") && body["operator"].is_string()
                                    ? body["operator"].get<std::string>()
                                    : std::string();
        send_json(res, console::replay(api, body, {who, req.remote_addr}, dry_run));
      } catch (const ApiError& e) {
        send_json(res, {{"error", e.what()}}, e.status);
      } catch (const std::exception& e) {
        send_json(res, {{"error", e.what()}}, 500);
      }
    });
    // Every request, before routing: only requests for this console by its own name.
    server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (const auto problem = console::check_host(listen, req.get_header_value("Host"))) {
        send_json(res, {{"error", *problem}}, 421);
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    server.set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
      res.set_header("Content-Security-Policy", kContentSecurityPolicy);
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("X-Frame-Options", "DENY");
      res.set_header("Referrer-Policy", "no-referrer");
      res.set_header("Cache-Control", "no-store");
    });
  }
};

Console::Console(ConsoleOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->routes();
  const auto& l = impl_->listen;
  const int port = l.port == 0 ? impl_->server.bind_to_any_port(l.host)
                               : (impl_->server.bind_to_port(l.host, l.port) ? l.port : -1);
  if (port <= 0) {
    throw Error(ErrorCode::Connection, ErrorSource::Config,
                fmt::format("console: cannot listen on {}", impl_->options.listen));
  }
  impl_->listen.port = port;
  impl_->thread = std::thread([this] { impl_->server.listen_after_bind(); });
}

Console::~Console() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int Console::port() const noexcept {
  return impl_->listen.port;
}

void declare_console_keys(SectionKeys<ConsoleOptions>& keys) {
  keys.list("console.groups", &ConsoleOptions::groups,
            "idem console: consumer groups to show besides those the store knows")
      .listen("console.listen", &ConsoleOptions::listen,
              "idem console: host:port of the web console (loopback unless you mean it)")
      .duration("console.refresh", &ConsoleOptions::refresh,
                "idem console: how often lag and throughput are sampled", 200, 60 * kConfigSecond)
      .list("console.scrape", &ConsoleOptions::scrape,
            "idem console: admin servers (host:port) of consumers whose /metrics give throughput")
      .text("console.token", &ConsoleOptions::token,
            "idem console: token required for replays (header X-Idem-Token; empty: replay off)");
}

}  // namespace idem
