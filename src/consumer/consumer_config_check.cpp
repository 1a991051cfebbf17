// The checks of ConsumerConfig (consumer_config_check.hpp).
#include "consumer/consumer_config_check.hpp"

#include <string>
#include <string_view>
#include <unordered_set>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "idem/retry.hpp"

namespace idem::detail {

[[noreturn]] void bad_config(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, ErrorSource::Config, "consumer: " + message);
}

void validate_consumer_config(const ConsumerConfig& c) {
  if (c.bootstrap_servers.empty()) bad_config("bootstrap_servers is empty");
  if (c.group_id.empty()) bad_config("group_id is empty");
  if (c.topics.empty()) bad_config("no topics to subscribe to");
  std::unordered_set<std::string_view> seen;
  for (const auto& t : c.topics) {
    if (t.empty()) bad_config("a topic name is empty");
    if (!seen.insert(t).second) bad_config(fmt::format("topic '{}' is listed twice", t));
  }
  for (const auto& t : c.topics) {
    const std::string dlq = t + c.dlq_suffix;
    if (seen.contains(dlq)) bad_config(fmt::format("topic '{}' is also the DLQ of '{}'", dlq, t));
  }
  if (c.batch_size == 0) bad_config("batch_size must be at least 1");
  if (c.batch_window.count() < 0) bad_config("batch_window must not be negative");
  // An empty suffix would dead-letter records into the topic they came from: a loop.
  if (c.dlq_suffix.empty()) bad_config("dlq_suffix must not be empty");
  if (c.dlq_ack_timeout.count() <= 0) bad_config("dlq_ack_timeout must be positive");
  if (c.limits.max_payload_bytes == 0) bad_config("limits.max_payload_bytes must be positive");
  Backoff::validate(c.retry);
  if (c.dedup_horizon.retention <= std::chrono::hours(0) ||
      c.dedup_horizon.safety_margin.count() < 0 ||
      c.dedup_horizon.safety_margin >= c.dedup_horizon.retention) {
    bad_config("dedup_horizon: retention must be positive and the safety margin shorter than it");
  }
  if (c.clock == nullptr) bad_config("clock is null");
  if (c.max_in_flight == 0) bad_config("max_in_flight must be at least 1");
  if (c.pipeline_depth < 1 || c.pipeline_depth > 2)
    bad_config(
        fmt::format("pipeline_depth must be 1 or 2, not {} (commits stay in order, so a "
                    "deeper pipeline would overlap nothing more)",
                    c.pipeline_depth));
  if (c.max_buffered_per_partition == 0)
    bad_config("max_buffered_per_partition must be at least 1");
  if (c.call_drain_timeout.count() < 0) bad_config("call_drain_timeout must not be negative");
  if (c.stop_timeout.count() < 0) bad_config("stop_timeout must not be negative");
  if (c.idle_store_check.count() < 0) bad_config("idle_store_check must not be negative");
  for (const auto& [key, value] : c.kafka) {
    if (key == "enable.auto.commit" || key == "enable.auto.offset.store") {
      bad_config(
          fmt::format("kafka property {} is owned by idem (always false: offsets are "
                      "committed only after the database transaction)",
                      key));
    }
    if (key == "group.id") bad_config("set the consumer group with group_id, not kafka group.id");
    if (key == "group.instance.id" && !c.instance_id.empty())
      bad_config("instance_id and kafka group.instance.id are both set");
    if (key == "bootstrap.servers")
      bad_config("set the brokers with bootstrap_servers, not kafka bootstrap.servers");
  }
}

}  // namespace idem::detail
