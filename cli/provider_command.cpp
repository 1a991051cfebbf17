// `idem provider`: the reference system's payment provider as an HTTP server, until
// SIGTERM/SIGINT. Prints exactly one stdout line, `listening http://HOST:PORT`, once
// connections are accepted.
#include <pthread.h>
#include <signal.h>

#include <charconv>
#include <iostream>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "commands.hpp"
#include "idem/error.hpp"
#include "idem/reference/payment_provider.hpp"
#include "idem/store.hpp"

namespace idem::cli {

namespace {

std::pair<std::string, int> parse_listen(const std::string& text) {
  const auto colon = text.rfind(':');
  int port = -1;
  if (colon != std::string::npos && colon > 0) {
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data() + colon + 1, end, port);
    if (ec != std::errc() || ptr != end) port = -1;
  }
  if (port < 0 || port > 65535) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                fmt::format("--listen expects HOST:PORT (PORT 0 = any free port), got '{}'", text));
  }
  return {text.substr(0, colon), port};
}

}  // namespace

void register_provider(CLI::App& app, ExitCode& exit_code) {
  struct Options {
    std::string db;
    std::string listen = "127.0.0.1:0";
    std::string key_retention = "24h";
    double reset_after_commit = 0.0;
    double unavailable = 0.0;
    int latency_ms = 0;
    double decline = 0.0;
    std::uint64_t seed = 42;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "provider",
      "Run the payment provider (POST /payments/charge with Idempotency-Key) until SIGTERM/SIGINT");
  cmd->add_option("--db", opts->db, "Store for keys and charges: sqlite:///path.db or postgresql://...")
      ->required();
  cmd->add_option("--listen", opts->listen, "HOST:PORT to listen on (port 0: any free port)")
      ->capture_default_str();
  cmd->add_option("--key-retention", opts->key_retention,
                  "How long an Idempotency-Key is remembered (ms, s, m, h)")
      ->capture_default_str();
  const auto probability = CLI::Range(0.0, 1.0);
  cmd->add_option("--reset-after-commit", opts->reset_after_commit,
                  "Share of new charges committed and then answered with a dropped connection")
      ->check(probability);
  cmd->add_option("--unavailable", opts->unavailable, "Share of charge requests answered 503")
      ->check(probability);
  cmd->add_option("--latency-ms", opts->latency_ms,
                  "Added to every new charge (a timer: thousands of requests may wait at once)")
      ->check(CLI::Range(0, 600000));
  cmd->add_option("--decline", opts->decline,
                  "Share of orders declined with 402 card_declined (by hash of order_id and seed)")
      ->check(probability);
  cmd->add_option("--seed", opts->seed, "Seed of the fault draws and the decline hash")
      ->capture_default_str();

  cmd->callback([opts, &exit_code] {
    const auto [host, port] = parse_listen(opts->listen);
    http::ProviderConfig config;
    config.key_retention = http::parse_duration(opts->key_retention);
    config.seed = opts->seed;
    config.faults = {.reset_after_commit = opts->reset_after_commit,
                     .unavailable = opts->unavailable,
                     .latency = std::chrono::milliseconds(opts->latency_ms),
                     .decline = opts->decline};

    // Block the stop signals before the provider starts its threads (the store thread
    // in its constructor, the event loop in start(); they inherit the mask), then wait
    // for one on this thread: nothing runs in a signal handler.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    ::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the server

    http::PaymentProvider provider(open_store(opts->db), config);
    provider.start(host, port);
    std::cout << "listening " << provider.base_url() << std::endl;

    int sig = 0;
    while (sigwait(&stop_signals, &sig) != 0) {
    }
    provider.stop();
    exit_code.value = 0;
  });
}

}  // namespace idem::cli
