#include "console/kafka_view.hpp"

#include <librdkafka/rdkafka.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/dedup_horizon.hpp"
#include "idem/error.hpp"
#include "idem/kafka/kafka_handle.hpp"

namespace idem::console {

namespace {

using std::chrono::milliseconds;

// The console's handles never join a group and never commit: destroy them without the
// consumer close, which waits for a group leave that has nothing to leave.
struct NoCloseDeleter {
  void operator()(rd_kafka_t* rk) const noexcept {
    rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
  }
};
using Handle = std::unique_ptr<rd_kafka_t, NoCloseDeleter>;

// A consumer handle when `group` is set (committed offsets are asked of the handle's own
// group; reading by assignment needs one too), else a producer handle: metadata,
// watermarks and admin requests need no group.
Handle make_handle(const DlqConnection& c, const std::string& group) {
  detail::KafkaConf conf(rd_kafka_conf_new());
  std::vector<detail::Property> props = {{"bootstrap.servers", c.bootstrap_servers},
                                         {"log_level", "3"}};
  if (!group.empty()) {
    props.insert(props.end(), {{"group.id", group},
                               {"enable.auto.commit", "false"},
                               {"enable.auto.offset.store", "false"}});
  }
  props.insert(props.end(), c.kafka.begin(), c.kafka.end());
  detail::set_properties(conf.get(), props);
  return Handle(
      detail::create_handle(group.empty() ? RD_KAFKA_PRODUCER : RD_KAFKA_CONSUMER, std::move(conf))
          .release());
}

// The event id of a record, as the consumer finds it: the payload's top-level
// "event_id", else the `event_id` header.
std::optional<Uuid> event_id_of(const rd_kafka_message_t& m) {
  if (m.payload != nullptr) {
    const auto doc =
        nlohmann::json::parse(static_cast<const char*>(m.payload),
                              static_cast<const char*>(m.payload) + m.len, nullptr, false);
    if (doc.is_object()) {
      const auto it = doc.find("event_id");
      if (it != doc.end() && it->is_string()) {
        if (auto id = Uuid::parse(it->get<std::string>())) return id;
      }
    }
  }
  std::optional<Uuid> out;
  detail::for_each_header(m, [&](const char* name, std::string_view value) {
    if (!out && std::string_view(name) == "event_id") out = Uuid::parse(value);
  });
  return out;
}

}  // namespace

struct KafkaView::Impl {
  DlqConnection connection;
  Handle meta;  // metadata and watermarks
  // DescribeConsumerGroups only. Its own handle: in librdkafka 2.0.2, after the request
  // failed as unsupported (the mock cluster has no DescribeGroups), every later
  // rd_kafka_metadata() on the same consumer handle timed out.
  Handle admin;
  bool describe_supported = true;
  bool cluster_checked = false;
  Handle reader;                            // reads the record at a committed offset (assign only)
  std::map<std::string, Handle> per_group;  // rd_kafka_committed asks for the handle's group

  milliseconds step() const { return std::min(connection.timeout, milliseconds(5000)); }

  rd_kafka_t* group_handle(const std::string& group) {
    auto it = per_group.find(group);
    if (it == per_group.end()) it = per_group.emplace(group, make_handle(connection, group)).first;
    return it->second.get();
  }

  void describe(GroupLag& out) {
    out.state = "unknown";
    if (!cluster_checked) {
      cluster_checked = true;
      // librdkafka's mock cluster (the dev broker) has no DescribeGroups, and in 2.0.2 a
      // handle that asked it once wedges: its metadata calls time out and destroying it
      // never returns. Its cluster id says what it is, so it is never asked.
      if (char* id = rd_kafka_clusterid(meta.get(), detail::to_kafka_ms(step())); id != nullptr) {
        if (std::string_view(id).starts_with("mockCluster")) describe_supported = false;
        rd_kafka_mem_free(meta.get(), id);
      }
    }
    if (!describe_supported) return;
    rd_kafka_t* rk = admin.get();
    detail::KafkaQueue queue(rd_kafka_queue_new(rk));
    rd_kafka_AdminOptions_t* options =
        rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS);
    char errstr[256];
    rd_kafka_AdminOptions_set_request_timeout(options, detail::to_kafka_ms(step()), errstr,
                                              sizeof errstr);
    const char* groups[] = {out.group.c_str()};
    rd_kafka_DescribeConsumerGroups(rk, groups, 1, options, queue.get());
    rd_kafka_AdminOptions_destroy(options);
    rd_kafka_event_t* event = rd_kafka_queue_poll(queue.get(), detail::to_kafka_ms(step()));
    if (event == nullptr) return;
    if (rd_kafka_event_error(event) == RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE) {
      describe_supported = false;          // the broker will not learn it: stop asking
      static_cast<void>(admin.release());  // wedged (see above): destroying it would hang
    } else if (rd_kafka_event_error(event) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      const auto* result = rd_kafka_event_DescribeConsumerGroups_result(event);
      std::size_t n = 0;
      const auto** descriptions = rd_kafka_DescribeConsumerGroups_result_groups(result, &n);
      const rd_kafka_error_t* error =
          n == 1 ? rd_kafka_ConsumerGroupDescription_error(descriptions[0]) : nullptr;
      if (error != nullptr &&
          rd_kafka_error_code(error) == RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE) {
        describe_supported = false;
        static_cast<void>(admin.release());
      }
      if (n == 1 && error == nullptr) {
        out.state = rd_kafka_consumer_group_state_name(
            rd_kafka_ConsumerGroupDescription_state(descriptions[0]));
        out.members = rd_kafka_ConsumerGroupDescription_member_count(descriptions[0]);
      }
    }
    rd_kafka_event_destroy(event);
  }

  // One record per lagging partition, all assigned at once, until each has answered
  // or the step deadline passes (then those ages stay unknown).
  void oldest_ages(std::vector<PartitionLag>& partitions) {
    detail::PartitionList list = detail::make_partition_list(static_cast<int>(partitions.size()));
    std::map<std::pair<std::string, std::int32_t>, PartitionLag*> waiting;
    for (PartitionLag& p : partitions) {
      if (p.lag <= 0 || p.committed < 0) continue;
      rd_kafka_topic_partition_list_add(list.get(), p.topic.c_str(), p.partition)->offset =
          p.committed;
      waiting[{p.topic, p.partition}] = &p;
    }
    if (waiting.empty() || rd_kafka_assign(reader.get(), list.get()) != RD_KAFKA_RESP_ERR_NO_ERROR)
      return;
    const auto deadline = std::chrono::steady_clock::now() + std::min(step(), milliseconds(1500));
    const auto now = std::chrono::system_clock::now();
    while (!waiting.empty() && std::chrono::steady_clock::now() < deadline) {
      detail::KafkaMessage m(rd_kafka_consumer_poll(reader.get(), 100));
      if (!m || m->err != RD_KAFKA_RESP_ERR_NO_ERROR) continue;
      const auto it = waiting.find({rd_kafka_topic_name(m->rkt), m->partition});
      if (it == waiting.end()) continue;
      if (const auto id = event_id_of(*m); id && id->is_v7()) {
        it->second->oldest_unprocessed_age = DedupHorizon::event_age(*id, now);
      }
      waiting.erase(it);
    }
    rd_kafka_assign(reader.get(), nullptr);
  }
};

KafkaView::KafkaView(DlqConnection connection) : impl_(std::make_unique<Impl>()) {
  impl_->connection = std::move(connection);
  impl_->meta = make_handle(impl_->connection, "");
  impl_->admin = make_handle(impl_->connection, "");
  impl_->reader = make_handle(impl_->connection, "idem-console-reader");
}

KafkaView::~KafkaView() = default;

std::vector<TopicInfo> KafkaView::topics() {
  const rd_kafka_metadata_t* metadata = nullptr;
  const auto err = rd_kafka_metadata(impl_->meta.get(), 1, nullptr, &metadata,
                                     detail::to_kafka_ms(impl_->step()));
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw Error(err == RD_KAFKA_RESP_ERR__TIMED_OUT ? ErrorCode::Timeout : ErrorCode::Connection,
                ErrorSource::Kafka, fmt::format("console: metadata: {}", rd_kafka_err2str(err)));
  }
  std::vector<TopicInfo> out;
  for (int i = 0; i < metadata->topic_cnt; ++i) {
    const auto& t = metadata->topics[i];
    if (t.err != RD_KAFKA_RESP_ERR_NO_ERROR || std::string_view(t.topic).starts_with("__"))
      continue;
    out.push_back({t.topic, t.partition_cnt});
  }
  rd_kafka_metadata_destroy(metadata);
  std::sort(out.begin(), out.end(),
            [](const TopicInfo& a, const TopicInfo& b) { return a.name < b.name; });
  return out;
}

GroupLag KafkaView::group_lag(const std::string& group, const std::vector<TopicInfo>& topics) {
  GroupLag out;
  out.group = group;
  try {
    impl_->describe(out);
    int total = 0;
    for (const TopicInfo& t : topics) total += t.partitions;
    detail::PartitionList list = detail::make_partition_list(std::max(total, 1));
    for (const TopicInfo& t : topics) {
      for (int p = 0; p < t.partitions; ++p)
        rd_kafka_topic_partition_list_add(list.get(), t.name.c_str(), p);
    }
    const auto err = rd_kafka_committed(impl_->group_handle(group), list.get(),
                                        detail::to_kafka_ms(impl_->step()));
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      out.error = fmt::format("committed offsets: {}", rd_kafka_err2str(err));
      return out;
    }
    // A topic is the group's when it has committed on any of its partitions.
    std::map<std::string, bool> known;
    for (int i = 0; i < list->cnt; ++i) {
      if (list->elems[i].offset >= 0) known[list->elems[i].topic] = true;
    }
    for (int i = 0; i < list->cnt; ++i) {
      const auto& e = list->elems[i];
      if (!known.contains(e.topic)) continue;
      PartitionLag p;
      p.topic = e.topic;
      p.partition = e.partition;
      p.committed = e.offset >= 0 ? e.offset : -1;
      std::int64_t low = 0;
      std::int64_t high = 0;
      const auto werr = rd_kafka_query_watermark_offsets(
          impl_->meta.get(), e.topic, e.partition, &low, &high, detail::to_kafka_ms(impl_->step()));
      if (werr != RD_KAFKA_RESP_ERR_NO_ERROR) {
        out.error =
            fmt::format("end offsets of {} [{}]: {}", e.topic, e.partition, rd_kafka_err2str(werr));
        continue;
      }
      p.end = high;
      p.lag = std::max<std::int64_t>(0, high - (p.committed >= 0 ? p.committed : low));
      out.partitions.push_back(std::move(p));
    }
    impl_->oldest_ages(out.partitions);
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

}  // namespace idem::console
