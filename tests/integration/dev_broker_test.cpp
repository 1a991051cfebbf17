// DevBroker: the embedded mock cluster must behave like a Kafka cluster for the
// things idem relies on (produce, group consume, manual commit, resume, metadata)
// and its fault injection must have an effect that clients can observe.
#include "idem/devtools/dev_broker.hpp"

#include <librdkafka/rdkafka.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/kafka_handle.hpp"
#include "support/wait.hpp"

#include "idem/error.hpp"

namespace idem {
namespace dev_broker_test {

using test::unique_name;

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using Props = test::KafkaProps;
using Header = std::pair<std::string, std::optional<std::string>>;

struct MessageDeleter {
  void operator()(rd_kafka_message_t* m) const { rd_kafka_message_destroy(m); }
};
struct PartitionListDeleter {
  void operator()(rd_kafka_topic_partition_list_t* l) const {
    rd_kafka_topic_partition_list_destroy(l);
  }
};
struct MetadataDeleter {
  void operator()(const rd_kafka_metadata_t* md) const { rd_kafka_metadata_destroy(md); }
};
using Handle = test::KafkaHandle;
using PartitionList = std::unique_ptr<rd_kafka_topic_partition_list_t, PartitionListDeleter>;

int to_ms(std::chrono::milliseconds d) {
  return static_cast<int>(d.count());
}

/// A producer that records delivery reports; reports arrive during flush().
class TestProducer {
 public:
  explicit TestProducer(const std::string& bootstrap, const Props& extra = {}) {
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set_opaque(conf, this);
    rd_kafka_conf_set_dr_msg_cb(conf, [](rd_kafka_t*, const rd_kafka_message_t* m, void* self) {
      auto* p = static_cast<TestProducer*>(self);
      if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        ++p->delivered_;
      } else {
        p->failures_.push_back(m->err);
      }
    });
    Props props{{"bootstrap.servers", bootstrap}, {"linger.ms", "5"}};
    props.insert(props.end(), extra.begin(), extra.end());
    handle_ = test::make_kafka_handle(RD_KAFKA_PRODUCER, conf, props);
  }
  TestProducer(const TestProducer&) = delete;
  TestProducer& operator=(const TestProducer&) = delete;

  void produce(const std::string& topic, std::int32_t partition, const std::string& key,
               const std::string& value, const std::vector<Header>& headers = {}) {
    std::vector<rd_kafka_vu_t> vus;
    rd_kafka_vu_t vu{};
    vu.vtype = RD_KAFKA_VTYPE_TOPIC;
    vu.u.cstr = topic.c_str();
    vus.push_back(vu);
    vu.vtype = RD_KAFKA_VTYPE_PARTITION;
    vu.u.i32 = partition;
    vus.push_back(vu);
    vu.vtype = RD_KAFKA_VTYPE_KEY;
    vu.u.mem = {const_cast<char*>(key.data()), key.size()};
    vus.push_back(vu);
    vu.vtype = RD_KAFKA_VTYPE_VALUE;
    vu.u.mem = {const_cast<char*>(value.data()), value.size()};
    vus.push_back(vu);
    vu.vtype = RD_KAFKA_VTYPE_MSGFLAGS;
    vu.u.i = RD_KAFKA_MSG_F_COPY;
    vus.push_back(vu);
    for (const auto& [name, hval] : headers) {
      vu.vtype = RD_KAFKA_VTYPE_HEADER;
      vu.u.header.name = name.c_str();
      vu.u.header.val = hval ? hval->data() : nullptr;
      vu.u.header.size = hval ? static_cast<ssize_t>(hval->size()) : 0;
      vus.push_back(vu);
    }
    rd_kafka_error_t* error = rd_kafka_produceva(handle_.get(), vus.data(), vus.size());
    if (error != nullptr) {
      const std::string what = rd_kafka_error_string(error);
      rd_kafka_error_destroy(error);
      throw std::runtime_error("produce: " + what);
    }
    ++produced_;
  }

  /// Serves delivery reports until every produced message has one or `timeout` passes.
  /// Returns true when all of them arrived.
  bool flush(std::chrono::milliseconds timeout) {
    rd_kafka_flush(handle_.get(), to_ms(timeout));
    rd_kafka_poll(handle_.get(), 0);  // serve reports of messages that left the queue last
    return pending() == 0;
  }

  [[nodiscard]] int pending() const {
    return produced_ - delivered_ - static_cast<int>(failures_.size());
  }
  [[nodiscard]] int delivered() const { return delivered_; }
  [[nodiscard]] const std::vector<rd_kafka_resp_err_t>& failures() const { return failures_; }
  [[nodiscard]] rd_kafka_t* get() const { return handle_.get(); }

 private:
  Handle handle_;
  int produced_ = 0;
  int delivered_ = 0;
  std::vector<rd_kafka_resp_err_t> failures_;
};

struct Received {
  std::int32_t partition = -1;
  std::int64_t offset = -1;
  std::string key;
  std::string value;
  std::vector<Header> headers;
};

/// A group consumer with manual commit. Settings follow MOCK-CLUSTER.md: the mock's
/// first join waits a fixed 3 s, so session.timeout.ms must be above that.
class TestConsumer {
 public:
  TestConsumer(const std::string& bootstrap, const std::string& group, const std::string& topic) {
    handle_ = test::make_kafka_handle(RD_KAFKA_CONSUMER, rd_kafka_conf_new(),
                                      {{"bootstrap.servers", bootstrap},
                                       {"group.id", group},
                                       {"enable.auto.commit", "false"},
                                       {"auto.offset.reset", "earliest"},
                                       {"session.timeout.ms", "6000"},
                                       {"heartbeat.interval.ms", "1000"}});
    rd_kafka_poll_set_consumer(handle_.get());
    PartitionList topics(rd_kafka_topic_partition_list_new(1));
    rd_kafka_topic_partition_list_add(topics.get(), topic.c_str(), RD_KAFKA_PARTITION_UA);
    const rd_kafka_resp_err_t err = rd_kafka_subscribe(handle_.get(), topics.get());
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) throw std::runtime_error(rd_kafka_err2str(err));
  }
  TestConsumer(const TestConsumer&) = delete;
  TestConsumer& operator=(const TestConsumer&) = delete;
  ~TestConsumer() { close(); }

  /// Polls until `count` messages arrived or `deadline` passed; returns what arrived.
  std::vector<Received> consume(std::size_t count, Clock::time_point deadline) {
    std::vector<Received> out;
    while (out.size() < count && Clock::now() < deadline) {
      std::unique_ptr<rd_kafka_message_t, MessageDeleter> m(
          rd_kafka_consumer_poll(handle_.get(), 200));
      if (!m || m->err != RD_KAFKA_RESP_ERR_NO_ERROR) continue;  // timeout or transient event
      Received r;
      r.partition = m->partition;
      r.offset = m->offset;
      r.key.assign(static_cast<const char*>(m->key), m->key_len);
      r.value.assign(static_cast<const char*>(m->payload), m->len);
      rd_kafka_headers_t* hdrs = nullptr;
      if (rd_kafka_message_headers(m.get(), &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char* name = nullptr;
        const void* val = nullptr;
        std::size_t size = 0;
        for (std::size_t i = 0;
             rd_kafka_header_get_all(hdrs, i, &name, &val, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
             ++i) {
          r.headers.emplace_back(name, val == nullptr ? std::nullopt
                                                      : std::optional<std::string>(std::string(
                                                            static_cast<const char*>(val), size)));
        }
      }
      out.push_back(std::move(r));
    }
    return out;
  }

  /// Synchronously commits the positions of every assigned partition.
  rd_kafka_resp_err_t commit() { return rd_kafka_commit(handle_.get(), nullptr, 0); }

  /// Sum of the committed offsets of `topic`'s partitions 0..partitions-1.
  std::int64_t committed_total(const std::string& topic, int partitions) {
    PartitionList list(rd_kafka_topic_partition_list_new(partitions));
    for (int p = 0; p < partitions; ++p) {
      rd_kafka_topic_partition_list_add(list.get(), topic.c_str(), p);
    }
    if (rd_kafka_committed(handle_.get(), list.get(), 10'000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return -1;
    }
    std::int64_t total = 0;
    for (int i = 0; i < list->cnt; ++i) {
      if (list->elems[i].offset > 0) total += list->elems[i].offset;
    }
    return total;
  }

  /// Leaves the group (so the next member need not wait for the session timeout).
  void close() {
    if (handle_ && !closed_) rd_kafka_consumer_close(handle_.get());
    closed_ = true;
  }

 private:
  Handle handle_;
  bool closed_ = false;
};

/// Partition count per topic and the number of brokers, as a client sees them.
struct ClusterView {
  int brokers = 0;
  std::map<std::string, int> partitions;
};

ClusterView describe(rd_kafka_t* rk) {
  const rd_kafka_metadata_t* raw = nullptr;
  const rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 1, nullptr, &raw, 10'000);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) throw std::runtime_error(rd_kafka_err2str(err));
  const std::unique_ptr<const rd_kafka_metadata_t, MetadataDeleter> md(raw);
  ClusterView view;
  view.brokers = md->broker_cnt;
  for (int i = 0; i < md->topic_cnt; ++i) {
    view.partitions[md->topics[i].topic] = md->topics[i].partition_cnt;
  }
  return view;
}

template <typename Fn>
void expect_kafka_invalid_argument(Fn&& fn) {
  try {
    fn();
    ADD_FAILURE() << "expected idem::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.source(), ErrorSource::Kafka) << e.what();
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()), "");
  }
}

TEST(DevBroker, ProducesAndConsumesRoundTripWithHeaders) {
  DevBroker broker(DevBrokerOptions{.brokers = 3, .topics = {}});
  const std::string topic = unique_name("roundtrip");
  broker.create_topic(topic, 3);

  constexpr int kMessages = 60;
  TestProducer producer(broker.bootstrap_servers());
  for (int i = 0; i < kMessages; ++i) {
    producer.produce(topic, RD_KAFKA_PARTITION_UA, fmt::format("key-{}", i),
                     fmt::format("value-{}", i),
                     {{"trace-id", fmt::format("trace-{}", i)},
                      {"binary", std::string("\0\x01\xff", 3)},
                      {"null-value", std::nullopt}});
  }
  ASSERT_TRUE(producer.flush(10s)) << producer.pending() << " messages undelivered";
  ASSERT_TRUE(producer.failures().empty()) << rd_kafka_err2str(producer.failures().front());

  TestConsumer consumer(broker.bootstrap_servers(), unique_name("group"), topic);
  const std::vector<Received> got = consumer.consume(kMessages, Clock::now() + 30s);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kMessages));

  std::map<std::string, Received> by_key;
  std::map<std::int32_t, int> per_partition;
  for (const Received& r : got) {
    by_key[r.key] = r;
    ++per_partition[r.partition];
  }
  ASSERT_EQ(by_key.size(), static_cast<std::size_t>(kMessages)) << "a message arrived twice";
  for (int i = 0; i < kMessages; ++i) {
    const auto it = by_key.find(fmt::format("key-{}", i));
    ASSERT_NE(it, by_key.end()) << "key-" << i << " missing";
    EXPECT_EQ(it->second.value, fmt::format("value-{}", i));
    const std::vector<Header> expected{{"trace-id", fmt::format("trace-{}", i)},
                                       {"binary", std::string("\0\x01\xff", 3)},
                                       {"null-value", std::nullopt}};
    EXPECT_EQ(it->second.headers, expected);
  }
  EXPECT_EQ(per_partition.size(), 3U) << "keys should spread over all three partitions";

  ASSERT_EQ(consumer.commit(), RD_KAFKA_RESP_ERR_NO_ERROR);
  EXPECT_EQ(consumer.committed_total(topic, 3), kMessages);
}

TEST(DevBroker, CommittedOffsetSurvivesConsumerRestart) {
  DevBroker broker(DevBrokerOptions{.brokers = 1, .topics = {}});
  const std::string topic = unique_name("restart");
  const std::string group = unique_name("group");
  constexpr int kPartitions = 3;
  broker.create_topic(topic, kPartitions);

  TestProducer producer(broker.bootstrap_servers());
  for (int p = 0; p < kPartitions; ++p) {
    for (int i = 0; i < 4; ++i) producer.produce(topic, p, "k", fmt::format("first-{}-{}", p, i));
  }
  ASSERT_TRUE(producer.flush(10s));
  ASSERT_TRUE(producer.failures().empty());

  {
    TestConsumer first(broker.bootstrap_servers(), group, topic);
    ASSERT_EQ(first.consume(4U * kPartitions, Clock::now() + 30s).size(), 4U * kPartitions);
    ASSERT_EQ(first.commit(), RD_KAFKA_RESP_ERR_NO_ERROR);
    first.close();
  }

  // Two more per partition: a consumer resuming below the commit would see a
  // "first-" message on that partition before these.
  for (int p = 0; p < kPartitions; ++p) {
    for (int i = 0; i < 2; ++i) producer.produce(topic, p, "k", fmt::format("second-{}-{}", p, i));
  }
  ASSERT_TRUE(producer.flush(10s));
  ASSERT_TRUE(producer.failures().empty());

  TestConsumer second(broker.bootstrap_servers(), group, topic);
  const std::vector<Received> got = second.consume(2U * kPartitions, Clock::now() + 30s);
  ASSERT_EQ(got.size(), 2U * kPartitions);
  for (const Received& r : got) {
    EXPECT_EQ(r.value.rfind("second-", 0), 0U) << "redelivered after commit: " << r.value;
    EXPECT_GE(r.offset, 4) << r.value;
  }
}

TEST(DevBroker, CreatesTopicsWithRequestedPartitionCount) {
  const std::string a = unique_name("five");
  const std::string b = unique_name("one");
  const std::string c = unique_name("seven");
  DevBroker broker(DevBrokerOptions{.brokers = 3, .topics = {{a, 5}, {b, 1}}});
  broker.create_topic(c, 7);
  EXPECT_EQ(broker.broker_count(), 3);

  TestProducer client(broker.bootstrap_servers());
  const ClusterView view = describe(client.get());
  EXPECT_EQ(view.brokers, 3);
  EXPECT_EQ(view.partitions.at(a), 5);
  EXPECT_EQ(view.partitions.at(b), 1);
  EXPECT_EQ(view.partitions.at(c), 7);
}

TEST(DevBroker, BootstrapServersListEveryBrokerOnLoopback) {
  DevBroker broker(DevBrokerOptions{.brokers = 2, .topics = {}});
  const std::string& servers = broker.bootstrap_servers();
  const std::size_t comma = servers.find(',');
  ASSERT_NE(comma, std::string::npos) << servers;
  EXPECT_EQ(servers.find(',', comma + 1), std::string::npos) << servers;
  EXPECT_EQ(servers.rfind("127.0.0.1:", 0), 0U) << servers;
  EXPECT_EQ(servers.compare(comma + 1, 10, "127.0.0.1:"), 0) << servers;
}

TEST(DevBroker, RejectsInvalidRequestsWithKafkaErrors) {
  expect_kafka_invalid_argument([] { DevBroker b(DevBrokerOptions{.brokers = 0, .topics = {}}); });
  expect_kafka_invalid_argument([] {
    DevBroker b(DevBrokerOptions{.brokers = 1, .topics = {{"dup", 1}, {"dup", 2}}});
  });

  DevBroker broker(DevBrokerOptions{.brokers = 2, .topics = {{"exists", 1}}});
  expect_kafka_invalid_argument([&] { broker.create_topic("exists", 1); });
  expect_kafka_invalid_argument([&] { broker.create_topic("", 1); });
  expect_kafka_invalid_argument([&] { broker.create_topic("has space", 1); });
  expect_kafka_invalid_argument([&] { broker.create_topic("zero", 0); });
  expect_kafka_invalid_argument([&] { broker.set_broker_down(0); });
  expect_kafka_invalid_argument([&] { broker.set_broker_up(3); });
  expect_kafka_invalid_argument([&] { broker.set_broker_down(-1); });
  expect_kafka_invalid_argument([&] { broker.set_broker_rtt(1, -1ms); });
  const std::array<int, 1> not_a_code{123456};
  const std::array<int, 1> internal_code{RD_KAFKA_RESP_ERR__TIMED_OUT};
  const std::array<int, 1> fine{RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION};
  expect_kafka_invalid_argument([&] { broker.push_request_errors(0, not_a_code); });
  expect_kafka_invalid_argument([&] { broker.push_request_errors(0, internal_code); });
  expect_kafka_invalid_argument([&] { broker.push_request_errors(-1, fine); });
  expect_kafka_invalid_argument([&] { broker.push_request_errors(59, fine); });
}

TEST(DevBroker, BrokerDownThenUpIsInjectable) {
  DevBroker broker(DevBrokerOptions{.brokers = 1, .topics = {}});
  const std::string topic = unique_name("down-up");
  broker.create_topic(topic, 1);

  // A short reconnect backoff bounds the reconnect after set_broker_up(); with the
  // default reconnect.backoff.max.ms (10 s) it can take about 10 s.
  TestProducer producer(broker.bootstrap_servers(), {{"message.timeout.ms", "3000"},
                                                     {"reconnect.backoff.ms", "100"},
                                                     {"reconnect.backoff.max.ms", "500"}});
  producer.produce(topic, 0, "k", "before");
  ASSERT_TRUE(producer.flush(10s));
  ASSERT_EQ(producer.delivered(), 1);

  broker.set_broker_down(1);
  producer.produce(topic, 0, "k", "while-down");
  ASSERT_TRUE(producer.flush(10s));  // the report (a failure) arrives after message.timeout.ms
  ASSERT_EQ(producer.failures().size(), 1U) << "a message reached a broker that is down";
  EXPECT_EQ(producer.failures().front(), RD_KAFKA_RESP_ERR__MSG_TIMED_OUT);

  broker.set_broker_up(1);
  const auto deadline = Clock::now() + 20s;
  bool delivered = false;
  while (!delivered && Clock::now() < deadline) {
    // Each attempt is bounded by message.timeout.ms; retry until the deadline.
    producer.produce(topic, 0, "k", "after-up");
    ASSERT_TRUE(producer.flush(10s));
    delivered = producer.delivered() == 2;
  }
  EXPECT_TRUE(delivered) << "no produce succeeded within 20 s of set_broker_up";
}

TEST(DevBroker, PushedRequestErrorsReachTheClient) {
  DevBroker broker(DevBrokerOptions{.brokers = 1, .topics = {}});
  const std::string topic = unique_name("errors");
  broker.create_topic(topic, 1);
  TestProducer producer(broker.bootstrap_servers(), {{"retry.backoff.ms", "10"}});
  producer.produce(topic, 0, "k", "warm-up");  // connect and learn metadata first
  ASSERT_TRUE(producer.flush(10s));

  // Transient errors are retried by librdkafka without the application noticing.
  const std::array<int, 2> transient{RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
                                     RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT};
  broker.push_request_errors(0, transient);
  producer.produce(topic, 0, "k", "retried");
  ASSERT_TRUE(producer.flush(10s));
  EXPECT_TRUE(producer.failures().empty());
  EXPECT_EQ(producer.delivered(), 2);

  // A permanent error fails the message. (Not TOPIC_AUTHORIZATION_FAILED: librdkafka
  // would also mark the whole topic failed until its next metadata refresh.)
  const std::array<int, 1> permanent{RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE};
  broker.push_request_errors(0, permanent);
  producer.produce(topic, 0, "k", "refused");
  ASSERT_TRUE(producer.flush(10s));
  ASSERT_EQ(producer.failures().size(), 1U);
  EXPECT_EQ(producer.failures().front(), RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);

  // The stack is used up: the next request succeeds again.
  producer.produce(topic, 0, "k", "accepted");
  ASSERT_TRUE(producer.flush(10s));
  EXPECT_EQ(producer.delivered(), 3);
}

TEST(DevBroker, BrokerRttDelaysResponses) {
  DevBroker broker(DevBrokerOptions{.brokers = 1, .topics = {}});
  const std::string topic = unique_name("rtt");
  broker.create_topic(topic, 1);
  TestProducer producer(broker.bootstrap_servers());
  producer.produce(topic, 0, "k", "warm-up");
  ASSERT_TRUE(producer.flush(10s));

  broker.set_broker_rtt(1, 400ms);
  const auto start = Clock::now();
  producer.produce(topic, 0, "k", "slow");
  ASSERT_TRUE(producer.flush(10s));
  EXPECT_GE(Clock::now() - start, 400ms);
  EXPECT_EQ(producer.delivered(), 2);
  broker.set_broker_rtt(1, 0ms);
}

}  // namespace dev_broker_test
}  // namespace idem
