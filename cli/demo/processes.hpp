#pragma once
// The demo's cast of child processes: the payment provider, the relay, two billing
// consumers (one group) and an analytics consumer, each a restartable ManagedChild.
#include <array>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "demo/audit.hpp"
#include "demo/children.hpp"
#include "demo/demo.hpp"

namespace idem::cli::demo {

/// Kafka properties every demo client gets: the mock cluster's first group join waits
/// 3 s (session.timeout.ms must be above that), and a SIGKILLed member's partitions
/// move after session.timeout.ms, so it is as short as the mock allows.
[[nodiscard]] const std::vector<std::pair<std::string, std::string>>& demo_client_properties();

class DemoProcesses {
 public:
  /// `logs`: the directory each child's log file goes to.
  explicit DemoProcesses(std::filesystem::path logs) : logs_(std::move(logs)) {}
  ~DemoProcesses();  // SIGKILLs whatever still runs
  DemoProcesses(const DemoProcesses&) = delete;
  DemoProcesses& operator=(const DemoProcesses&) = delete;

  /// Starts the provider (and learns its URL), the relay and the three consumers, each
  /// waiting for its ready line.
  void start(const RunScope& scope, const std::string& store_url, const DemoOptions& options);
  /// SIGTERM to every child (relay first, provider last), each waiting for its exit.
  void stop_all();

  [[nodiscard]] std::filesystem::path log(const std::string& name) const {
    return logs_ / (name + ".log");
  }
  [[nodiscard]] const std::string& provider_url() const noexcept { return provider_url_; }
  ManagedChild& relay() { return *relay_; }
  ManagedChild& billing1() { return *consumers_[kBilling1Slot]; }
  ManagedChild& billing2() { return *consumers_[kBilling2Slot]; }
  ManagedChild& analytics() { return *consumers_[kAnalyticsSlot]; }
  /// Every child, for the audit's table.
  [[nodiscard]] std::vector<const ManagedChild*> all() const;

 private:
  static constexpr std::size_t kBilling1Slot = 0;
  static constexpr std::size_t kBilling2Slot = 1;
  static constexpr std::size_t kAnalyticsSlot = 2;

  std::filesystem::path logs_;
  std::string provider_url_;
  std::unique_ptr<ManagedChild> provider_;
  std::unique_ptr<ManagedChild> relay_;
  std::array<std::unique_ptr<ManagedChild>, 3> consumers_;
};

}  // namespace idem::cli::demo
