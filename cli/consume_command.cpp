// `idem consume`: run an idempotent consumer from flags until SIGTERM/SIGINT.
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
#include "idem/consumer.hpp"
#include "idem/error.hpp"
#include "idem/events/order_confirmed.hpp"
#include "idem/handlers/count.hpp"
#include "idem/http/payment_provider.hpp"
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

std::pair<std::string, std::string> split_property(const std::string& kv) {
  const auto eq = kv.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                fmt::format("--kafka expects key=value, got '{}'", kv));
  }
  return {kv.substr(0, eq), kv.substr(eq + 1)};
}

struct HandlerOptions {
  std::string name;
  std::string provider_url;
  bool no_idempotency_key = false;
};

Handler<OrderConfirmed> make_handler(const HandlerOptions& opts) {
  if (opts.name == "billing") {
    if (opts.provider_url.empty()) {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                  "--handler billing needs --provider-url");
    }
    BillingConfig billing;
    billing.provider_url = opts.provider_url;
    billing.client.send_idempotency_key = !opts.no_idempotency_key;
    return billing_handler(std::move(billing));
  }
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
    std::size_t batch = 500;
    int batch_window_ms = 50;
    std::vector<std::string> kafka;
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
  cmd->add_option("--brokers", opts->brokers, "Kafka bootstrap servers (host:port,...)")
      ->required();
  cmd->add_option("--topic", opts->topics,
                  "Topic to consume (repeatable); billing and analytics default to "
                  "order-service.order.confirmed");
  cmd->add_option("--group", opts->group,
                  "Consumer group (also the dedup rows' group); required for count, billing "
                  "and analytics default to billing-order-confirmed / analytics-order-confirmed");
  cmd->add_option("--db", opts->db, "Store URL: postgresql://... or sqlite:///path.db (migrated on start)")
      ->required();
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
  cmd->add_option("--batch", opts->batch, "Records per transaction (1 = per message)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100000}))
      ->capture_default_str();
  cmd->add_option("--batch-window-ms", opts->batch_window_ms,
                  "After a batch's first record, wait at most this long for more")
      ->check(CLI::Range(0, 60000))
      ->capture_default_str();
  cmd->add_option("--kafka", opts->kafka, "librdkafka property key=value (repeatable)");
  cmd->add_option("--auto-offset-reset", opts->auto_offset_reset,
                  "Where a group without committed offsets starts (default earliest)")
      ->check(CLI::IsMember({"earliest", "latest"}));
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

  cmd->callback([opts, &exit_code] {
    if (opts->group.empty()) opts->group = default_group(opts->handler);
    if (opts->group.empty()) {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                  fmt::format("--group is required with --handler {}", opts->handler));
    }
    if (opts->topics.empty() && opts->handler != "count") {
      opts->topics.emplace_back(kOrderConfirmedTopic);
    }
    if (opts->topics.empty()) {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                  "--topic is required with --handler count");
    }
    if (opts->no_idempotency_key && opts->handler != "billing") {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                  "--no-idempotency-key only applies to --handler billing");
    }
    const Handler<OrderConfirmed> handler = make_handler(
        {.name = opts->handler, .provider_url = opts->provider_url,
         .no_idempotency_key = opts->no_idempotency_key});
    ConsumerConfig config;
    config.bootstrap_servers = opts->brokers;
    config.group_id = opts->group;
    config.topics = opts->topics;
    config.batch_size = opts->batch;
    config.batch_window = std::chrono::milliseconds(opts->batch_window_ms);
    for (const auto& kv : opts->kafka) config.kafka.push_back(split_property(kv));
    if (!opts->auto_offset_reset.empty())
      config.kafka.emplace_back("auto.offset.reset", opts->auto_offset_reset);

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

    auto store = open_store(opts->db);
    store->migrate();
    std::optional<MaintenanceTask> maintenance;
    if (opts->maintain_every_s > 0) {
      RetentionPolicy policy;
      policy.dedup = config.dedup_horizon;
      maintenance.emplace(
          opts->db, policy, std::chrono::seconds(opts->maintain_every_s),
          [](const MaintenanceReport& r) { std::cerr << "idem maintenance: " << r.summary() << '\n'; },
          [](std::string_view line) { std::cerr << line << '\n'; });
    }

    // Signals are blocked before the consumer creates librdkafka's threads.
    StopOnSignal signals;
    Consumer consumer(config, std::move(store));
    for (const auto& topic : config.topics) consumer.on<OrderConfirmed>(topic, handler);
    signals.start(consumer);

    std::cout << fmt::format("consuming {} as {}", fmt::join(config.topics, ","), config.group_id)
              << std::endl;
    consumer.run();

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
