// The payment provider under load: charges/s with 16, 256 and 2,000
// concurrent clients, latency fault 0 and 100 ms, on SQLite (synchronous=FULL, a file on
// local disk) and PostgreSQL (fsync and full_page_writes switched on for the run, since
// scripts/with-postgres.sh turns them off).
//
//   new       the in-process PaymentProvider: Beast event loop + group commit. Its
//             commits and charges per commit come from PaymentProvider::stats().
//   baseline  the old thread-per-connection provider (cpp-httplib, a commit per charge,
//             a sleeping thread per latency), when --baseline names an `idem` binary
//             built before this change; run as `idem provider` in a child process.
//   ideal     with latency L, C closed-loop clients can at best do C / L charges/s.
//
// Each client is one keep-alive connection sending charge after charge (a fresh key
// each), closed loop, from one Asio event loop on its own thread; a charge counts when
// its 200 arrives inside the measured window (after a warm-up). A plain main().
//
// Usage: idem_bench_provider [--seconds S] [--clients 16,256,2000] [--latency 0,100]
//                            [--baseline PATH_TO_OLD_IDEM] [--dir DIR_FOR_SQLITE]
// PostgreSQL when IDEM_BENCH_PG_DSN or IDEM_TEST_PG_DSN is set.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <libpq-fe.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "idem/reference/payment_provider.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"

#include "postgres_durable.hpp"

extern char** environ;

namespace {

using idem::bench::pg_show;
using idem::bench::postgres_durable;

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kWarmUp = 1s;
// After the window, requests still open get this long before the load stops waiting.
constexpr auto kGrace = 2s;

struct Window {
  SteadyClock::time_point begin;
  SteadyClock::time_point end;
  std::atomic<std::int64_t> charged{0};
  std::atomic<std::int64_t> failed{0};
};

// One closed-loop client: one connection, one charge at a time, reconnecting whenever
// the server closes (cpp-httplib closes a keep-alive connection after 5 requests).
class LoadClient : public std::enable_shared_from_this<LoadClient> {
 public:
  LoadClient(asio::io_context& io, tcp::endpoint provider, int id, std::string run, Window& window)
      : io_(io), stream_(io), provider_(provider), id_(id), run_(std::move(run)), window_(window) {}

  void connect() {
    if (SteadyClock::now() >= window_.end) return;
    stream_.async_connect(provider_, [self = shared_from_this()](beast::error_code ec) {
      if (ec) return self->reconnect_later();
      self->send();
    });
  }

 private:
  void send() {
    if (SteadyClock::now() >= window_.end) return close();
    ++sent_;
    request_ = {beast::http::verb::post, "/payments/charge", 11};
    request_.set(beast::http::field::host, "127.0.0.1");
    request_.set(beast::http::field::content_type, "application/json");
    request_.set("Idempotency-Key", fmt::format("{}-{}-{}", run_, id_, sent_));
    request_.body() = fmt::format(R"({{"order_id":{},"amount":"1.00"}})",
                                  static_cast<std::int64_t>(id_) * 100'000'000 + sent_);
    request_.prepare_payload();
    beast::http::async_write(
        stream_, request_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
          if (ec) return self->reconnect();
          self->response_ = {};
          beast::http::async_read(
              self->stream_, self->buffer_, self->response_,
              [self](beast::error_code rec, std::size_t) { self->on_answer(rec); });
        });
  }

  void on_answer(beast::error_code ec) {
    const auto now = SteadyClock::now();
    const bool counted = now >= window_.begin && now < window_.end;
    if (ec || response_.result_int() != 200) {
      if (counted) ++window_.failed;
      return ec ? reconnect() : send();
    }
    if (counted) ++window_.charged;
    if (!response_.keep_alive()) return reconnect();
    send();
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().close(ignored);
  }
  void reconnect() {
    close();
    buffer_.clear();
    connect();
  }
  void reconnect_later() {
    close();
    auto timer = std::make_shared<asio::steady_timer>(io_, 10ms);
    timer->async_wait([self = shared_from_this(), timer](beast::error_code) { self->connect(); });
  }

  asio::io_context& io_;
  beast::tcp_stream stream_;
  tcp::endpoint provider_;
  int id_;
  std::string run_;
  Window& window_;
  std::int64_t sent_ = 0;
  beast::http::request<beast::http::string_body> request_;
  beast::flat_buffer buffer_;
  beast::http::response<beast::http::string_body> response_;
};

struct LoadResult {
  double charges_per_second = 0;
  std::int64_t failed = 0;
};

LoadResult run_load(int port, int clients, std::chrono::seconds seconds, const std::string& run) {
  asio::io_context io;
  Window window;
  window.begin = SteadyClock::now() + kWarmUp;
  window.end = window.begin + seconds;
  const tcp::endpoint provider(asio::ip::make_address("127.0.0.1"),
                               static_cast<unsigned short>(port));
  for (int i = 0; i < clients; ++i) {
    std::make_shared<LoadClient>(io, provider, i, run, window)->connect();
  }
  asio::steady_timer give_up(io, window.end + kGrace);
  give_up.async_wait([&](beast::error_code) { io.stop(); });
  io.run();
  return {
      static_cast<double>(window.charged.load()) / std::chrono::duration<double>(seconds).count(),
      window.failed.load()};
}

// `PATH provider --db URL --listen 127.0.0.1:0 --latency-ms L`, until destroyed.
class OldProvider {
 public:
  OldProvider(const std::string& path, const std::string& db, int latency_ms) {
    int out[2];
    if (::pipe(out) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    const std::string latency = std::to_string(latency_ms);
    std::vector<std::string> args{path,       "provider",    "--db",         db,
                                  "--listen", "127.0.0.1:0", "--latency-ms", latency};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, path.c_str(), &actions, nullptr, argv.data(), environ) != 0) {
      throw std::runtime_error("cannot start " + path);
    }
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    std::string line;
    char c = 0;
    while (::read(out[0], &c, 1) == 1 && c != '\n') line += c;
    ::close(out[0]);
    const auto colon = line.rfind(':');
    if (line.rfind("listening http://", 0) != 0 || colon == std::string::npos) {
      throw std::runtime_error("old provider did not start: " + line);
    }
    port_ = std::stoi(line.substr(colon + 1));
  }
  ~OldProvider() {
    ::kill(pid_, SIGKILL);  // it would wait for 2,000 queued connections otherwise
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  [[nodiscard]] int port() const { return port_; }

 private:
  pid_t pid_ = 0;
  int port_ = 0;
};

// Empties the provider's tables by dropping them and forgetting their migrations, so the
// next provider creates them again. Migrating first makes the record table exist.
void drop_provider_tables(const std::string& url) {
  auto store = idem::open_store(url);
  (void)store->migrate_set(idem::payment_provider_migrations());
  auto tx = store->begin();
  tx->execute("DROP TABLE IF EXISTS provider_charge");
  tx->execute("DROP TABLE IF EXISTS provider_idempotency_key");
  tx->execute("DELETE FROM idem_schema_migrations WHERE migration_set = 'payment_provider'");
  tx->commit();
}

struct Options {
  std::chrono::seconds seconds{4};
  std::vector<int> clients{16, 256, 2000};
  std::vector<int> latencies_ms{0, 100};
  std::string baseline;
  std::filesystem::path dir = std::filesystem::temp_directory_path();
};

std::vector<int> int_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoi(item));
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string name = argv[i];
    const std::string value = argv[i + 1];
    if (name == "--seconds")
      o.seconds = std::chrono::seconds(std::stoi(value));
    else if (name == "--clients")
      o.clients = int_list(value);
    else if (name == "--latency")
      o.latencies_ms = int_list(value);
    else if (name == "--baseline")
      o.baseline = value;
    else if (name == "--dir")
      o.dir = value;
    else
      throw std::runtime_error("unknown option " + name);
  }
  return o;
}

void bench_backend(const std::string& backend, const Options& o,
                   const std::function<std::string(const std::string&)>& fresh_db) {
  int run = 0;
  for (const int latency : o.latencies_ms) {
    for (const int clients : o.clients) {
      const std::string ideal =
          latency == 0 ? "-" : fmt::format("{:.0f}", clients * 1000.0 / latency);
      {
        const std::string db = fresh_db(fmt::format("new-{}", run));
        idem::http::ProviderConfig config;
        config.faults.latency = std::chrono::milliseconds(latency);
        idem::http::PaymentProvider provider(idem::open_store(db), config);
        const int port = provider.start("127.0.0.1", 0);
        const auto before = provider.stats();
        const LoadResult r = run_load(port, clients, o.seconds, fmt::format("n{}", run));
        const auto after = provider.stats();
        const auto commits = after.transactions - before.transactions;
        std::printf(
            "%-8s | %4d ms | %5d clients | new      | %8.0f charges/s | ideal %6s | "
            "%7lld commits, %6.1f charges/commit | peak %5lld open | %lld failed\n",
            backend.c_str(), latency, clients, r.charges_per_second, ideal.c_str(),
            static_cast<long long>(commits),
            commits ? static_cast<double>(after.charges_committed - before.charges_committed) /
                          static_cast<double>(commits)
                    : 0.0,
            static_cast<long long>(after.peak_requests_in_progress),
            static_cast<long long>(r.failed));
        std::fflush(stdout);
      }
      ++run;
      if (!o.baseline.empty()) {
        const std::string db = fresh_db(fmt::format("old-{}", run));
        const OldProvider old(o.baseline, db, latency);
        const LoadResult r = run_load(old.port(), clients, o.seconds, fmt::format("o{}", run));
        std::printf(
            "%-8s | %4d ms | %5d clients | baseline | %8.0f charges/s | ideal %6s | "
            "a commit per charge | %lld failed\n",
            backend.c_str(), latency, clients, r.charges_per_second, ideal.c_str(),
            static_cast<long long>(r.failed));
        std::fflush(stdout);
      }
      ++run;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  const Options o = parse(argc, argv);
  std::vector<std::filesystem::path> files;
  bench_backend("sqlite", o, [&](const std::string& name) {
    const auto path = o.dir / fmt::format("idem-bench-provider-{}-{}.sqlite", ::getpid(), name);
    for (const char* suffix : {"", "-wal", "-shm"}) files.push_back(path.string() + suffix);
    return "sqlite://" + path.string();
  });
  for (const auto& f : files) std::filesystem::remove(f);

  const char* dsn = std::getenv("IDEM_BENCH_PG_DSN");
  if (dsn == nullptr) dsn = std::getenv("IDEM_TEST_PG_DSN");
  if (dsn == nullptr || *dsn == '\0') {
    std::printf(
        "postgres: skipped (set IDEM_BENCH_PG_DSN or run under scripts/with-postgres.sh)\n");
    return 0;
  }
  postgres_durable(dsn);
  std::printf("postgres: fsync=%s full_page_writes=%s synchronous_commit=%s\n",
              pg_show(dsn, "fsync").c_str(), pg_show(dsn, "full_page_writes").c_str(),
              pg_show(dsn, "synchronous_commit").c_str());
  bench_backend("postgres", o, [&](const std::string&) {
    drop_provider_tables(dsn);
    return std::string(dsn);
  });
  return 0;
}
