#pragma once
// The setting of the billing tests that run as real processes: the billing consumer's store
// (the reference system's tables migrated, and a connection the test reads it through),
// the provider's own store, and an `idem dev-broker` with the orders topic and its DLQ.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "support/consumer_scenario.hpp"
#include "support/test_env.hpp"

namespace idem::test {

/// `fresh_url` is the backend's (tests/support/store_backends.hpp): a typed test passes
/// `&Backend::fresh_url`, so the members here are no dependent names in its body.
class BillingProcessesTest : public ::testing::Test {
 protected:
  BillingProcessesTest(int partitions, std::string (*fresh_url)())
      : partitions_(partitions), fresh_url_(fresh_url) {}

  void SetUp() override {
    billing_db_ = fresh_url_();
    if (IsSkipped() || HasFatalFailure()) return;
    provider_db_ = fresh_url_();
    if (IsSkipped() || HasFatalFailure()) return;
    migrate_reference_system(*open_store(billing_db_));
    observer_ = open_store(billing_db_);
    broker_ = std::make_unique<DevBrokerProcess>(IDEM_CLI_PATH);
    topic_ = unique_name("orders");
    group_ = unique_name("billing");
    broker_->create_topic(topic_, partitions_);
    broker_->create_topic(topic_ + ".dlq", 1);
  }

  int partitions_;
  std::string (*fresh_url_)();
  std::string billing_db_;
  std::string provider_db_;
  std::unique_ptr<Store> observer_;
  std::unique_ptr<DevBrokerProcess> broker_;
  std::string topic_;
  std::string group_;
};

}  // namespace idem::test
