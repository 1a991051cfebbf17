// `idem provider`: the reference system's payment provider as an HTTP server, until
// SIGTERM/SIGINT. Prints exactly one stdout line, `listening http://HOST:PORT`, once
// connections are accepted. Settings: store.url and provider.* (the loader checks them).
#include <charconv>
#include <csignal>
#include <iostream>
#include <memory>
#include <string>
#include <utility>

#include "commands.hpp"
#include "config_options.hpp"
#include "idem/reference/payment_provider.hpp"
#include "idem/store.hpp"
#include "stop_signals.hpp"

namespace idem::cli {

namespace {

// provider.listen, already checked by the loader to be HOST:PORT.
std::pair<std::string, int> split_listen(const std::string& text) {
  const auto colon = text.rfind(':');
  int port = 0;
  static_cast<void>(std::from_chars(text.data() + colon + 1, text.data() + text.size(), port));
  return {text.substr(0, colon), port};
}

}  // namespace

void register_provider(CLI::App& app, ExitCode& exit_code) {
  struct Options {
    std::string db;
    std::string listen;
    std::string key_retention;
    std::string reset_after_commit;
    std::string unavailable;
    std::string in_progress;
    std::string latency;
    std::string decline;
    std::string seed;
    std::string client_header;
    std::string too_many_requests;
    std::string retry_after;
    std::string unavailable_retry_after;
    std::string key_reused;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "provider",
      "Run the payment provider (POST /payments/charge with Idempotency-Key) until SIGTERM/SIGINT");
  auto cfg = std::make_shared<ConfigOptions>(cmd);
  cfg->bind(cmd->add_option("--db", opts->db,
                            "Store for keys and charges: sqlite:///path.db or postgresql://... "
                            "(store.url)"),
            "store.url");
  cfg->bind(cmd->add_option("--listen", opts->listen,
                            "HOST:PORT to listen on, port 0: any free port (provider.listen, "
                            "default 127.0.0.1:0)"),
            "provider.listen");
  cfg->bind(cmd->add_option("--key-retention", opts->key_retention,
                            "How long an Idempotency-Key is remembered, e.g. 24h "
                            "(provider.key_retention)"),
            "provider.key_retention");
  cfg->bind(cmd->add_option("--reset-after-commit", opts->reset_after_commit,
                            "Share of new charges committed and then answered with a dropped "
                            "connection (provider.reset_after_commit)"),
            "provider.reset_after_commit");
  cfg->bind(cmd->add_option("--unavailable", opts->unavailable,
                            "Share of charge requests answered 503 (provider.unavailable)"),
            "provider.unavailable");
  cfg->bind(cmd->add_option("--in-progress", opts->in_progress,
                            "Share of charge requests answered 409 as if a request with the same "
                            "key were in flight (provider.in_progress)"),
            "provider.in_progress");
  const CLI::Option* latency =
      cfg->bind(cmd->add_option("--latency", opts->latency,
                                "Added to every new charge, as a timer: thousands of requests may "
                                "wait at once (provider.latency, default 0ms)"),
                "provider.latency");
  cfg->bind_old_name(cmd->add_option("--latency-ms"), latency, "ms");
  cfg->bind(cmd->add_option("--decline", opts->decline,
                            "Share of orders declined with 402 card-declined, by hash of order_id "
                            "and seed (provider.decline)"),
            "provider.decline");
  cfg->bind(cmd->add_option("--client-header", opts->client_header,
                            "Request header naming the client; stored Idempotency-Keys are scoped "
                            "by it (provider.client_header, default Authorization)"),
            "provider.client_header");
  cfg->bind(cmd->add_option("--too-many-requests", opts->too_many_requests,
                            "Share of charge requests answered 429 with Retry-After "
                            "(provider.too_many_requests)"),
            "provider.too_many_requests");
  cfg->bind(cmd->add_option("--retry-after", opts->retry_after,
                            "Retry-After of those 429 answers, e.g. 2s; a bare number is seconds "
                            "(provider.retry_after, default 1s)"),
            "provider.retry_after", "s");
  cfg->bind(cmd->add_option("--unavailable-retry-after", opts->unavailable_retry_after,
                            "Retry-After of the 503 answers of --unavailable; a bare number is "
                            "seconds, 0: none (provider.unavailable_retry_after)"),
            "provider.unavailable_retry_after", "s");
  cfg->bind(cmd->add_option("--key-reused", opts->key_reused,
                            "Share of charge requests answered 422 idempotency-key-reused "
                            "(provider.key_reused)"),
            "provider.key_reused");
  cfg->bind(
      cmd->add_option("--seed", opts->seed,
                      "Seed of the fault draws and the decline hash (provider.seed, default 42)"),
      "provider.seed");

  // `opts` is captured so the strings the bound flags write into outlive this function.
  cmd->callback([opts, cfg, &exit_code] {
    const Config settings = cfg->load();
    for (const std::string& warning : settings.warnings)
      std::cerr << "idem provider: warning: " << warning << '\n';
    settings.require({"store.url"});
    const auto& p = settings.get<http::ProviderSettings>();
    const auto [host, port] = split_listen(p.listen);
    const http::ProviderConfig& config = p.provider;

    StopSignals signals;         // before the server starts its threads
    ::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the server
    http::PaymentProvider provider(open_store(settings.store_url, settings.store_options), config);
    provider.start(host, port);
    std::cout << "listening " << provider.base_url() << std::endl;
    signals.wait();
    provider.stop();
    exit_code.value = 0;
  });
}

}  // namespace idem::cli
