#pragma once
// The dev broker that tests share. Under ctest it is the `dev_broker` fixture's
// (tests/fixtures/dev_broker_fixture.cpp), one per ctest run, named by the environment
// variable IDEM_TEST_DEV_BROKER (the fixture's directory). A test binary run by hand,
// without that variable, gets one in-process DevBroker for the whole process instead.
//
// Sharing is safe because every test names its own topics and groups (unique_name).
// A test that takes a broker down, injects request errors or topic errors, or otherwise
// changes the cluster for everyone, uses a private idem::DevBroker instead.
#include <memory>
#include <string>
#include <string_view>

namespace idem {
class DevBroker;
}

namespace idem::test {

class SharedBroker {
 public:
  /// The fixture's broker when IDEM_TEST_DEV_BROKER is set (throws std::runtime_error
  /// when the fixture did not start), else a new in-process DevBroker.
  SharedBroker();
  ~SharedBroker();
  SharedBroker(const SharedBroker&) = delete;
  SharedBroker& operator=(const SharedBroker&) = delete;

  [[nodiscard]] const std::string& bootstrap_servers() const noexcept { return bootstrap_; }
  /// Creates a topic; throws (idem::Error from an in-process broker, std::runtime_error
  /// from the fixture) when it exists or the name or count is invalid.
  void create_topic(std::string_view name, int partitions);

 private:
  std::string bootstrap_;
  int control_port_ = 0;                   // the fixture's control server
  std::unique_ptr<DevBroker> in_process_;  // without the fixture
};

/// The process's one SharedBroker, made on first use (thread-safe).
SharedBroker& shared_broker();

}  // namespace idem::test
