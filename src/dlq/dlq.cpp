#include "idem/dlq.hpp"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <simdjson.h>

#include "idem/error.hpp"
#include "idem/kafka/kafka_handle.hpp"

namespace idem {

namespace {

using detail::KafkaConf;
using detail::KafkaHandle;
using detail::PartitionList;
using detail::Property;
using std::chrono::milliseconds;

template <class T>
std::optional<T> parse_number(std::string_view text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// The payload's top-level "event_id", when the payload is a JSON object holding a UUID
// there. Dead letters include payloads that are not JSON at all; those simply have none.
std::optional<Uuid> payload_event_id(std::string_view payload) {
  simdjson::ondemand::parser parser;
  const simdjson::padded_string padded(payload);
  auto doc = parser.iterate(padded);
  simdjson::ondemand::object object;
  if (doc.get_object().get(object) != simdjson::SUCCESS) return std::nullopt;
  std::string_view text;
  if (object["event_id"].get_string().get(text) != simdjson::SUCCESS) return std::nullopt;
  return Uuid::parse(text);
}

// `configure` runs last, for callbacks and the opaque (which must be set before creation).
KafkaHandle make_handle(const DlqConnection& connection, rd_kafka_type_t type,
                        const std::function<void(rd_kafka_conf_t*)>& configure = {}) {
  if (connection.bootstrap_servers.empty()) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "dlq: bootstrap servers are required");
  }
  KafkaConf conf(rd_kafka_conf_new());
  std::vector<Property> props = {{"bootstrap.servers", connection.bootstrap_servers},
                                 {"log_level", "3"}};
  if (type == RD_KAFKA_CONSUMER) {
    // Reading without a group: partitions are assigned, never subscribed, and no offset
    // is ever committed, so reading a DLQ leaves no trace on the cluster.
    props.emplace_back("group.id", "idem-dlq-reader");
    props.emplace_back("enable.auto.commit", "false");
    props.emplace_back("enable.auto.offset.store", "false");
    props.emplace_back("enable.partition.eof", "true");
  }
  props.insert(props.end(), connection.kafka.begin(), connection.kafka.end());
  if (type == RD_KAFKA_PRODUCER) {
    // Owned here: a replay must not add duplicates of its own through producer retries.
    props.emplace_back("enable.idempotence", "true");
    props.emplace_back("acks", "all");
    props.emplace_back("message.timeout.ms",
                       std::to_string(std::max(1, detail::to_kafka_ms(connection.timeout))));
  }
  detail::set_properties(conf.get(), props);
  if (configure) configure(conf.get());
  return detail::create_handle(type, std::move(conf));
}

int partition_count(rd_kafka_t* rk, const std::string& topic, milliseconds timeout) {
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
  const rd_kafka_metadata_t* metadata = nullptr;
  const auto err = rd_kafka_metadata(rk, 0, rkt, &metadata, detail::to_kafka_ms(timeout));
  rd_kafka_topic_destroy(rkt);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw Error(err == RD_KAFKA_RESP_ERR__TIMED_OUT ? ErrorCode::Timeout : ErrorCode::Connection,
                ErrorSource::Kafka,
                fmt::format("dlq: metadata of {}: {}", topic, rd_kafka_err2str(err)));
  }
  int partitions = -1;
  rd_kafka_resp_err_t topic_err = RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
  if (metadata->topic_cnt == 1) {
    topic_err = metadata->topics[0].err;
    partitions = metadata->topics[0].partition_cnt;
  }
  rd_kafka_metadata_destroy(metadata);
  if (topic_err != RD_KAFKA_RESP_ERR_NO_ERROR || partitions <= 0) {
    throw Error(
        ErrorCode::InvalidArgument, ErrorSource::Kafka,
        fmt::format("dlq: topic {} does not exist ({})", topic, rd_kafka_err2str(topic_err)));
  }
  return partitions;
}

// Keeps the first letter of each original record and counts the others on it. A record
// is its original topic, partition and offset plus its event id: the same coordinates
// with another event id are another record (a topic deleted and created again reuses
// offsets). Letters without complete original coordinates are all kept.
std::vector<DeadLetterRecord> collapse_copies(std::vector<DeadLetterRecord> letters) {
  std::vector<DeadLetterRecord> out;
  out.reserve(letters.size());
  std::map<std::tuple<std::string, std::int32_t, std::int64_t, std::string>, std::size_t> first;
  for (DeadLetterRecord& r : letters) {
    if (!r.original_topic.empty() && r.original_partition && r.original_offset) {
      const auto [it, inserted] =
          first.try_emplace(std::tuple(r.original_topic, *r.original_partition, *r.original_offset,
                                       r.event_id ? r.event_id->to_string() : std::string()),
                            out.size());
      if (!inserted) {
        ++out[it->second].copies;
        continue;
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

DeadLetterRecord decode(const rd_kafka_message_t& m) {
  DeadLetterRecord r;
  r.topic = rd_kafka_topic_name(m.rkt);
  r.partition = m.partition;
  r.offset = m.offset;
  rd_kafka_timestamp_type_t ts_type = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
  const std::int64_t ts = rd_kafka_message_timestamp(&m, &ts_type);
  if (ts_type != RD_KAFKA_TIMESTAMP_NOT_AVAILABLE && ts >= 0) {
    r.dead_lettered_at = std::chrono::system_clock::time_point(milliseconds(ts));
  }
  if (m.key != nullptr) r.key.assign(static_cast<const char*>(m.key), m.key_len);
  if (m.payload != nullptr) r.payload.assign(static_cast<const char*>(m.payload), m.len);
  detail::for_each_header(m, [&](const char* name, std::string_view value) {
    r.headers.emplace_back(name, std::string(value));
  });
  const auto text = [&](std::string_view name) { return std::string(r.header(name).value_or("")); };
  r.original_topic = text("idem.original.topic");
  r.original_partition = parse_number<std::int32_t>(text("idem.original.partition"));
  r.original_offset = parse_number<std::int64_t>(text("idem.original.offset"));
  r.consumer_group = text("idem.consumer.group");
  r.error_class = text("idem.error.class");
  r.error_message = text("idem.error.message");
  r.attempts = parse_number<std::uint32_t>(text("idem.attempts"));
  r.event_id = payload_event_id(r.payload);
  if (!r.event_id) {
    if (auto h = r.header("event_id")) r.event_id = Uuid::parse(*h);
  }
  return r;
}

ErrorCode code_of(rd_kafka_resp_err_t err) {
  return err == RD_KAFKA_RESP_ERR__TIMED_OUT ? ErrorCode::Timeout : ErrorCode::Connection;
}

}  // namespace

std::optional<std::string_view> DeadLetterRecord::header(std::string_view name) const noexcept {
  for (const auto& [k, v] : headers) {
    if (k == name) return std::string_view(v);
  }
  return std::nullopt;
}

std::optional<milliseconds> DeadLetterRecord::event_age(
    std::chrono::system_clock::time_point now) const noexcept {
  if (!event_id || !event_id->is_v7()) return std::nullopt;
  return DedupHorizon::event_age(*event_id, now);
}

bool DlqFilter::matches(const DeadLetterRecord& r,
                        std::chrono::system_clock::time_point now) const {
  if (reason) {
    const std::string_view c = r.error_class;
    const bool exact = c == *reason;
    const bool family =
        c.size() > reason->size() && c.starts_with(*reason) && c[reason->size()] == '.';
    if (!exact && !family) return false;
  }
  if (key && r.key != *key) return false;
  if (consumer_group && r.consumer_group != *consumer_group) return false;
  if (event_id && r.event_id != event_id) return false;
  if (partition && r.partition != *partition) return false;
  if (offset && r.offset != *offset) return false;
  if (min_age || max_age) {
    if (!r.dead_lettered_at) return false;
    const auto age = std::chrono::duration_cast<milliseconds>(now - *r.dead_lettered_at);
    if (min_age && age < *min_age) return false;
    if (max_age && age > *max_age) return false;
  }
  return true;
}

std::vector<DeadLetterRecord> read_dead_letters(const DlqConnection& connection,
                                                std::string_view dlq_topic, const DlqFilter& filter,
                                                const Clock& clock) {
  const std::string topic(dlq_topic);
  KafkaHandle rk = make_handle(connection, RD_KAFKA_CONSUMER);
  const int partitions = partition_count(rk.get(), topic, connection.timeout);

  // Snapshot the end of every partition first: the reader stops there, so a DLQ that
  // keeps growing (or a replay into a topic whose dead letters land here) still ends.
  PartitionList assignment = detail::make_partition_list(partitions);
  std::vector<std::int64_t> end(static_cast<std::size_t>(partitions), 0);
  std::size_t open_partitions = 0;
  for (int p = 0; p < partitions; ++p) {
    std::int64_t low = 0;
    std::int64_t high = 0;
    const auto err = rd_kafka_query_watermark_offsets(rk.get(), topic.c_str(), p, &low, &high,
                                                      detail::to_kafka_ms(connection.timeout));
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      throw Error(code_of(err), ErrorSource::Kafka,
                  fmt::format("dlq: end offsets of {} [{}]: {}", topic, p, rd_kafka_err2str(err)));
    }
    end[static_cast<std::size_t>(p)] = high;
    if (high > low) {
      rd_kafka_topic_partition_list_add(assignment.get(), topic.c_str(), p)->offset = low;
      ++open_partitions;
    }
  }

  std::vector<DeadLetterRecord> out;
  if (open_partitions == 0) return out;
  if (const auto err = rd_kafka_assign(rk.get(), assignment.get());
      err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw Error(ErrorCode::Connection, ErrorSource::Kafka,
                fmt::format("dlq: assign {}: {}", topic, rd_kafka_err2str(err)));
  }
  const auto now = clock.now();
  std::vector<bool> done(static_cast<std::size_t>(partitions), false);
  // The deadline restarts with every record: a long DLQ may take longer than one
  // timeout in total, but a broker that stops answering does not hang the reader.
  auto deadline = std::chrono::steady_clock::now() + connection.timeout;
  while (open_partitions > 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw Error(
          ErrorCode::Timeout, ErrorSource::Kafka,
          fmt::format("dlq: reading {} stalled for {} ms", topic, connection.timeout.count()));
    }
    detail::KafkaMessage m(rd_kafka_consumer_poll(rk.get(), 100));
    if (!m) continue;
    const auto p = static_cast<std::size_t>(m->partition);
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      // The log start may have moved past records (retention): EOF below the snapshot
      // end means nothing more is coming for this partition.
      if (!done[p] && m->offset >= end[p]) {
        done[p] = true;
        --open_partitions;
      }
      continue;
    }
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (m->err == RD_KAFKA_RESP_ERR__TRANSPORT || m->err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
        continue;
      throw Error(ErrorCode::Connection, ErrorSource::Kafka,
                  fmt::format("dlq: reading {}: {}", topic, rd_kafka_message_errstr(m.get())));
    }
    deadline = std::chrono::steady_clock::now() + connection.timeout;
    if (done[p] || m->offset >= end[p]) continue;
    DeadLetterRecord record = decode(*m);
    if (filter.matches(record, now)) out.push_back(std::move(record));
    if (m->offset + 1 >= end[p]) {
      done[p] = true;
      --open_partitions;
    }
  }
  rd_kafka_consumer_close(rk.get());
  std::sort(out.begin(), out.end(), [](const DeadLetterRecord& a, const DeadLetterRecord& b) {
    return std::pair(a.partition, a.offset) < std::pair(b.partition, b.offset);
  });
  return collapse_copies(std::move(out));
}

std::string_view to_string(ReplayAction action) noexcept {
  switch (action) {
    case ReplayAction::Replayed: return "replayed";
    case ReplayAction::RefusedStale: return "refused_stale";
    case ReplayAction::NoTarget: return "no_target";
    case ReplayAction::Failed: return "failed";
  }
  return "unknown";
}

namespace {

// The replay producer: acknowledgements land in the slot of their item (by index, passed
// as the message opaque).
struct ReplaySender : detail::CallbackContext {
  std::vector<rd_kafka_resp_err_t> results;

  static void on_delivery(rd_kafka_t* /*rk*/, const rd_kafka_message_t* m, void* opaque) {
    auto* self = static_cast<ReplaySender*>(static_cast<detail::CallbackContext*>(opaque));
    const auto index = reinterpret_cast<std::uintptr_t>(m->_private);
    if (index < self->results.size()) self->results[index] = m->err;
  }
};

constexpr rd_kafka_resp_err_t kPending = RD_KAFKA_RESP_ERR__IN_PROGRESS;

rd_kafka_resp_err_t produce(rd_kafka_t* rk, const DeadLetterRecord& r, const std::string& target,
                            std::size_t index) {
  const auto headers_for_replay = [&] {
    rd_kafka_headers_t* headers = rd_kafka_headers_new(r.headers.size() + 1);
    for (const auto& [name, value] : r.headers) {
      // The idem.* headers describe the failure; a replay that fails again gets new ones.
      if (std::string_view(name).starts_with("idem.")) continue;
      rd_kafka_header_add(headers, name.c_str(), -1, value.data(),
                          static_cast<ssize_t>(value.size()));
    }
    const std::string from = fmt::format("{}/{}/{}", r.topic, r.partition, r.offset);
    rd_kafka_header_add(headers, "idem.replayed.from", -1, from.data(),
                        static_cast<ssize_t>(from.size()));
    return headers;
  };
  void* opaque = reinterpret_cast<void*>(static_cast<std::uintptr_t>(index));
  for (;;) {
    const auto err =
        detail::produce_copy(rk, target.c_str(), r.key, r.payload, headers_for_replay(), opaque);
    if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) return err;
    rd_kafka_poll(rk, 100);  // make room by serving acknowledgements
  }
}

}  // namespace

ReplayReport replay_dead_letters(const DlqConnection& connection, std::string_view dlq_topic,
                                 const ReplayOptions& options) {
  if (options.rate_limit < 0) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "dlq replay: rate limit must be >= 0");
  }
  if (options.horizon.safety_margin >= options.horizon.retention) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "dlq replay: the safety margin must be shorter than the dedup retention");
  }
  const Clock& clock = options.clock != nullptr ? *options.clock : SystemClock::instance();
  ReplayReport report;
  report.dry_run = options.dry_run;
  for (DeadLetterRecord& r : read_dead_letters(connection, dlq_topic, options.filter, clock)) {
    ReplayItem item;
    item.target_topic = !options.to_topic.empty() ? options.to_topic : r.original_topic;
    item.record = std::move(r);
    const auto& id = item.record.event_id;
    if (item.target_topic.empty()) {
      item.action = ReplayAction::NoTarget;
    } else if (!options.force && id && id->is_v7() && options.horizon.is_stale(*id, clock.now())) {
      item.action = ReplayAction::RefusedStale;
    }
    report.items.push_back(std::move(item));
  }
  const std::size_t total = report.items.size();
  const auto progress = [&](std::size_t done) {
    if (options.on_progress) options.on_progress(ReplayProgress{done, total});
  };

  ReplaySender sender;
  KafkaHandle rk;
  if (!options.dry_run) {
    sender.results.assign(total, kPending);
    rk = make_handle(connection, RD_KAFKA_PRODUCER, [&](rd_kafka_conf_t* conf) {
      rd_kafka_conf_set_opaque(conf, static_cast<detail::CallbackContext*>(&sender));
      rd_kafka_conf_set_dr_msg_cb(conf, &ReplaySender::on_delivery);
    });
  }

  const auto started = std::chrono::steady_clock::now();
  std::size_t sent = 0;
  std::size_t handled = 0;
  for (std::size_t i = 0; i < total; ++i) {
    ReplayItem& item = report.items[i];
    if (item.action != ReplayAction::Replayed) {
      if (!options.dry_run) sender.results[i] = RD_KAFKA_RESP_ERR_NO_ERROR;
      progress(++handled);
      continue;
    }
    if (options.dry_run) {
      progress(++handled);
      continue;
    }
    if (options.rate_limit > 0) {
      // Pace by schedule, not by sleeping a fixed gap: record n leaves no earlier than
      // n / rate seconds after the start, whatever the broker's latency was.
      const auto due =
          started +
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
              std::chrono::duration<double>(static_cast<double>(sent) / options.rate_limit));
      while (std::chrono::steady_clock::now() < due) {
        rd_kafka_poll(rk.get(),
                      std::max(1, static_cast<int>(std::chrono::duration_cast<milliseconds>(
                                                       due - std::chrono::steady_clock::now())
                                                       .count())));
      }
    }
    if (const auto err = produce(rk.get(), item.record, item.target_topic, i);
        err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      sender.results[i] = err;
    }
    ++sent;
    rd_kafka_poll(rk.get(), 0);
    // Progress counts acknowledged records, not queued ones.
    const auto acked = static_cast<std::size_t>(std::count_if(
        sender.results.begin(), sender.results.end(), [](auto e) { return e != kPending; }));
    if (acked > handled) {
      handled = acked;
      progress(handled);
    }
  }
  if (!options.dry_run) {
    const auto deadline = std::chrono::steady_clock::now() + connection.timeout;
    const auto pending = [&] {
      return static_cast<std::size_t>(
          std::count(sender.results.begin(), sender.results.end(), kPending));
    };
    while (pending() > 0 && std::chrono::steady_clock::now() < deadline) {
      rd_kafka_poll(rk.get(), 100);
      if (total - pending() > handled) {
        handled = total - pending();
        progress(handled);
      }
    }
    rd_kafka_purge(rk.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_poll(rk.get(), 0);
  }
  for (std::size_t i = 0; i < total; ++i) {
    ReplayItem& item = report.items[i];
    if (item.action == ReplayAction::Replayed && !options.dry_run &&
        sender.results[i] != RD_KAFKA_RESP_ERR_NO_ERROR) {
      item.action = ReplayAction::Failed;
      item.error = sender.results[i] == kPending ? "not acknowledged in time"
                                                 : rd_kafka_err2str(sender.results[i]);
    }
    switch (item.action) {
      case ReplayAction::Replayed: ++report.replayed; break;
      case ReplayAction::RefusedStale: ++report.refused_stale; break;
      case ReplayAction::NoTarget: ++report.no_target; break;
      case ReplayAction::Failed: ++report.failed; break;
    }
  }
  return report;
}

}  // namespace idem
