#pragma once
// A GoogleTest fixture base on the dev broker that tests share (one per ctest run; starting
// one costs about a second), plus unique topic names so tests never collide, and a
// Consumer running on a thread of its own.
#include <atomic>
#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/consumer.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "support/consumer_scenario.hpp"
#include "support/kafka_test_producer.hpp"  // unique_name, produce_order_events
#include "support/mock_group.hpp"
#include "support/shared_broker.hpp"
#include "support/wait.hpp"

namespace idem::test {

/// A consumer configuration for the mock cluster: its group timing (mock_group.hpp), short
/// batch windows and backoffs keep tests quick. The start-up check of the topic retention is off:
/// the mock cluster never answers it, and the tests about it turn it on.
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
  c.kafka = mock_group_properties();
  c.check_topic_retention = false;
  return c;
}

/// A suite on the shared dev broker (support/shared_broker.hpp): tests create their own
/// topics and groups, and inject no errors into it.
class DevBrokerSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { broker_ = &shared_broker(); }
  static inline SharedBroker* broker_ = nullptr;
};

/// A suite whose tests consume order.confirmed events: each test gets a fresh migrated
/// store (url_, and observer_ to read it), a fresh topic with its DLQ holding the events
/// (ids_: order id -> event id), and a fresh consumer group.
template <class Backend>
class OrderEventsSuite : public DevBrokerSuite {
 protected:
  /// Call first in SetUp(). False when the backend is not available here (the test is
  /// skipped then).
  bool set_up_orders(int events) {
    url_ = Backend::fresh_url();
    if (this->IsSkipped() || this->HasFatalFailure()) return false;
    idem::migrate_reference_system(*open_store(url_));
    observer_ = open_store(url_);
    topic_ = unique_name("orders");
    group_ = unique_name("g");
    broker_->create_topic(topic_, 1);
    broker_->create_topic(topic_ + ".dlq", 1);
    ids_ = produce_order_events(broker_->bootstrap_servers(), topic_, events);
    return true;
  }

  std::string url_;
  std::unique_ptr<Store> observer_;
  std::string topic_;
  std::string group_;
  std::map<std::int64_t, Uuid> ids_;
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
    const bool returned =
        eventually([&] { return finished_.load(); }, timeout, std::chrono::milliseconds(10));
    if (returned)
      thread_.join();
    else
      thread_.detach();
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
