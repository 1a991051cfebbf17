#pragma once
// Plain librdkafka handles for tests that talk to a broker directly (no idem code on
// the client side), so the broker and the protocol are what is under test.
#include <librdkafka/rdkafka.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace idem::test {

using KafkaProps = std::vector<std::pair<std::string, std::string>>;

struct KafkaHandleDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
using KafkaHandle = std::unique_ptr<rd_kafka_t, KafkaHandleDeleter>;

/// Applies `props` (after log_level=2: faults are injected on purpose, so keep the test
/// log readable) to `conf` and creates the handle; takes ownership of `conf`.
/// Throws std::runtime_error naming the property librdkafka rejected.
KafkaHandle make_kafka_handle(rd_kafka_type_t type, rd_kafka_conf_t* conf, const KafkaProps& props);

}  // namespace idem::test
