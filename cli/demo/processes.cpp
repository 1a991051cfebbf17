// The demo's child processes (processes.hpp).
#include "demo/processes.hpp"

#include <string_view>

#include "idem/config.hpp"

namespace idem::cli::demo {

const std::vector<std::pair<std::string, std::string>>& demo_client_properties() {
  static const std::vector<std::pair<std::string, std::string>> properties = {
      {"session.timeout.ms", "4000"},
      {"heartbeat.interval.ms", "1000"},
      {"reconnect.backoff.max.ms", "1000"},
      {"log_level", "3"}};
  return properties;
}

namespace {

std::vector<std::string> with_kafka(std::vector<std::string> args) {
  for (const auto& [key, value] : demo_client_properties()) {
    args.emplace_back("--kafka");
    args.push_back(key + "=" + value);
  }
  return args;
}

}  // namespace

DemoProcesses::~DemoProcesses() {
  // Each ManagedChild's destructor SIGKILLs a generation that still runs.
  provider_.reset();
  relay_.reset();
  for (auto& c : consumers_) c.reset();
}

void DemoProcesses::start(const RunScope& scope, const std::string& store_url,
                          const DemoOptions& options) {
  provider_ = std::make_unique<ManagedChild>(
      "provider",
      std::vector<std::string>{"provider", "--db",
                               "sqlite://" + (logs_.parent_path() / "provider.db").string(),
                               "--listen", "127.0.0.1:0", "--seed", std::to_string(options.seed),
                               "--latency", format_duration(options.provider_latency)},
      "listening ", log("provider"));
  const std::string line = provider_->start();
  provider_url_ = line.substr(std::string_view("listening ").size());

  relay_ = std::make_unique<ManagedChild>(
      "relay",
      with_kafka({"relay", "--db", store_url, "--brokers", scope.brokers, "--poll-interval", "50ms",
                  "--batch-size", "100", "--progress-interval", "0"}),
      "ready", log("relay"));
  relay_->start();

  const auto consumer = [&](const std::string& name, std::string_view group,
                            std::vector<std::string> handler) {
    std::vector<std::string> args{"consume",
                                  "--brokers",
                                  scope.brokers,
                                  "--topic",
                                  scope.topic,
                                  "--group",
                                  std::string(group),
                                  "--db",
                                  store_url,
                                  "--batch",
                                  std::to_string(options.batch)};
    args.insert(args.end(), handler.begin(), handler.end());
    return std::make_unique<ManagedChild>(name, with_kafka(std::move(args)), "consuming",
                                          log(name));
  };
  consumers_[kBilling1Slot] =
      consumer("billing-1", kBilling, {"--handler", "billing", "--provider-url", provider_url_});
  consumers_[kBilling2Slot] =
      consumer("billing-2", kBilling, {"--handler", "billing", "--provider-url", provider_url_});
  consumers_[kAnalyticsSlot] = consumer("analytics", kAnalytics, {"--handler", "analytics"});
  for (auto& c : consumers_) c->start();
}

void DemoProcesses::stop_all() {
  relay_->stop();
  for (auto& c : consumers_) c->stop();
  provider_->stop();
}

std::vector<const ManagedChild*> DemoProcesses::all() const {
  return {relay_.get(), consumers_[kBilling1Slot].get(), consumers_[kBilling2Slot].get(),
          consumers_[kAnalyticsSlot].get(), provider_.get()};
}

}  // namespace idem::cli::demo
