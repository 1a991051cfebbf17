// `idem consume`: run an idempotent consumer until SIGTERM/SIGINT. Settings with a
// configuration key come from the loader (file, environment, flags: docs/operations.md);
// the run itself (watchdog, maintenance, metrics, what `admin.listen` serves) is
// idem::ConsumerService, which embeddings share; this file chooses the handlers.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli_schema.hpp"
#include "commands.hpp"
#include "config_options.hpp"
#include "configured_sinks_wiring.hpp"
#include "idem/config.hpp"
#include "idem/consumer.hpp"
#include "idem/error.hpp"
#include "idem/metrics/metrics.hpp"
#include "idem/reference/analytics.hpp"
#include "idem/reference/billing.hpp"
#include "idem/reference/count_handler.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/order_service.hpp"
#include "idem/reference/payment_provider.hpp"
#include "idem/service/consumer_service.hpp"
#include "idem/service/route_pauses.hpp"
#include "idem/store.hpp"
#include "stop_signals.hpp"
#include "store_schema.hpp"

namespace idem::cli {

namespace {

std::string_view handler_name(HandlerKind kind) {
  switch (kind) {
    case HandlerKind::Billing: return "billing";
    case HandlerKind::Analytics: return "analytics";
    case HandlerKind::Count: break;
  }
  return "count";
}

BillingConfig billing_config(const BillingSettings& settings, std::size_t max_in_flight,
                             bool no_idempotency_key) {
  if (settings.provider_url.empty()) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "consumer.handler billing needs consumer.provider_url (--provider-url)");
  }
  BillingConfig billing;
  billing.provider_url = settings.provider_url;
  billing.client.send_idempotency_key = !no_idempotency_key;
  // One connection per charge in flight (HTTP/1.1 carries one request at a time): with
  // fewer, charges past the limit queue inside libcurl and max_in_flight is not reached.
  billing.client.max_host_connections =
      std::max(billing.client.max_host_connections, max_in_flight);
  return billing;
}

// The SQL-only reference handlers; billing is an effect handler (billing_effect).
Handler<OrderConfirmed> make_handler(HandlerKind handler) {
  if (handler == HandlerKind::Analytics) return analytics_handler();
  return count_handler<OrderConfirmed>();
}

// The reference handlers have a group and a topic of their own (docs/reference-system.md).
std::string default_group(HandlerKind handler) {
  if (handler == HandlerKind::Billing) return std::string(kBillingGroup);
  if (handler == HandlerKind::Analytics) return std::string(kAnalyticsGroup);
  return {};
}

}  // namespace

void register_consume(CLI::App& app, ExitCode& exit_code) {
  struct Options {
    std::string brokers;
    std::vector<std::string> topics;
    std::string group;
    std::string db;
    std::string handler;
    std::string provider_url;
    bool no_idempotency_key = false;
    std::string batch;
    std::string batch_window;
    std::string max_in_flight;
    std::string pipeline_depth;
    std::string auto_offset_reset;
    std::string dedup_retention;
    std::string safety_margin;
    std::string stale;
    std::string maintain_every;
    std::string retry_delays;
    std::string instance_id;
    std::string stop_timeout;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "consume", "Consume topics with exactly-once effects until SIGTERM/SIGINT");
  // Settings with a configuration key come from the loader (file, environment, flags).
  auto cfg = std::make_shared<ConfigOptions>(cmd);
  cfg->bind(cmd->add_option("--brokers", opts->brokers,
                            "Kafka bootstrap servers host:port,... (kafka.bootstrap.servers)"),
            "kafka.bootstrap.servers");
  cfg->bind(cmd->add_option("--topic", opts->topics,
                            "Topic to consume (repeatable; consumer.topics); billing and analytics "
                            "default to order-service.order.confirmed"),
            "consumer.topics");
  cfg->bind(cmd->add_option("--group", opts->group,
                            "Consumer group, also the dedup rows' group (consumer.group); required "
                            "for count, billing and analytics default to billing-order-confirmed / "
                            "analytics-order-confirmed"),
            "consumer.group");
  cfg->bind(cmd->add_option("--db", opts->db,
                            "Store URL: postgresql://... or sqlite:///path.db, migrated on start "
                            "(store.url)"),
            "store.url");
  cfg->bind(cmd->add_option("--handler", opts->handler,
                            "Built-in handler: count (one effect_log row per new event), billing "
                            "(charge the payment provider, ledger row, payment_status), analytics "
                            "(revenue per customer) (consumer.handler, default count)"),
            "consumer.handler");
  cfg->bind(cmd->add_option("--provider-url", opts->provider_url,
                            "billing: the payment provider's base URL, e.g. http://127.0.0.1:8080 "
                            "(consumer.provider_url)"),
            "consumer.provider_url");
  // Deliberately a flag only, with no key: a test-only switch that turns idempotency off
  // must not come from a file or an environment variable someone forgot about.
  cmd->add_flag("--no-idempotency-key", opts->no_idempotency_key,
                "TEST ONLY (billing): send a fresh key with every attempt instead of the event "
                "id, i.e. no idempotency; exists to show the double charge it causes");
  cfg->bind(cmd->add_option("--batch", opts->batch,
                            "Records per transaction, 1 = per message (consumer.batch_size)"),
            "consumer.batch_size");
  const CLI::Option* batch_window =
      cfg->bind(cmd->add_option("--batch-window", opts->batch_window,
                                "After a batch's first record, wait at most this long for more "
                                "(consumer.batch_window, default 50ms; a bare number is "
                                "milliseconds)"),
                "consumer.batch_window");
  cfg->bind_old_name(cmd->add_option("--batch-window-ms"), batch_window, "ms");
  cfg->bind(cmd->add_option("--max-in-flight", opts->max_in_flight,
                            "Effect handlers (billing): calls in flight at most, across ordering "
                            "keys; one per key at a time (consumer.max_in_flight, default 256)"),
            "consumer.max_in_flight");
  cfg->bind(cmd->add_option("--pipeline-depth", opts->pipeline_depth,
                            "2: prepare the next batch on a second store connection while this "
                            "one commits (consumer.pipeline_depth, default 1)"),
            "consumer.pipeline_depth");
  cfg->bind(cmd->add_option("--auto-offset-reset", opts->auto_offset_reset,
                            "Where a group without committed offsets starts, default earliest "
                            "(kafka.auto.offset.reset)")
                ->check(CLI::IsMember({"earliest", "latest"})),
            "kafka.auto.offset.reset");
  const CLI::Option* dedup_retention =
      cfg->bind(cmd->add_option("--dedup-retention", opts->dedup_retention,
                                "Dedup rows are kept this long (event time); older events are "
                                "stale (dedup.retention, default 7d)"),
                "dedup.retention");
  cfg->bind_old_name(cmd->add_option("--dedup-retention-hours"), dedup_retention, "h");
  const CLI::Option* safety_margin = cfg->bind(
      cmd->add_option("--safety-margin", opts->safety_margin,
                      "Dedup horizon = retention - margin (dedup.safety_margin, default 1h)"),
      "dedup.safety_margin");
  cfg->bind_old_name(cmd->add_option("--safety-margin-hours"), safety_margin, "h");
  cfg->bind(cmd->add_option("--stale", opts->stale,
                            "Events past the dedup horizon: quarantine (DLQ), process, skip "
                            "(consumer.stale_events, default quarantine)"),
            "consumer.stale_events");
  cfg->bind(cmd->add_option("--retry-delays", opts->retry_delays,
                            "Non-blocking retry topics: one delay per retry topic, e.g. 1s,10s "
                            "(consumer.retry_topics.delays; off when empty, then retries block "
                            "the partition, which keeps per-key order)"),
            "consumer.retry_topics.delays");
  cfg->bind(cmd->add_option("--instance-id", opts->instance_id,
                            "Static group membership: a restarted process with the same id gets "
                            "its partitions back at once; one id per process "
                            "(consumer.instance_id, librdkafka group.instance.id)"),
            "consumer.instance_id");
  cfg->bind(cmd->add_option("--stop-timeout", opts->stop_timeout,
                            "On SIGTERM, finish, commit and leave the group within this long, "
                            "else exit 1 saying what was not done (consumer.stop_timeout, "
                            "default 30s)"),
            "consumer.stop_timeout");
  const CLI::Option* maintain_every =
      cfg->bind(cmd->add_option("--maintain-every", opts->maintain_every,
                                "Run retention maintenance (idem maintain) in the background this "
                                "often; 0: off (maintenance.interval)"),
                "maintenance.interval");
  cfg->bind_old_name(cmd->add_option("--maintain-every-s"), maintain_every, "s");

  cmd->callback([opts, cfg, &exit_code] {
    const Config settings = cfg->load();
    for (const std::string& warning : settings.warnings)
      std::cerr << "idem consume: warning: " << warning << '\n';
    settings.require({"store.url", "kafka.bootstrap.servers"});
    // Before any thread starts (the maintenance task's, the HTTP client's, librdkafka's).
    StopSignals signals;
    ConsumerConfig config = settings.consumer_config();
    const HandlerKind handler_kind = settings.get<ConsumeSettings>().handler;
    // Routes declared in the file (docs/configured-sinks.md) replace the built-in handlers.
    std::optional<sinks::SinkConfig> routes = configured_routes(settings);
    if (routes) adopt_topics(routes->topic_names(), "the routes", settings, config);
    if (config.group_id.empty()) config.group_id = default_group(handler_kind);
    if (config.group_id.empty()) {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                  fmt::format("consumer.group (--group) is required with --handler {}",
                              handler_name(handler_kind)));
    }
    if (config.topics.empty() && handler_kind != HandlerKind::Count) {
      config.topics.emplace_back(kOrderConfirmedTopic);
    }
    if (config.topics.empty()) {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                  "consumer.topics (--topic) is required with --handler count");
    }
    if (opts->no_idempotency_key && handler_kind != HandlerKind::Billing) {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                  "--no-idempotency-key only applies to --handler billing");
    }

    // The watchdog, the maintenance task, the logger and the metrics; declared before the
    // store and the routes, so the watchdog covers their destruction too.
    ConsumerService service(settings, config);
    auto store = open_store(settings.store_url, settings.store_options);
    // The routes' handlers refer to them: the service keeps them until after the consumer.
    sinks::ConfiguredSinks* configured = nullptr;
    if (routes) {
      configured = &service.own(start_configured_sinks(std::move(*routes), *store));
    } else {
      static_cast<void>(migrate_store(*store, {}, /*reference=*/true));
    }
    Consumer& consumer = service.start(std::move(store));
    Metrics* metrics = service.metrics();
    // Billing charges outside the transaction, concurrently across keys (an effect
    // handler); with retry topics on, a charge the provider keeps failing goes to them.
    // While the provider (or a route's endpoint) is down, the calls wait for it behind its
    // circuit breaker and the route reports paused, so no record moves on for the outage.
    const auto& breaker = settings.get<http::BreakerPolicy>();
    if (configured) {
      configured->install(consumer, config.max_in_flight,
                          route_observers(configured->config(), metrics, config.group_id,
                                          service.logger().lines("sinks")),
                          breaker);
      service.add_readiness(routes_readiness(*configured));
    } else if (handler_kind == HandlerKind::Billing) {
      auto& pauses = service.own(std::make_unique<RoutePauses>("billing", metrics, config.group_id,
                                                               service.logger().lines("billing")));
      BillingConfig billing = billing_config(settings.get<BillingSettings>(), config.max_in_flight,
                                             opts->no_idempotency_key);
      billing.client.breaker = breaker;
      billing.client.on_breaker = pauses.breaker_observer();
      billing.on_pause = pauses.refusal_observer();
      service.add_readiness(pauses.readiness());
      const auto effect = billing_effect(std::move(billing));
      for (const auto& topic : config.topics) consumer.on_effect(topic, effect);
    } else {
      const Handler<OrderConfirmed> handler = make_handler(handler_kind);
      for (const auto& topic : config.topics) {
        consumer.on<OrderConfirmed>(
            topic, metrics != nullptr ? metrics->timed(config.group_id, topic, handler) : handler);
      }
    }
    const OnStopSignal stop_on_signal(signals, [&service] { service.stop(); });

    const ConsumerStats s = service.run([&config](std::optional<int> admin_port) {
      if (admin_port) std::cout << fmt::format("admin server on port {}", *admin_port) << std::endl;
      std::cout << fmt::format("consuming {} as {}", fmt::join(config.topics, ","), config.group_id)
                << std::endl;
    });
    std::cout << fmt::format(
                     "stopped: delivered={} processed={} duplicates={} dead_lettered={} "
                     "retries={} transactions={} offset_commits={} stale={} oldest_event_age_s={} "
                     "dedup_horizon_s={}",
                     s.delivered, s.processed, s.duplicates, s.dead_lettered, s.retries,
                     s.transactions, s.offset_commits, s.stale, s.oldest_event_age.count() / 1000,
                     s.dedup_horizon.count() / 1000)
              << std::endl;
    exit_code.value = 0;
  });
}

}  // namespace idem::cli
