#pragma once
// A GoogleTest fixture base whose suite shares one in-process DevBroker (starting one
// costs about a second), plus unique topic names so tests in a suite never collide,
// and a Consumer running on a thread of its own.
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/consumer.hpp"
#include "idem/dev_broker.hpp"
#include "support/consumer_scenario.hpp"

namespace idem::test {

/// `<prefix>-<12 random hex digits>`.
inline std::string unique_name(std::string_view prefix) {
  static std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}-{:012x}", prefix, rng() & 0xffffffffffffULL);
}

/// A consumer configuration for the mock cluster: its first group join waits a fixed 3 s,
/// so session.timeout.ms must be above that (docs/dev-broker.md); short batch windows
/// and backoffs keep tests quick.
inline ConsumerConfig mock_consumer_config(const std::string& bootstrap, const std::string& group,
                                           std::vector<std::string> topics) {
  ConsumerConfig c;
  c.bootstrap_servers = bootstrap;
  c.group_id = group;
  c.topics = std::move(topics);
  c.batch_size = 100;
  c.batch_window = std::chrono::milliseconds(20);
  c.retry.initial_backoff = std::chrono::milliseconds(10);
  c.retry.max_backoff = std::chrono::milliseconds(100);
  c.kafka = {{"session.timeout.ms", "6000"}, {"heartbeat.interval.ms", "1000"}, {"log_level", "3"}};
  return c;
}

class DevBrokerSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { broker_ = new DevBroker(); }
  static void TearDownTestSuite() {
    delete broker_;
    broker_ = nullptr;
  }
  static inline DevBroker* broker_ = nullptr;
};

/// Runs Consumer::run() on its own thread; stop() (or the destructor) stops and joins.
class RunningConsumer {
 public:
  explicit RunningConsumer(std::unique_ptr<Consumer> consumer) : consumer_(std::move(consumer)) {
    thread_ = std::thread([this] {
      try {
        consumer_->run();
      } catch (...) {
        error_ = std::current_exception();
      }
      finished_.store(true);
    });
  }
  RunningConsumer(const RunningConsumer&) = delete;
  RunningConsumer& operator=(const RunningConsumer&) = delete;
  ~RunningConsumer() { stop(); }

  Consumer& operator*() { return *consumer_; }
  Consumer* operator->() { return consumer_.get(); }
  /// Stops and joins; false if run() did not return within `timeout` (the thread is then
  /// detached so the test fails instead of hanging).
  bool stop(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    if (!thread_.joinable()) return true;
    consumer_->stop();
    const bool returned = wait_until([&] { return finished_.load(); }, timeout, std::chrono::milliseconds(10));
    if (returned) thread_.join();
    else thread_.detach();
    return returned;
  }
  [[nodiscard]] bool finished() const { return finished_.load(); }
  /// What run() threw, if it did.
  [[nodiscard]] std::exception_ptr error() const { return error_; }

 private:
  std::unique_ptr<Consumer> consumer_;
  std::thread thread_;
  std::atomic<bool> finished_{false};
  std::exception_ptr error_;
};

}  // namespace idem::test
