#include "consumer/horizon/topic_retention_check.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace idem::detail {

namespace {

constexpr int kPollSliceMs = 200;

struct AdminOptionsDeleter {
  void operator()(rd_kafka_AdminOptions_t* o) const noexcept { rd_kafka_AdminOptions_destroy(o); }
};
struct EventDeleter {
  void operator()(rd_kafka_event_t* e) const noexcept { rd_kafka_event_destroy(e); }
};

}  // namespace

TopicRetentionCheck::TopicRetentionCheck(const ConsumerConfig& config, const LogFn& log)
    : config_(config), log_(log), thread_([this] { run(); }) {}

TopicRetentionCheck::~TopicRetentionCheck() {
  stop_.store(true);
  thread_.join();
}

void TopicRetentionCheck::run() noexcept {
  const auto hours = [](std::int64_t ms) {
    return fmt::format("{:.1f} h", static_cast<double>(ms) / 3.6e6);
  };
  const std::int64_t dedup_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(config_.dedup_horizon.retention)
          .count();
  const std::chrono::milliseconds timeout =
      std::max(config_.topic_retention_timeout, std::chrono::milliseconds(1));
  try {
    // A consumer-type handle accepts the same pass-through properties as the consumer
    // (TLS, SASL, ...); it never subscribes, so it joins no group.
    KafkaConf conf(rd_kafka_conf_new());
    std::vector<Property> props = {{"bootstrap.servers", config_.bootstrap_servers},
                                   {"log_level", "3"}};
    for (const auto& p : config_.kafka) props.push_back(p);
    set_properties(conf.get(), props);
    KafkaHandle rk = create_handle(RD_KAFKA_CONSUMER, std::move(conf));
    KafkaQueue queue(rd_kafka_queue_new(rk.get()));
    std::unique_ptr<rd_kafka_AdminOptions_t, AdminOptionsDeleter> options(
        rd_kafka_AdminOptions_new(rk.get(), RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS));
    char errstr[256];
    rd_kafka_AdminOptions_set_request_timeout(options.get(), static_cast<int>(timeout.count()),
                                              errstr, sizeof errstr);
    std::vector<rd_kafka_ConfigResource_t*> resources;
    for (const auto& topic : config_.topics) {
      resources.push_back(rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic.c_str()));
    }
    rd_kafka_DescribeConfigs(rk.get(), resources.data(), resources.size(), options.get(),
                             queue.get());
    for (auto* r : resources) rd_kafka_ConfigResource_destroy(r);

    std::unique_ptr<rd_kafka_event_t, EventDeleter> event;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!event && !stop_.load() && std::chrono::steady_clock::now() < deadline) {
      event.reset(rd_kafka_queue_poll(queue.get(), kPollSliceMs));
    }
    if (!event) {
      if (!stop_.load()) {
        log_(fmt::format(
            "idem consumer: the broker did not report the retention of {} in time; make sure "
            "the dedup retention ({}) covers it",
            fmt::join(config_.topics, ", "), hours(dedup_ms)));
      }
      return;
    }
    if (rd_kafka_event_error(event.get()) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      log_(
          fmt::format("idem consumer: could not read the retention of {} ({}); make sure the dedup "
                      "retention ({}) covers it",
                      fmt::join(config_.topics, ", "), rd_kafka_event_error_string(event.get()),
                      hours(dedup_ms)));
      return;
    }
    const rd_kafka_DescribeConfigs_result_t* result =
        rd_kafka_event_DescribeConfigs_result(event.get());
    std::size_t count = 0;
    const rd_kafka_ConfigResource_t** described =
        rd_kafka_DescribeConfigs_result_resources(result, &count);
    for (std::size_t i = 0; i < count; ++i) {
      const char* topic = rd_kafka_ConfigResource_name(described[i]);
      if (rd_kafka_ConfigResource_error(described[i]) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        log_(fmt::format(
            "idem consumer: could not read the retention of {} ({}); make sure the dedup "
            "retention ({}) covers it",
            topic, rd_kafka_ConfigResource_error_string(described[i]), hours(dedup_ms)));
        continue;
      }
      std::size_t entries = 0;
      const rd_kafka_ConfigEntry_t** configs =
          rd_kafka_ConfigResource_configs(described[i], &entries);
      for (std::size_t k = 0; k < entries; ++k) {
        if (std::string_view(rd_kafka_ConfigEntry_name(configs[k])) != "retention.ms") continue;
        const char* value = rd_kafka_ConfigEntry_value(configs[k]);
        std::int64_t retention_ms = 0;
        const std::string_view text = value != nullptr ? value : "";
        if (std::from_chars(text.data(), text.data() + text.size(), retention_ms).ec != std::errc())
          break;
        if (retention_ms < 0 || retention_ms > dedup_ms) {
          log_(fmt::format(
              "idem consumer: warning: topic {} keeps records for {} but dedup rows are kept for "
              "{}: "
              "replaying it from the start meets events past the dedup horizon ({})",
              topic, retention_ms < 0 ? std::string("ever (retention.ms=-1)") : hours(retention_ms),
              hours(dedup_ms),
              config_.stale_events == StaleEventPolicy::Process
                  ? "processed anyway: they may run twice"
                  : "they are not executed"));
        }
        break;
      }
    }
  } catch (const std::exception& e) {
    log_(fmt::format("idem consumer: topic retention check failed: {}", e.what()));
  }
}

}  // namespace idem::detail
