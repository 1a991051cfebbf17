// A consumer run as `idem consume` runs it (idem/service/consumer_service.hpp).
#include "idem/service/consumer_service.hpp"

#include <iostream>
#include <utility>

#include <fmt/format.h>

#include "idem/error.hpp"

namespace idem {

ConsumerService::ConsumerService(const Config& settings, ConsumerConfig config)
    : settings_(settings),
      config_(std::move(config)),
      // Consumer::run() returns within the stop timeout by itself unless the consumer's
      // thread is inside a call to a database that stopped answering; a second past it,
      // this ends the process.
      watchdog_(config_.stop_timeout + std::chrono::seconds(1),
                fmt::format("idem: error: consumer stop not finished within {}: a call to the "
                            "database or the broker has not returned. The offsets of the batch "
                            "in progress are not committed: its events will be redelivered and "
                            "deduplicated",
                            format_duration(config_.stop_timeout))),
      logger_(settings.log),
      admin_enabled_(!settings.get<AdminSettings>().listen.empty()) {
  if (settings.maintenance.interval.count() > 0) {
    maintenance_.emplace(
        settings.store_url, settings.retention_policy(), settings.maintenance.interval,
        [](const MaintenanceReport& r) {
          std::cerr << "idem maintenance: " << r.summary() << '\n';
        },
        [](std::string_view line) { std::cerr << line << '\n'; });
  }
}

ConsumerService::~ConsumerService() = default;

Consumer& ConsumerService::start(std::unique_ptr<Store> store) {
  if (consumer_) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Internal,
                "ConsumerService::start: the consumer is already made");
  }
  ConsumerHooks hooks;
  hooks.log = logger_.lines("consumer");
  // admin.listen set: metrics (batch and handler histograms, counters read from stats()
  // at scrape time) and /readyz with the consumer and the store.
  if (admin_enabled_) hooks = metrics_.instrument(config_.group_id, std::move(hooks));
  consumer_ = std::make_unique<Consumer>(config_, std::move(store), std::move(hooks));
  return *consumer_;
}

Consumer& ConsumerService::consumer() {
  if (!consumer_) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Internal,
                "ConsumerService: start() has not made the consumer yet");
  }
  return *consumer_;
}

Metrics* ConsumerService::metrics() noexcept {
  return admin_enabled_ ? &metrics_ : nullptr;
}

void ConsumerService::add_readiness(ReadinessCheck check) {
  extra_checks_.push_back(std::move(check));
}

ConsumerStats ConsumerService::run(
    const std::function<void(std::optional<int> admin_port)>& on_serving) {
  Consumer& running = consumer();
  AdminEndpoints admin;
  if (admin_enabled_) {
    metrics_.watch(running, config_.group_id);
    std::vector<ReadinessCheck> checks = {
        consumer_readiness(running, settings_.get<AdminSettings>().stuck_after),
        store_readiness(settings_.store_url, settings_.store_options)};
    for (auto& check : extra_checks_) checks.push_back(std::move(check));
    extra_checks_.clear();
    admin = start_admin_endpoints(settings_, metrics_, std::move(checks), {config_.group_id});
  }
  if (on_serving) on_serving(admin_enabled_ ? std::optional<int>(admin.port()) : std::nullopt);
  running.run();
  admin = {};  // before unwatch: no scrape may read a consumer that is going away
  if (admin_enabled_) metrics_.unwatch(running);
  return running.stats();
}

void ConsumerService::stop() {
  watchdog_.arm();
  if (consumer_) consumer_->stop();
}

}  // namespace idem
