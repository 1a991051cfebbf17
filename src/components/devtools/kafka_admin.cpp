#include "idem/devtools/kafka_admin.hpp"

#include <librdkafka/rdkafka.h>

#include <vector>

#include <fmt/format.h>

#include "idem/consumer_offsets.hpp"
#include "idem/error.hpp"
#include "idem/kafka/kafka_handle.hpp"

namespace idem {

namespace {

using detail::KafkaHandle;
using detail::PartitionList;
using detail::Property;
using detail::to_kafka_ms;

using SteadyClock = std::chrono::steady_clock;

KafkaHandle consumer_handle(const std::string& bootstrap_servers, const std::string& group,
                            std::vector<Property> extra = {}) {
  std::vector<Property> props{{"bootstrap.servers", bootstrap_servers},
                              {"group.id", group},
                              {"enable.auto.commit", "false"},
                              {"log_level", "3"}};
  props.insert(props.end(), extra.begin(), extra.end());
  detail::KafkaConf conf(rd_kafka_conf_new());
  detail::set_properties(conf.get(), props);
  return detail::create_handle(RD_KAFKA_CONSUMER, std::move(conf));
}

/// Destroys a consumer handle that never joined a group without LeaveGroup/commit work.
void destroy_unjoined(KafkaHandle rk) {
  rd_kafka_destroy_flags(rk.release(), RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
}

[[noreturn]] void throw_kafka(rd_kafka_resp_err_t err, const std::string& what) {
  const ErrorCode code =
      err == RD_KAFKA_RESP_ERR__TIMED_OUT ? ErrorCode::Timeout
      : err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC || err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART
          ? ErrorCode::InvalidArgument
          : ErrorCode::Connection;
  throw Error(code, ErrorSource::Kafka, fmt::format("{}: {}", what, rd_kafka_err2str(err)),
              rd_kafka_err2name(err));
}

}  // namespace

std::optional<std::string> KafkaRecord::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return std::nullopt;
}

int partition_count(const std::string& bootstrap_servers, const std::string& topic,
                    std::chrono::milliseconds timeout) {
  KafkaHandle rk =
      consumer_handle(bootstrap_servers, "idem-admin", {{"allow.auto.create.topics", "false"}});
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk.get(), topic.c_str(), nullptr);
  const rd_kafka_metadata_t* md = nullptr;
  const auto err = rd_kafka_metadata(rk.get(), 0, rkt, &md, to_kafka_ms(timeout));
  rd_kafka_topic_destroy(rkt);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    destroy_unjoined(std::move(rk));
    throw_kafka(err, "metadata of " + topic);
  }
  int count = -1;
  rd_kafka_resp_err_t topic_err = RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
  for (int i = 0; i < md->topic_cnt; ++i) {
    if (topic == md->topics[i].topic) {
      topic_err = md->topics[i].err;
      count = md->topics[i].partition_cnt;
    }
  }
  rd_kafka_metadata_destroy(md);
  destroy_unjoined(std::move(rk));
  if (topic_err != RD_KAFKA_RESP_ERR_NO_ERROR || count <= 0)
    throw_kafka(topic_err, "topic " + topic);
  return count;
}

std::vector<std::int64_t> end_offsets(const std::string& bootstrap_servers,
                                      const std::string& topic, int partitions,
                                      std::chrono::milliseconds timeout) {
  KafkaHandle rk = consumer_handle(bootstrap_servers, "idem-admin");
  std::vector<std::int64_t> out;
  for (int p = 0; p < partitions; ++p) {
    std::int64_t low = 0;
    std::int64_t high = 0;
    const auto err = rd_kafka_query_watermark_offsets(rk.get(), topic.c_str(), p, &low, &high,
                                                      to_kafka_ms(timeout));
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      destroy_unjoined(std::move(rk));
      throw_kafka(err, fmt::format("watermarks of {}[{}]", topic, p));
    }
    out.push_back(high);
  }
  destroy_unjoined(std::move(rk));
  return out;
}

std::vector<std::int64_t> committed_offsets(const std::string& bootstrap_servers,
                                            const std::string& group, const std::string& topic,
                                            int partitions, std::chrono::milliseconds timeout) {
  // A consumer handle with the group's id that never subscribes: it asks the group
  // coordinator without joining the group.
  KafkaHandle rk = consumer_handle(bootstrap_servers, group);
  PartitionList list = detail::make_partition_list(partitions);
  for (int p = 0; p < partitions; ++p)
    rd_kafka_topic_partition_list_add(list.get(), topic.c_str(), p);
  if (const auto err = rd_kafka_committed(rk.get(), list.get(), to_kafka_ms(timeout));
      err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    destroy_unjoined(std::move(rk));
    throw_kafka(err, fmt::format("committed offsets of {}", group));
  }
  std::vector<std::int64_t> out(static_cast<std::size_t>(partitions), -1);
  for (int i = 0; i < list->cnt; ++i) {
    const auto& e = list->elems[i];
    if (e.partition >= 0 && e.partition < partitions)
      out[static_cast<std::size_t>(e.partition)] = e.offset < 0 ? -1 : e.offset;
  }
  destroy_unjoined(std::move(rk));
  return out;
}

std::vector<KafkaRecord> read_topic(const std::string& bootstrap_servers, const std::string& topic,
                                    int partitions, std::size_t count,
                                    std::chrono::milliseconds timeout) {
  KafkaHandle rk = consumer_handle(bootstrap_servers, "idem-admin-reader");
  PartitionList list = detail::make_partition_list(partitions);
  for (int p = 0; p < partitions; ++p) {
    rd_kafka_topic_partition_list_add(list.get(), topic.c_str(), p)->offset =
        RD_KAFKA_OFFSET_BEGINNING;
  }
  if (const auto err = rd_kafka_assign(rk.get(), list.get()); err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw_kafka(err, "assign " + topic);
  }
  std::vector<KafkaRecord> out;
  const auto deadline = SteadyClock::now() + timeout;
  while (out.size() < count && SteadyClock::now() < deadline) {
    detail::KafkaMessage m(rd_kafka_consumer_poll(rk.get(), 100));
    if (!m || m->err != RD_KAFKA_RESP_ERR_NO_ERROR) continue;
    KafkaRecord r;
    r.topic = rd_kafka_topic_name(m->rkt);
    r.partition = m->partition;
    r.offset = m->offset;
    if (m->key != nullptr) r.key.assign(static_cast<const char*>(m->key), m->key_len);
    if (m->payload != nullptr) r.payload.assign(static_cast<const char*>(m->payload), m->len);
    detail::for_each_header(*m, [&r](const char* name, std::string_view value) {
      r.headers.emplace_back(name, std::string(value));
    });
    out.push_back(std::move(r));
  }
  rd_kafka_consumer_close(rk.get());
  return out;
}

void commit_group_offsets(const std::string& bootstrap_servers, const std::string& group,
                          const std::string& topic,
                          const std::map<std::int32_t, std::int64_t>& offsets,
                          std::chrono::milliseconds timeout,
                          const std::vector<std::pair<std::string, std::string>>& kafka) {
  const int partitions = partition_count(bootstrap_servers, topic, timeout);
  // Not rd_kafka_DeleteConsumerGroupOffsets: librdkafka 2.0.2's mock cluster has no
  // OffsetDelete handler, and the admin request against it ABORTS the calling process
  // ("rdkafka_queue.h:1038: rd_kafka_enq_once_del_source_return: Assertion
  // `eonce->refcnt > 0' failed"). Nor a plain commit from a client outside the group:
  // once the group exists, the mock answers UNKNOWN_MEMBER_ID to an OffsetCommit from a
  // non-member. So: join the group as its only member and commit the offsets.
  std::vector<Property> props{{"session.timeout.ms", "6000"}, {"heartbeat.interval.ms", "1000"}};
  props.insert(props.end(), kafka.begin(), kafka.end());
  KafkaHandle rk = consumer_handle(bootstrap_servers, group, std::move(props));
  rd_kafka_poll_set_consumer(rk.get());
  {
    PartitionList sub = detail::make_partition_list(1);
    rd_kafka_topic_partition_list_add(sub.get(), topic.c_str(), RD_KAFKA_PARTITION_UA);
    if (const auto err = rd_kafka_subscribe(rk.get(), sub.get()); err != RD_KAFKA_RESP_ERR_NO_ERROR)
      throw_kafka(err, "subscribe to " + topic);
  }
  std::string failure = "not every partition was assigned";
  const auto deadline = SteadyClock::now() + timeout;
  while (SteadyClock::now() < deadline) {
    // Default rebalance handling (no callback): librdkafka assigns by itself. Records
    // that arrive are dropped unprocessed; nothing is stored or committed for them.
    detail::KafkaMessage m(rd_kafka_consumer_poll(rk.get(), 100));
    rd_kafka_topic_partition_list_t* assigned = nullptr;
    if (rd_kafka_assignment(rk.get(), &assigned) != RD_KAFKA_RESP_ERR_NO_ERROR) continue;
    const int cnt = assigned->cnt;
    rd_kafka_topic_partition_list_destroy(assigned);
    if (cnt < partitions) continue;
    PartitionList list = detail::make_partition_list(static_cast<int>(offsets.size()));
    for (const auto& [p, offset] : offsets)
      rd_kafka_topic_partition_list_add(list.get(), topic.c_str(), p)->offset = offset;
    const rd_kafka_resp_err_t err = rd_kafka_commit(rk.get(), list.get(), 0);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      rd_kafka_consumer_close(rk.get());
      return;
    }
    failure = rd_kafka_err2str(err);
  }
  rd_kafka_consumer_close(rk.get());
  throw Error(ErrorCode::Timeout, ErrorSource::Kafka,
              fmt::format("committing offsets of group {} on {}: {} within {} ms", group, topic,
                          failure, timeout.count()));
}

void rewind_group(const std::string& bootstrap_servers, const std::string& group,
                  const std::string& topic, int partitions, std::chrono::milliseconds timeout,
                  const std::vector<std::pair<std::string, std::string>>& kafka) {
  std::map<std::int32_t, std::int64_t> zero;
  for (int p = 0; p < partitions; ++p) zero[p] = 0;
  commit_group_offsets(bootstrap_servers, group, topic, zero, timeout, kafka);
}

void reset_group_offsets(Store& store, const std::string& bootstrap_servers,
                         const std::string& group, const std::string& topic,
                         const std::map<std::int32_t, std::int64_t>& offsets,
                         std::chrono::milliseconds timeout,
                         const std::vector<std::pair<std::string, std::string>>& kafka) {
  commit_group_offsets(bootstrap_servers, group, topic, offsets, timeout, kafka);
  std::vector<StoredOffset> rows;
  rows.reserve(offsets.size());
  for (const auto& [p, offset] : offsets) rows.push_back({topic, p, offset, {}, {}});
  auto tx = store.begin();
  write_stored_offsets(*tx, group, rows);
  tx->commit();
}

}  // namespace idem
