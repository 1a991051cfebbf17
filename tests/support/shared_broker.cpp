#include "support/shared_broker.hpp"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>
#include <httplib.h>

#include "idem/devtools/dev_broker.hpp"
#include "support/test_env.hpp"

namespace idem::test {

SharedBroker::SharedBroker() {
  const auto dir = env("IDEM_TEST_DEV_BROKER");
  if (!dir) {
    in_process_ = std::make_unique<DevBroker>();
    bootstrap_ = in_process_->bootstrap_servers();
    return;
  }
  const std::filesystem::path file = std::filesystem::path(*dir) / "broker";
  std::ifstream in(file);
  if (!std::getline(in, bootstrap_) || !(in >> control_port_) || bootstrap_.empty()) {
    throw std::runtime_error(
        fmt::format("IDEM_TEST_DEV_BROKER is set but {} names no broker: did the ctest fixture "
                    "dev_broker.start fail? (see {}/log)",
                    file.string(), *dir));
  }
}

SharedBroker::~SharedBroker() = default;

void SharedBroker::create_topic(std::string_view name, int partitions) {
  if (in_process_) {
    in_process_->create_topic(name, partitions);
    return;
  }
  httplib::Client control("127.0.0.1", control_port_);
  const httplib::Params params{{"name", std::string(name)},
                               {"partitions", std::to_string(partitions)}};
  const auto res = control.Post("/topics", params);
  if (!res) {
    throw std::runtime_error(
        fmt::format("create topic {}: the shared dev broker's control server "
                    "on port {} did not answer ({})",
                    name, control_port_, httplib::to_string(res.error())));
  }
  if (res->status != 200) {
    throw std::runtime_error(fmt::format("create topic {}: {}", name, res->body));
  }
}

SharedBroker& shared_broker() {
  static SharedBroker broker;
  return broker;
}

}  // namespace idem::test
