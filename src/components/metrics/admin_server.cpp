// The admin HTTP server (/metrics, /healthz, /readyz) and the stock readiness checks.
#include "idem/metrics/admin_endpoints.hpp"

#include <atomic>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "idem/config.hpp"
#include "idem/error.hpp"
#include "idem/metrics/metrics.hpp"

namespace idem {

namespace {
constexpr std::string_view kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";
}

ReadinessCheck consumer_readiness(const Consumer& consumer, std::chrono::milliseconds stuck_after) {
  return {"consumer", [&consumer, stuck_after]() -> std::optional<std::string> {
            const ConsumerStats s = consumer.stats();
            if (s.last_loop == std::chrono::steady_clock::time_point{}) return "not running yet";
            const auto idle = std::chrono::steady_clock::now() - s.last_loop;
            if (idle > stuck_after) {
              return fmt::format(
                  "stuck: the poll loop has not turned for {} ms",
                  std::chrono::duration_cast<std::chrono::milliseconds>(idle).count());
            }
            if (consumer.lag().empty()) return "no partitions assigned";
            return std::nullopt;
          }};
}

ReadinessCheck store_readiness(std::string store_url, StoreOptions options) {
  struct Probe {
    std::mutex mutex;
    std::string url;
    StoreOptions options;
    std::unique_ptr<Store> store;
    std::chrono::steady_clock::time_point checked{};
    std::optional<std::string> result = std::string("not checked yet");
  };
  auto probe = std::make_shared<Probe>();
  probe->url = std::move(store_url);
  probe->options = std::move(options);
  // SQLite's begin() takes the write lock: a probe must not queue behind the consumer's
  // transaction. A busy database answered, so it counts as reachable (below).
  probe->options.busy_timeout = std::chrono::milliseconds(100);
  return {"store", [probe]() -> std::optional<std::string> {
            std::lock_guard lock(probe->mutex);
            const auto now = std::chrono::steady_clock::now();
            if (now - probe->checked < std::chrono::seconds(1)) return probe->result;
            probe->checked = now;
            try {
              if (!probe->store) probe->store = open_store(probe->url, probe->options);
              auto tx = probe->store->begin();
              static_cast<void>(tx->execute("SELECT 1"));
              tx->rollback();
              probe->result = std::nullopt;
            } catch (const Error& e) {
              if (e.code() == ErrorCode::TransactionAborted || e.code() == ErrorCode::Timeout) {
                probe->result = std::nullopt;  // locked by a writer: alive
                return probe->result;
              }
              probe->store.reset();  // reconnect next time
              // Store errors never carry the URL (see pg_connection.cpp); the code is enough.
              probe->result =
                  fmt::format("unreachable ({}/{})", to_string(e.source()), to_string(e.code()));
            }
            return probe->result;
          }};
}

void mount_admin_endpoints(httplib::Server& server, const Metrics& metrics,
                           std::vector<ReadinessCheck> checks) {
  server.Get("/metrics", [&metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.scrape(), std::string(kPrometheusContentType));
  });
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server.Get("/readyz",
             [checks = std::move(checks)](const httplib::Request&, httplib::Response& res) {
               std::string body;
               bool ready = true;
               for (const ReadinessCheck& c : checks) {
                 std::optional<std::string> problem;
                 try {
                   problem = c.check();
                 } catch (const std::exception& e) {
                   problem = e.what();
                 }
                 if (problem) ready = false;
                 body += fmt::format("{}: {}\n", c.name, problem ? *problem : "ok");
               }
               res.status = ready ? 200 : 503;
               res.set_content(body.empty() ? "ok\n" : body, "text/plain");
             });
}

struct AdminServer::Impl {
  httplib::Server server;
  std::thread thread;
  int port = 0;
};

AdminServer::AdminServer(const std::string& listen, const Metrics& metrics,
                         std::vector<ReadinessCheck> checks)
    : impl_(std::make_unique<Impl>()) {
  const auto colon = listen.rfind(':');
  const std::string host =
      colon == std::string::npos || colon == 0 ? "0.0.0.0" : listen.substr(0, colon);
  const int wanted = colon == std::string::npos ? 0 : std::atoi(listen.c_str() + colon + 1);

  mount_admin_endpoints(impl_->server, metrics, std::move(checks));

  impl_->port = wanted == 0 ? impl_->server.bind_to_any_port(host)
                            : (impl_->server.bind_to_port(host, wanted) ? wanted : -1);
  if (impl_->port <= 0) {
    throw Error(ErrorCode::Connection, ErrorSource::Config,
                fmt::format("admin server: cannot listen on {}", listen));
  }
  impl_->thread = std::thread([this] { impl_->server.listen_after_bind(); });
}

AdminServer::~AdminServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int AdminServer::port() const noexcept {
  return impl_->port;
}

void declare_admin_keys(SectionKeys<AdminSettings>& keys) {
  keys.listen("admin.listen", &AdminSettings::listen,
              "host:port of /metrics, /healthz, /readyz (empty: off)")
      .boolean("admin.console", &AdminSettings::console,
               "idem consume: serve the web console (docs/console.md) on admin.listen too")
      .duration("admin.stuck_after", &AdminSettings::stuck_after,
                "/readyz fails when the consumer loop has not turned for this long (a bare "
                "number is milliseconds)",
                kConfigSecond, kConfigDay, "ms")
      .renamed_from("admin.stuck_after_ms");
}

}  // namespace idem
