// DevBroker: librdkafka's mock cluster hosted on a throwaway producer handle.
//
// Why rd_kafka_mock_cluster_new() and not the `test.mock.num.brokers` property: a
// cluster created through the property belongs to the client that set it and dies
// with it, and it cannot be controlled independently of that client. A cluster on a
// handle of our own lives exactly as long as this object and serves any process.
#include "idem/devtools/dev_broker.hpp"

#include <charconv>

#include <syslog.h>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "idem/error.hpp"

namespace idem {
namespace {

// RD_KAFKAP__NUM in librdkafka 2.0.2's private rdkafka_protocol.h: the mock cluster
// keeps an error stack for any key, but only keys below this ever see a request.
constexpr int kApiKeyCount = 59;

[[noreturn]] void fail(ErrorCode code, const std::string& message) {
  throw Error(code, ErrorSource::Kafka, message);
}

[[noreturn]] void fail_kafka(ErrorCode code, const std::string& message, rd_kafka_resp_err_t err) {
  throw Error(code, ErrorSource::Kafka,
              fmt::format("{}: {} ({})", message, rd_kafka_err2str(err), rd_kafka_err2name(err)),
              rd_kafka_err2name(err));
}

// Only warnings and worse reach stderr: the mock cluster and the throwaway producer
// otherwise report things that are normal here (no bootstrap.servers configured,
// clients disconnecting). Runs on librdkafka's threads, so it must not throw.
void log_to_stderr(const rd_kafka_t* /*rk*/, int level, const char* facility,
                   const char* message) noexcept {
  if (level > LOG_WARNING) return;
  std::fprintf(stderr, "idem dev-broker: %s: %s\n", facility, message);
}

bool is_valid_topic_name(std::string_view name) {
  // Kafka's own rule (org.apache.kafka.common.internals.Topic): the mock accepts
  // anything, so typos would otherwise only show up as a client-side error later.
  if (name.empty() || name.size() > 249 || name == "." || name == "..") return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool is_known_error_code(int code) {
  if (code == RD_KAFKA_RESP_ERR__TRANSPORT) return true;  // "close the connection"
  if (code < 0) return false;  // other internal codes have no meaning on the wire
  const rd_kafka_err_desc* descs = nullptr;
  std::size_t count = 0;
  rd_kafka_get_err_descs(&descs, &count);
  for (std::size_t i = 0; i < count; ++i) {
    if (descs[i].name != nullptr && static_cast<int>(descs[i].code) == code) return true;
  }
  return false;
}

struct HandleDeleter {
  void operator()(rd_kafka_t* rk) const noexcept { rd_kafka_destroy(rk); }
};
struct ClusterDeleter {
  void operator()(rd_kafka_mock_cluster_t* mc) const noexcept { rd_kafka_mock_cluster_destroy(mc); }
};

}  // namespace

struct DevBroker::Impl {
  // Declaration order matters: the cluster must be destroyed before the handle
  // it was created on.
  std::unique_ptr<rd_kafka_t, HandleDeleter> handle;
  std::unique_ptr<rd_kafka_mock_cluster_t, ClusterDeleter> cluster;
  std::string bootstrap_servers;
  int brokers = 0;

  void check_broker_id(int broker_id) const {
    if (broker_id < 1 || broker_id > brokers) {
      // -1 would mean "all brokers" to librdkafka; we keep ids explicit.
      fail(ErrorCode::InvalidArgument,
           fmt::format("dev broker: no broker with id {} (ids are 1..{})", broker_id, brokers));
    }
  }
};

DevBroker::DevBroker(DevBrokerOptions options) : impl_(std::make_unique<Impl>()) {
  if (options.brokers < 1 || options.brokers > kMaxBrokers) {
    fail(ErrorCode::InvalidArgument, fmt::format("dev broker: broker count must be 1..{}, got {}",
                                                 kMaxBrokers, options.brokers));
  }

  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char errstr[512];
  const std::pair<const char*, const char*> settings[] = {
      {"client.id", "idem-dev-broker"},
      {"log_level", "4"},  // LOG_WARNING: skip formatting what the callback would drop
  };
  for (const auto& [key, value] : settings) {
    if (rd_kafka_conf_set(conf, key, value, errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      fail(ErrorCode::Internal, fmt::format("dev broker: setting {}={}: {}", key, value, errstr));
    }
  }
  rd_kafka_conf_set_log_cb(conf, &log_to_stderr);

  // rd_kafka_new takes ownership of conf only on success.
  impl_->handle.reset(rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr));
  if (!impl_->handle) {
    rd_kafka_conf_destroy(conf);
    fail(ErrorCode::Internal,
         fmt::format("dev broker: could not create the librdkafka handle: {}", errstr));
  }

  impl_->cluster.reset(rd_kafka_mock_cluster_new(impl_->handle.get(), options.brokers));
  if (!impl_->cluster) {
    fail(ErrorCode::Connection,
         fmt::format("dev broker: could not start a mock cluster of {} broker(s) "
                     "(binding a loopback listener failed; see the log above)",
                     options.brokers));
  }
  impl_->brokers = options.brokers;
  impl_->bootstrap_servers = rd_kafka_mock_cluster_bootstraps(impl_->cluster.get());

  for (const TopicSpec& topic : options.topics) create_topic(topic.name, topic.partitions);
}

DevBroker::~DevBroker() = default;

const std::string& DevBroker::bootstrap_servers() const noexcept {
  return impl_->bootstrap_servers;
}

int DevBroker::broker_count() const noexcept {
  return impl_->brokers;
}

void DevBroker::create_topic(std::string_view name, int partitions) {
  if (!is_valid_topic_name(name)) {
    fail(ErrorCode::InvalidArgument,
         fmt::format("dev broker: invalid topic name '{}' (use 1-249 of [A-Za-z0-9._-])", name));
  }
  if (partitions < 1 || partitions > kMaxPartitions) {
    fail(ErrorCode::InvalidArgument,
         fmt::format("dev broker: topic '{}': partition count must be 1..{}, got {}", name,
                     kMaxPartitions, partitions));
  }
  const std::string topic(name);
  // The replication factor is stored but has no effect in the mock.
  const rd_kafka_resp_err_t err =
      rd_kafka_mock_topic_create(impl_->cluster.get(), topic.c_str(), partitions, 1);
  if (err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
    fail(ErrorCode::InvalidArgument,
         fmt::format("dev broker: topic '{}' already exists (created earlier, or "
                     "auto-created with 4 partitions by a client's metadata request)",
                     topic));
  }
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    fail_kafka(ErrorCode::Internal, fmt::format("dev broker: creating topic '{}'", topic), err);
  }
}

void DevBroker::set_broker_down(int broker_id) {
  impl_->check_broker_id(broker_id);
  const rd_kafka_resp_err_t err = rd_kafka_mock_broker_set_down(impl_->cluster.get(), broker_id);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    fail_kafka(ErrorCode::Internal, fmt::format("dev broker: taking broker {} down", broker_id),
               err);
  }
}

void DevBroker::set_broker_up(int broker_id) {
  impl_->check_broker_id(broker_id);
  const rd_kafka_resp_err_t err = rd_kafka_mock_broker_set_up(impl_->cluster.get(), broker_id);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    fail_kafka(ErrorCode::Internal, fmt::format("dev broker: bringing broker {} up", broker_id),
               err);
  }
}

void DevBroker::set_broker_rtt(int broker_id, std::chrono::milliseconds rtt) {
  impl_->check_broker_id(broker_id);
  if (rtt.count() < 0 || rtt.count() > INT_MAX) {
    fail(ErrorCode::InvalidArgument,
         fmt::format("dev broker: broker {}: rtt must be 0..{} ms, got {} ms", broker_id, INT_MAX,
                     rtt.count()));
  }
  const rd_kafka_resp_err_t err =
      rd_kafka_mock_broker_set_rtt(impl_->cluster.get(), broker_id, static_cast<int>(rtt.count()));
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    fail_kafka(ErrorCode::Internal, fmt::format("dev broker: setting broker {} rtt", broker_id),
               err);
  }
}

void DevBroker::push_request_errors(int api_key, std::span<const int> error_codes) {
  if (api_key < 0 || api_key >= kApiKeyCount) {
    fail(ErrorCode::InvalidArgument,
         fmt::format("dev broker: API key must be 0..{}, got {}", kApiKeyCount - 1, api_key));
  }
  std::vector<rd_kafka_resp_err_t> errors;
  errors.reserve(error_codes.size());
  for (const int code : error_codes) {
    if (!is_known_error_code(code)) {
      fail(ErrorCode::InvalidArgument,
           fmt::format("dev broker: {} is not a Kafka error code known to librdkafka", code));
    }
    errors.push_back(static_cast<rd_kafka_resp_err_t>(code));
  }
  if (errors.empty()) return;
  rd_kafka_mock_push_request_errors_array(impl_->cluster.get(), static_cast<std::int16_t>(api_key),
                                          errors.size(), errors.data());
}

void DevBroker::set_topic_error(std::string_view name, int error_code) {
  if (!is_known_error_code(error_code)) {
    fail(ErrorCode::InvalidArgument,
         fmt::format("dev broker: {} is not a Kafka error code known to librdkafka", error_code));
  }
  rd_kafka_mock_topic_set_error(impl_->cluster.get(), std::string(name).c_str(),
                                static_cast<rd_kafka_resp_err_t>(error_code));
}

void declare_dev_broker_keys(SectionKeys<DevBrokerSettings>& keys) {
  KeySpec topics;
  topics.name = "dev_broker.topics";
  topics.type = KeyType::List;
  topics.help = "topics to create, NAME or NAME:PARTITIONS (3 partitions by default)";
  keys.integer(
          "dev_broker.brokers", [](DevBrokerSettings & s) -> auto& { return s.options.brokers; },
          "number of brokers", 1, DevBroker::kMaxBrokers)
      .boolean("dev_broker.read_stdin", &DevBrokerSettings::read_stdin,
               "read control commands from stdin (create-topic, broker-down, ...)")
      .custom(topics, [topics](DevBrokerSettings& s, std::string_view text) {
        std::vector<std::string> items;
        if (auto problem = detail::parse_list(topics, text, items)) return problem;
        s.options.topics.clear();
        for (const std::string& item : items) {
          // DevBroker checks the name itself, when it creates the topic.
          TopicSpec& topic = s.options.topics.emplace_back();
          const auto colon = item.rfind(':');
          topic.name = item.substr(0, colon);
          if (colon == std::string::npos) continue;
          const char* end = item.data() + item.size();
          const auto [ptr, ec] = std::from_chars(item.data() + colon + 1, end, topic.partitions);
          if (ec != std::errc() || ptr != end || topic.partitions < 1 || topic.name.empty()) {
            return std::optional<std::string>(
                fmt::format("expected NAME or NAME:PARTITIONS (PARTITIONS >= 1), got '{}'", item));
          }
        }
        return std::optional<std::string>();
      });
}

}  // namespace idem
