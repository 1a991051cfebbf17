// Dead letters of the effect path are sent once, also across a SIGKILL, as a DLQ consumer
// that is not idem sees them (it reads the DLQ topic; it does not collapse copies).
//
// `idem dev-broker`; `idem provider --latency 4000ms`; `idem consume --handler billing`.
// One partition: a valid order first, whose charge takes 4 s, then malformed records. The
// malformed ones are dead-lettered at once, but their offsets cannot be committed before
// the order ahead of them is applied. The consumer records the acknowledged letters in the
// store (idem_consumer_offsets) and is SIGKILLed once they are recorded, in that window,
// and started again. (Between a letter's acknowledgement and its record in the store a
// kill still sends it again: that window is not this test's.) Afterwards the DLQ topic
// holds each malformed record's letter once, the order is charged once with one ledger
// row, and the group committed the partition to its end.
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "support/billing_processes.hpp"
#include "support/consumer_scenario.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/process.hpp"
#include "support/provider_process.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem::test {
namespace dead_letter_resend_test {

using namespace std::chrono_literals;

constexpr int kMalformed = 3;

template <class Backend>
class DeadLetterResend : public BillingProcessesTest {
 protected:
  DeadLetterResend() : BillingProcessesTest(1, &Backend::fresh_url) {}

  ChildProcess start_consumer(const std::string& provider_url) {
    ChildProcess child = ChildProcess::spawn(
        IDEM_CLI_PATH, {"consume", "--brokers", broker_->bootstrap(), "--topic", topic_, "--group",
                        group_, "--db", billing_db_, "--handler", "billing", "--provider-url",
                        provider_url, "--kafka", "session.timeout.ms=6000", "--kafka",
                        "heartbeat.interval.ms=1000", "--kafka", "log_level=3"});
    if (!read_line_starting_with(child, "consuming ", 30s))
      ADD_FAILURE() << "idem consume did not say it is consuming";
    return child;
  }

  std::int64_t dlq_end() { return end_offsets(broker_->bootstrap(), topic_ + ".dlq", 1).at(0); }
};

TYPED_TEST_SUITE(DeadLetterResend, AllBackends, BackendName);

// Before the letters acknowledged above a partition's committed position were kept in the
// store, the restart sent them again (three malformed records, six letters on the DLQ
// topic; the order was charged once either way).
TYPED_TEST(DeadLetterResend, DeadLettersNotSentAgainAfterACrash) {
  if (this->IsSkipped() || this->HasFatalFailure()) return;
  IDEM_REQUIRE_CLI();
  OrderConfirmed order;
  order.event_id = new_uuid_v7();
  order.occurred_at =
      std::chrono::time_point_cast<std::chrono::microseconds>(std::chrono::system_clock::now());
  order.order_id = 1;
  order.customer_id = 7;
  order.total_amount = Amount::from_hundredths(1999);
  {
    KafkaTestProducer producer(this->broker_->bootstrap());
    producer.send({this->topic_, "1", to_json(order), {}, 0});
    for (int i = 0; i < kMalformed; ++i)
      producer.send({this->topic_, fmt::format("bad-{}", i), "{not json", {}, 0});
    producer.flush();
  }
  ProviderProcess provider(IDEM_CLI_PATH, this->provider_db_, {"--latency", "4000ms"});

  ChildProcess first = this->start_consumer(provider.url());
  ASSERT_TRUE(eventually([&] { return this->dlq_end() >= kMalformed; }, 30s, 20ms))
      << "the malformed records were not dead-lettered";
  // Recorded above the partition's stored position (the order at offset 0 is not applied).
  ASSERT_TRUE(eventually(
      [&] {
        return TypeParam::read_scalar(
                   *this->observer_,
                   fmt::format("SELECT count(*) FROM idem_consumer_offsets WHERE consumer_group = "
                               "'{}' AND next_offset = 0 AND acknowledged_letters = '1,2,3'",
                               this->group_)) == 1;
      },
      30s, 20ms))
      << "the acknowledged letters were not recorded in the store";
  // The order's charge is still in flight: no offset of the partition is committed yet.
  first.kill(SIGKILL);
  ASSERT_EQ(first.wait(30s), -SIGKILL);
  ASSERT_EQ(committed_offsets(this->broker_->bootstrap(), this->group_, this->topic_, 1).at(0), -1)
      << "the kill came after the offsets were committed: the window was missed";

  ChildProcess second = this->start_consumer(provider.url());
  ASSERT_TRUE(eventually(
      [&] {
        return committed_offsets(this->broker_->bootstrap(), this->group_, this->topic_, 1).at(0) ==
               1 + kMalformed;
      },
      60s, 100ms))
      << "the partition was not committed to its end";
  second.kill(SIGTERM);
  EXPECT_EQ(second.wait(60s), 0);

  const std::int64_t letters = this->dlq_end();
  const auto read = read_topic(this->broker_->bootstrap(), this->topic_ + ".dlq", 1,
                               static_cast<std::size_t>(letters), 30s);
  std::map<std::string, int> copies;  // idem.original.offset -> letters
  for (const auto& letter : read) ++copies[letter.header("idem.original.offset").value_or("?")];
  EXPECT_EQ(letters, kMalformed) << "letters on the DLQ topic";
  for (const auto& [offset, n] : copies)
    EXPECT_EQ(n, 1) << "the letter of offset " << offset << " is on the DLQ topic " << n
                    << " times";
  EXPECT_EQ(TypeParam::read_scalar(*this->observer_, "SELECT count(*) FROM billing_ledger"), 1);
  EXPECT_EQ(provider_charges(this->provider_db_).size(), 1u);
  EXPECT_EQ(provider.stop(), 0);
}

}  // namespace dead_letter_resend_test
}  // namespace idem::test
