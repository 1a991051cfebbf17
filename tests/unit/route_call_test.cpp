// The call of a configured HTTP route (sinks/route_call.hpp) against a real loopback
// server: a route whose every call is refused pauses, and a refusal that may predate the
// endpoint's recovery is tried again rather than dead-lettered, while a refusal among
// successes is the request's own.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "idem/http/async_client.hpp"
#include "idem/sinks/sink_config.hpp"
#include "idem/uuid.hpp"
#include "sinks/event_reader.hpp"
#include "sinks/route_call.hpp"
#include "support/charge_route.hpp"
#include "support/wait.hpp"
#include "support/waited_completion.hpp"

namespace idem::sinks {
namespace route_call_test {

using namespace std::chrono_literals;
using test::WaitedCompletion;

/// A loopback endpoint: orders in `refused` get 401, the others 200 with a payment id;
/// an order in `held` is answered only once release() is called for it.
class Endpoint {
 public:
  Endpoint() {
    server_.Post("/charge", [this](const httplib::Request& req, httplib::Response& res) {
      const std::string order = req.get_header_value("X-Order");
      std::unique_lock lock(mutex_);
      received_.insert(order);
      changed_.notify_all();
      changed_.wait(lock, [&] { return !held_.contains(order) || stopping_; });
      if (refused_.contains(order)) {
        res.status = 401;
        res.set_content(R"({"title":"bad token"})", "application/json");
        return;
      }
      res.set_content(fmt::format(R"({{"payment_id":"pay-{}"}})", order), "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    serving_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~Endpoint() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      changed_.notify_all();
    }
    server_.stop();
    serving_.join();
  }
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  void refuse(const std::string& order) {
    std::lock_guard lock(mutex_);
    refused_.insert(order);
  }
  void hold(const std::string& order) {
    std::lock_guard lock(mutex_);
    held_.insert(order);
  }
  void release(const std::string& order) {
    std::lock_guard lock(mutex_);
    held_.erase(order);
    changed_.notify_all();
  }
  bool received(const std::string& order) {
    std::lock_guard lock(mutex_);
    return received_.contains(order);
  }
  [[nodiscard]] int port() const { return port_; }

 private:
  httplib::Server server_;
  std::thread serving_;
  int port_ = 0;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::set<std::string> refused_;
  std::set<std::string> held_;
  std::set<std::string> received_;
  bool stopping_ = false;
};

class RouteCall : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(endpoint_.port(), 0);
    const auto dir = std::filesystem::temp_directory_path() / test::unique_name("route-call");
    std::filesystem::create_directories(dir);
    const auto file = dir / "r.toml";
    std::ofstream(file) << test::charge_route_toml("orders", endpoint_.port());
    config_ = *load_sink_config(file.string(), {});
    route_.config = &config_.routes[0];
    reader_ = std::make_unique<detail::EventReader>(
        "orders", config_.topics.at("orders"), std::vector<const detail::CompiledRoute*>{&route_},
        Backend::Sqlite);
    calls_ = std::make_unique<detail::RouteCalls>(config_.routes[0], Backend::Sqlite, observers_);
  }

  /// One call in flight: its event and where it completes.
  struct Call {
    std::unique_ptr<detail::SinkEvent> event;
    std::shared_ptr<WaitedCompletion> completion = std::make_shared<WaitedCompletion>();
  };

  /// Starts the call of the event of order `order`.
  Call start(int order) {
    const std::string payload =
        fmt::format(R"({{"event_id":"{}","event_type":"order.confirmed.v1","order_id":{}}})",
                    new_uuid_v7().to_string(), order);
    RecordInfo info;
    info.topic = "orders";
    info.payload = payload;
    info.consumer_group = "g";
    Validated<detail::SinkEvent> read = reader_->read(info, ParseLimits{});
    EXPECT_TRUE(read.ok()) << read.error().message;
    Call call;
    call.event = std::make_unique<detail::SinkEvent>(std::move(read).value());
    calls_->start(client_, *call.event, test::completion_into<detail::CallAnswer>(call.completion));
    return call;
  }

  Endpoint endpoint_;
  SinkObservers observers_;
  SinkConfig config_;
  detail::CompiledRoute route_;
  std::unique_ptr<detail::EventReader> reader_;
  http::AsyncClient client_;
  std::unique_ptr<detail::RouteCalls> calls_;
};

TEST_F(RouteCall, ARefusalAnsweredWhileThePausedRouteResumesIsTriedAgain) {
  // Every call refused: the route pauses, the event waits (retry), nothing is dead-lettered.
  endpoint_.refuse("1");
  Call first = start(1);
  ASSERT_EQ(first.completion->wait(), Outcome::Retry) << first.completion->reason();
  EXPECT_NE(calls_->paused_reason().find("401"), std::string::npos) << calls_->paused_reason();

  // A call started while paused, refused, but answered only after another call succeeded.
  endpoint_.refuse("2");
  endpoint_.hold("2");
  Call before_recovery = start(2);
  ASSERT_TRUE(test::eventually([&] { return endpoint_.received("2"); }, 30s));
  Call succeeding = start(3);
  ASSERT_EQ(succeeding.completion->wait(), Outcome::Done) << succeeding.completion->reason();
  EXPECT_EQ(calls_->paused_reason(), "") << "a success resumes the route";
  endpoint_.release("2");
  EXPECT_EQ(before_recovery.completion->wait(), Outcome::Retry)
      << "dead-lettered: " << before_recovery.completion->reason();

  // Started while the route runs, refused while another call succeeds: its own fault.
  endpoint_.refuse("4");
  endpoint_.hold("4");
  Call own_fault = start(4);
  ASSERT_TRUE(test::eventually([&] { return endpoint_.received("4"); }, 30s));
  Call other = start(5);
  ASSERT_EQ(other.completion->wait(), Outcome::Done) << other.completion->reason();
  endpoint_.release("4");
  EXPECT_EQ(own_fault.completion->wait(), Outcome::DeadLetter) << own_fault.completion->reason();
  EXPECT_EQ(calls_->paused_reason(), "");
}

}  // namespace route_call_test
}  // namespace idem::sinks
