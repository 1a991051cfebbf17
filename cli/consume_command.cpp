// `idem consume`: run an idempotent consumer until SIGTERM/SIGINT. Settings with a
// configuration key come from the loader (file, environment, flags: docs/operations.md);
// with `admin.listen` set it serves /metrics, /healthz and /readyz.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "config_options.hpp"
#include "idem/reference/schema.hpp"
#include "idem/consumer.hpp"
#include "idem/error.hpp"
#include "idem/logging.hpp"
#include "idem/metrics/metrics.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/count_handler.hpp"
#include "idem/reference/payment_provider.hpp"
#include "idem/retention.hpp"
#include "idem/reference/analytics.hpp"
#include "idem/reference/billing.hpp"
#include "idem/reference/order_service.hpp"
#include "idem/store.hpp"

namespace idem::cli {

namespace {

/// Blocks SIGINT/SIGTERM in the calling thread (and so in every thread started after,
/// librdkafka's included) and turns them into consumer.stop() on a thread of its own.
/// Nothing runs in a signal handler.
class StopOnSignal {
 public:
  StopOnSignal() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;
  ~StopOnSignal() {
    done_.store(true);
    if (waiter_.joinable()) waiter_.join();
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

  void start(Consumer& consumer) {
    waiter_ = std::thread([this, &consumer] {
      const timespec slice{0, 200'000'000};  // re-check done_ every 200 ms
      while (!done_.load()) {
        if (sigtimedwait(&set_, nullptr, &slice) > 0) consumer.stop();
      }
    });
  }

 private:
  sigset_t set_{};
  sigset_t old_{};
  std::atomic<bool> done_{false};
  std::thread waiter_;
};

struct HandlerOptions {
  std::string name;
  std::string provider_url;
  bool no_idempotency_key = false;
};

BillingConfig billing_config(const HandlerOptions& opts) {
  if (opts.provider_url.empty()) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "--handler billing needs --provider-url");
  }
  BillingConfig billing;
  billing.provider_url = opts.provider_url;
  billing.client.send_idempotency_key = !opts.no_idempotency_key;
  return billing;
}

Handler<OrderConfirmed> make_handler(const HandlerOptions& opts) {
  if (opts.name == "billing") return billing_handler(billing_config(opts));
  if (opts.name == "analytics") return analytics_handler();
  return count_handler<OrderConfirmed>();
}

// The reference handlers have a group and a topic of their own (SPEC section 2).
std::string default_group(const std::string& handler) {
  if (handler == "billing") return std::string(kBillingGroup);
  if (handler == "analytics") return std::string(kAnalyticsGroup);
  return {};
}

}  // namespace

void register_consume(CLI::App& app, ExitCode& exit_code) {
  struct Options {
    std::string brokers;
    std::vector<std::string> topics;
    std::string group;
    std::string db;
    std::string handler = "count";
    std::string provider_url;
    bool no_idempotency_key = false;
    std::string batch;
    std::string batch_window_ms;
    std::string max_in_flight;
    std::string auto_offset_reset;
    int dedup_retention_hours = 24 * 7;
    int safety_margin_hours = 1;
    std::string stale = "quarantine";
    int maintain_every_s = 0;
    std::string retry_delays;
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
  cmd->add_option("--handler", opts->handler,
                  "Built-in handler: count (one effect_log row per new event), billing (charge "
                  "the payment provider, ledger row, payment_status), analytics (revenue per customer)")
      ->check(CLI::IsMember({"count", "billing", "analytics"}))
      ->capture_default_str();
  cmd->add_option("--provider-url", opts->provider_url,
                  "billing: the payment provider's base URL, e.g. http://127.0.0.1:8080");
  cmd->add_flag("--no-idempotency-key", opts->no_idempotency_key,
                "TEST ONLY (billing): send a fresh key with every attempt instead of the event "
                "id, i.e. no idempotency; exists to show the double charge it causes");
  cfg->bind(cmd->add_option("--batch", opts->batch,
                            "Records per transaction, 1 = per message (consumer.batch_size)"),
            "consumer.batch_size");
  cfg->bind(cmd->add_option("--batch-window-ms", opts->batch_window_ms,
                            "After a batch's first record, wait at most this long for more "
                            "(consumer.batch_window_ms)"),
            "consumer.batch_window_ms");
  cfg->bind(cmd->add_option("--max-in-flight", opts->max_in_flight,
                            "Effect handlers (billing): calls in flight at most, across ordering "
                            "keys; one per key at a time (consumer.max_in_flight)"),
            "consumer.max_in_flight");
  cfg->bind(cmd->add_option("--auto-offset-reset", opts->auto_offset_reset,
                            "Where a group without committed offsets starts, default earliest "
                            "(kafka.auto.offset.reset)")
                ->check(CLI::IsMember({"earliest", "latest"})),
            "kafka.auto.offset.reset");
  cmd->add_option("--dedup-retention-hours", opts->dedup_retention_hours,
                  "Dedup rows are kept this long (event time); older events are stale")
      ->check(CLI::Range(1, 24 * 3650))->capture_default_str();
  cmd->add_option("--safety-margin-hours", opts->safety_margin_hours, "Dedup horizon = retention - margin")
      ->check(CLI::Range(0, 24 * 3650))->capture_default_str();
  cmd->add_option("--stale", opts->stale, "Events past the dedup horizon: quarantine (DLQ), process, skip")
      ->check(CLI::IsMember({"quarantine", "process", "skip"}))->capture_default_str();
  cmd->add_option("--retry-delays", opts->retry_delays,
                  "Non-blocking retry topics: one delay per retry topic, e.g. 1s,10s (off when "
                  "empty; then retries block the partition, which keeps per-key order)");
  cmd->add_option("--maintain-every-s", opts->maintain_every_s,
                  "Run retention maintenance (idem maintain) in the background this often; 0: off")
      ->check(CLI::Range(0, 86'400))->capture_default_str();

  cmd->callback([opts, cfg, &exit_code] {
    const Config settings = cfg->load();
    settings.require({"store.url", "kafka.bootstrap.servers"});
    ConsumerConfig config = settings.consumer_config();
    if (config.group_id.empty()) config.group_id = default_group(opts->handler);
    if (config.group_id.empty()) {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                  fmt::format("consumer.group (--group) is required with --handler {}", opts->handler));
    }
    if (config.topics.empty() && opts->handler != "count") {
      config.topics.emplace_back(kOrderConfirmedTopic);
    }
    if (config.topics.empty()) {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                  "consumer.topics (--topic) is required with --handler count");
    }
    if (opts->no_idempotency_key && opts->handler != "billing") {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                  "--no-idempotency-key only applies to --handler billing");
    }
    const HandlerOptions handler_options{.name = opts->handler, .provider_url = opts->provider_url,
                                         .no_idempotency_key = opts->no_idempotency_key};

    config.dedup_horizon.retention = std::chrono::hours(opts->dedup_retention_hours);
    config.dedup_horizon.safety_margin = std::chrono::hours(opts->safety_margin_hours);
    // Each delay reads like --key-retention of `idem provider` (same parser).
    for (std::string_view rest = opts->retry_delays; !rest.empty();) {
      const auto comma = rest.find(',');
      const std::string_view item = rest.substr(0, comma);
      try {
        config.retry_topics.delays.push_back(http::parse_duration(item));
      } catch (const Error& e) {
        throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                    fmt::format("--retry-delays: {}", e.what()));
      }
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    config.stale_events = opts->stale == "process" ? StaleEventPolicy::Process
                          : opts->stale == "skip"  ? StaleEventPolicy::Skip
                                                   : StaleEventPolicy::Quarantine;

    auto store = open_store(settings.store_url, settings.store_options);
    idem::migrate_reference_system(*store);
    std::optional<MaintenanceTask> maintenance;
    if (opts->maintain_every_s > 0) {
      RetentionPolicy policy;
      policy.dedup = config.dedup_horizon;
      maintenance.emplace(
          settings.store_url, policy, std::chrono::seconds(opts->maintain_every_s),
          [](const MaintenanceReport& r) { std::cerr << "idem maintenance: " << r.summary() << '\n'; },
          [](std::string_view line) { std::cerr << line << '\n'; });
    }

    const Logger logger(settings.log);
    ConsumerHooks hooks;
    hooks.log = logger.lines("consumer");
    // admin.listen set: metrics (batch and handler histograms, counters read from stats()
    // at scrape time) and /readyz with the consumer and the store.
    const bool admin_enabled = !settings.admin.listen.empty();
    Metrics metrics;
    if (admin_enabled) hooks = metrics.instrument(config.group_id, std::move(hooks));

    // Signals are blocked before the consumer creates librdkafka's threads.
    StopOnSignal signals;
    Consumer consumer(config, std::move(store), std::move(hooks));
    // Billing charges outside the transaction (an effect handler) unless retry topics are
    // on: those need the Handler shape, which charges inside it.
    if (opts->handler == "billing" && !config.retry_topics.enabled()) {
      const auto billing = billing_effect(billing_config(handler_options));
      for (const auto& topic : config.topics) consumer.on_effect(topic, billing);
    } else {
      const Handler<OrderConfirmed> handler = make_handler(handler_options);
      for (const auto& topic : config.topics) {
        consumer.on<OrderConfirmed>(
            topic, admin_enabled ? metrics.timed(config.group_id, topic, handler) : handler);
      }
    }
    std::unique_ptr<AdminServer> admin;
    if (admin_enabled) {
      metrics.watch(consumer, config.group_id);
      admin = std::make_unique<AdminServer>(
          settings.admin.listen, metrics,
          std::vector<ReadinessCheck>{consumer_readiness(consumer, settings.admin.stuck_after),
                                      store_readiness(settings.store_url, settings.store_options)});
      std::cout << fmt::format("admin server on port {}", admin->port()) << std::endl;
    }
    signals.start(consumer);

    std::cout << fmt::format("consuming {} as {}", fmt::join(config.topics, ","), config.group_id)
              << std::endl;
    consumer.run();
    admin.reset();  // before unwatch: no scrape may read a consumer that is going away
    if (admin_enabled) metrics.unwatch(consumer);

    const ConsumerStats s = consumer.stats();
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
