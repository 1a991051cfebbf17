#include "support/effect_harness.hpp"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <array>
#include <stdexcept>

#include <fmt/format.h>

#include "consumer/letters/dead_letter_sender.hpp"
#include "idem/reference/count_handler.hpp"
#include "idem/reference/schema.hpp"
#include "support/kafka_handle.hpp"

namespace idem::test {

namespace {

using namespace std::chrono_literals;

std::pair<std::string, std::int32_t> key_of(const TopicPartition& tp) {
  return {tp.topic, tp.partition};
}

}  // namespace

// --- RecordLog ---

struct RecordLog::Impl {
  KafkaHandle producer;
  KafkaHandle consumer;
  std::map<std::pair<std::string, std::int32_t>, std::int64_t> ends;
  std::optional<TopicPartition> streaming;  // what the consumer is assigned to
  std::int64_t stream_next = 0;             // the offset it hands out next
};

RecordLog::RecordLog(const std::string& bootstrap_servers) : impl_(std::make_unique<Impl>()) {
  impl_->producer = make_kafka_handle(RD_KAFKA_PRODUCER, rd_kafka_conf_new(),
                                      {{"bootstrap.servers", bootstrap_servers},
                                       {"enable.idempotence", "true"},
                                       {"linger.ms", "0"},
                                       {"log_level", "3"}});
  impl_->consumer = make_kafka_handle(RD_KAFKA_CONSUMER, rd_kafka_conf_new(),
                                      {{"bootstrap.servers", bootstrap_servers},
                                       {"group.id", "effect-harness-reader"},
                                       {"enable.auto.commit", "false"},
                                       {"enable.partition.eof", "false"},
                                       {"fetch.wait.max.ms", "5"},
                                       {"fetch.error.backoff.ms", "5"},
                                       {"log_level", "3"}});
  rd_kafka_poll_set_consumer(impl_->consumer.get());
}

RecordLog::~RecordLog() {
  if (impl_->consumer) rd_kafka_consumer_close(impl_->consumer.get());
}

std::int64_t RecordLog::append(const TopicPartition& tp, const std::string& key,
                               const std::string& payload, const Headers& headers) {
  rd_kafka_headers_t* hdrs = rd_kafka_headers_new(headers.size());
  for (const auto& [name, value] : headers)
    rd_kafka_header_add(hdrs, name.c_str(), -1, value.data(), static_cast<ssize_t>(value.size()));
  std::array<rd_kafka_vu_t, 6> vus{};
  vus[0].vtype = RD_KAFKA_VTYPE_TOPIC;
  vus[0].u.cstr = tp.topic.c_str();
  vus[1].vtype = RD_KAFKA_VTYPE_PARTITION;
  vus[1].u.i32 = tp.partition;
  vus[2].vtype = RD_KAFKA_VTYPE_KEY;
  vus[2].u.mem = {const_cast<char*>(key.data()), key.size()};
  vus[3].vtype = RD_KAFKA_VTYPE_VALUE;
  vus[3].u.mem = {const_cast<char*>(payload.data()), payload.size()};
  vus[4].vtype = RD_KAFKA_VTYPE_MSGFLAGS;
  vus[4].u.i = RD_KAFKA_MSG_F_COPY;
  vus[5].vtype = RD_KAFKA_VTYPE_HEADERS;
  vus[5].u.headers = hdrs;
  if (rd_kafka_error_t* e = rd_kafka_produceva(impl_->producer.get(), vus.data(), vus.size())) {
    const std::string why = rd_kafka_error_string(e);
    rd_kafka_error_destroy(e);
    rd_kafka_headers_destroy(hdrs);
    throw std::runtime_error(fmt::format("append to {}: {}", tp.topic, why));
  }
  if (rd_kafka_flush(impl_->producer.get(), 10000) != RD_KAFKA_RESP_ERR_NO_ERROR)
    throw std::runtime_error("append: the broker did not acknowledge in 10 s");
  return impl_->ends[key_of(tp)]++;  // one producer per partition, in order: offsets from 0
}

std::int64_t RecordLog::end(const TopicPartition& tp) const {
  const auto it = impl_->ends.find(key_of(tp));
  return it == impl_->ends.end() ? 0 : it->second;
}

void RecordLog::refresh_end(const TopicPartition& tp) {
  std::int64_t low = 0;
  std::int64_t high = 0;
  const rd_kafka_resp_err_t err = rd_kafka_query_watermark_offsets(
      impl_->consumer.get(), tp.topic.c_str(), tp.partition, &low, &high, 10000);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
    throw std::runtime_error(
        fmt::format("watermarks of {} [{}]: {}", tp.topic, tp.partition, rd_kafka_err2str(err)));
  impl_->ends[key_of(tp)] = high;
}

std::vector<KafkaMessage> RecordLog::fetch(const TopicPartition& tp, std::int64_t from,
                                           std::size_t max) {
  std::vector<KafkaMessage> out;
  const std::int64_t until = std::min(end(tp), from + static_cast<std::int64_t>(max));
  if (from >= until) return out;
  if (!impl_->streaming || !(*impl_->streaming == tp) || impl_->stream_next != from) {
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, tp.topic.c_str(), tp.partition)->offset = from;
    const rd_kafka_resp_err_t err = rd_kafka_assign(impl_->consumer.get(), list);
    rd_kafka_topic_partition_list_destroy(list);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
      throw std::runtime_error(fmt::format("assign: {}", rd_kafka_err2str(err)));
    impl_->streaming = tp;
    impl_->stream_next = from;
  }
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (impl_->stream_next < until) {
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error(fmt::format("fetch {} [{}] from {}: nothing in 10 s", tp.topic,
                                           tp.partition, impl_->stream_next));
    KafkaMessage m(rd_kafka_consumer_poll(impl_->consumer.get(), 100));
    if (!m || m->err != RD_KAFKA_RESP_ERR_NO_ERROR) continue;
    if (m->partition != tp.partition || tp.topic != rd_kafka_topic_name(m->rkt)) continue;
    if (m->offset < impl_->stream_next) continue;  // fetched before the assignment changed
    impl_->stream_next = m->offset + 1;
    out.push_back(std::move(m));
  }
  return out;
}

// --- ScriptedFetch ---

void ScriptedFetch::assign(const TopicPartition& tp, std::int64_t position) {
  partitions_[key_of(tp)] = {position, false};
}

void ScriptedFetch::unassign(const TopicPartition& tp) {
  partitions_.erase(key_of(tp));
}

std::vector<KafkaMessage> ScriptedFetch::poll(std::size_t max, std::size_t per_partition) {
  std::vector<KafkaMessage> out;
  if (partitions_.empty()) return out;
  std::vector<std::pair<std::string, std::int32_t>> order;
  for (const auto& [key, p] : partitions_) order.push_back(key);
  const std::size_t first = rotation_++ % order.size();
  for (std::size_t k = 0; k < order.size() && out.size() < max; ++k) {
    const auto& key = order[(first + k) % order.size()];
    Partition& p = partitions_.at(key);
    if (p.paused) continue;
    const TopicPartition tp{key.first, key.second};
    std::vector<KafkaMessage> got =
        log_.fetch(tp, p.position, std::min(per_partition, max - out.size()));
    if (!got.empty()) p.position = got.back()->offset + 1;
    for (auto& m : got) out.push_back(std::move(m));
  }
  return out;
}

void ScriptedFetch::pause_and_seek(const detail::PartitionOffset& at) {
  const auto it = partitions_.find(key_of(at.tp));
  if (it == partitions_.end()) return;  // not assigned: librdkafka ignores it too
  it->second.paused = true;
  it->second.position = at.offset;
}

void ScriptedFetch::seek_and_resume(const detail::PartitionOffset& at) {
  const auto it = partitions_.find(key_of(at.tp));
  if (it == partitions_.end()) return;
  it->second.position = at.offset;
  it->second.paused = false;
}

bool ScriptedFetch::paused(const TopicPartition& tp) const {
  const auto it = partitions_.find(key_of(tp));
  return it != partitions_.end() && it->second.paused;
}

std::int64_t ScriptedFetch::position(const TopicPartition& tp) const {
  const auto it = partitions_.find(key_of(tp));
  return it == partitions_.end() ? -1 : it->second.position;
}

std::vector<TopicPartition> ScriptedFetch::assignment() const {
  std::vector<TopicPartition> out;
  for (const auto& [key, p] : partitions_) out.push_back({key.first, key.second});
  return out;
}

// --- EffectHarness ---

namespace {

ConsumerConfig harness_config(const SharedBroker& broker, const HarnessOptions& o,
                              const Clock& clock) {
  ConsumerConfig c;
  c.bootstrap_servers = broker.bootstrap_servers();
  c.group_id = "harness";
  for (const auto& [topic, partitions] : o.topics) c.topics.push_back(topic);
  c.batch_size = o.batch_size;
  c.retry.initial_backoff = 100ms;
  c.retry.max_backoff = 1000ms;
  c.retry.jitter = 0;  // replayable
  c.retry_topics.delays = o.retry_delays;
  c.dlq_ack_timeout = 10s;
  c.dedup_horizon = o.dedup_horizon;
  c.stale_events = o.stale_events;
  c.clock = &clock;
  c.max_in_flight = o.max_in_flight;
  c.max_buffered_per_partition = o.max_buffered_per_partition;
  c.kafka = {{"log_level", "3"}};
  return c;
}

}  // namespace

EffectHarness::EffectHarness(SharedBroker& broker, HarnessOptions options)
    : broker_(broker),
      options_(std::move(options)),
      config_(harness_config(broker, options_, wall_)),
      log_([this](std::string_view line) { log_lines_.emplace_back(line); }),
      retry_topics_(config_),
      horizon_guard_(config_),
      context_{config_, hooks_, log_, handlers_, retry_topics_, horizon_guard_, steady_},
      store_(open_store("sqlite://:memory:")),
      positions_(config_, *store_, log_),
      records_(broker.bootstrap_servers()),
      fetch_(records_),
      gate_(fetch_, positions_.progress()),
      ids_(std::make_unique<UuidV7Generator>(wall_)) {
  store_->migrate();
  migrate_reference_system(*store_);
  for (const auto& [topic, partitions] : options_.topics) {
    broker_.create_topic(topic, partitions);
    broker_.create_topic(topic + config_.dlq_suffix, 1);
    for (int p = 0; p < partitions; ++p) fetch_.assign({topic, p}, 0);
    for (const auto& retry : retry_topics_.of(topic)) {
      broker_.create_topic(retry, partitions);
      for (int p = 0; p < partitions; ++p) fetch_.assign({retry, p}, 0);
    }
  }
  EffectHandler<OrderConfirmed, bool> handler{
      .call =
          [this](const OrderConfirmed& e, const RecordInfo& r, CallCompletion<bool> done) {
            PendingCall call{{std::string(r.topic), r.partition},
                             r.offset,
                             e,
                             std::string(r.key),
                             std::move(done)};
            if (options_.on_call) options_.on_call(call);
            pending_.push_back(std::move(call));
          },
      .apply =
          [](const OrderConfirmed& e, const RecordInfo& r, const bool&, Transaction& tx) {
            record_effect(tx, e.event_id, r);
            return Outcome::Done;
          },
      .ordering_key = {}};
  for (const auto& [topic, partitions] : options_.topics) {
    auto route = std::make_unique<detail::TypedEffectTopicHandler<OrderConfirmed, bool>>(
        handler, options_.parser);
    auto& source = *route;
    for (auto& name : retry_topics_.of(topic))
      handlers_.effects.emplace(std::move(name),
                                std::make_unique<detail::RetryEffectTopicHandler>(source));
    handlers_.effects.emplace(topic, std::move(route));
  }
  processor_ = std::make_unique<detail::BatchProcessor>(context_, *store_);
  letters_ = std::make_unique<detail::DeadLetterProducer>(config_, retry_topics_, &log_, false);
  pipeline_ = std::make_unique<detail::EffectPipeline>(detail::EffectPipeline::Deps{
      context_, *store_, *processor_, gate_, positions_,
      [this](const detail::BatchResult& r, ConsumerStats& delta) {
        auto refused = detail::send_letters(*letters_, config_, log_, r, delta);
        // Retry letters went to retry topics this harness fetches from: learn their ends.
        std::set<std::string> written;
        for (const auto& letter : r.dead_letters) {
          if (letter.retry_level == 0) continue;
          const std::string topic = rd_kafka_topic_name(letter.original->rkt);
          const auto* level = retry_topics_.find(topic);
          written.insert(retry_topic(level != nullptr ? level->source : topic, letter.retry_level));
        }
        for (const auto& tp : fetch_.assignment()) {
          if (written.contains(tp.topic)) records_.refresh_end(tp);
        }
        return refused;
      }});
}

EffectHarness::~EffectHarness() {
  pending_.clear();  // completions of calls never completed: retries nobody takes
  pipeline_.reset();
}

std::string EffectHarness::retry_topic(const std::string& source, std::uint32_t level) const {
  return detail::retry_topic_name(source, config_.group_id, level);
}

OrderConfirmed EffectHarness::order(std::int64_t order_id, std::chrono::milliseconds age) {
  OrderConfirmed e;
  if (age.count() == 0) {
    e.event_id = ids_->next();
  } else {
    e.event_id = uuid_v7_born_at(wall_.now() - age);
  }
  e.occurred_at = Timestamp(std::chrono::time_point_cast<std::chrono::milliseconds>(wall_.now()));
  e.order_id = order_id;
  e.customer_id = 7;
  e.total_amount = Amount::from_hundredths(1250);
  return e;
}

std::int64_t EffectHarness::append(const TopicPartition& tp, const std::string& key,
                                   const std::string& payload, const Headers& headers) {
  return records_.append(tp, key, payload, headers);
}

void EffectHarness::advance(std::chrono::milliseconds d) {
  wall_.advance(d);
  steady_.advance(d);
}

void EffectHarness::complete(std::size_t i, Outcome outcome, const std::string& why) {
  PendingCall call = std::move(pending_.at(i));
  pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
  switch (outcome) {
    case Outcome::Done: call.done.done(true); break;
    case Outcome::Retry: call.done.retry(why); break;
    case Outcome::DeadLetter: call.done.dead_letter(why); break;
  }
}

void EffectHarness::turn() {
  // Consumer::Impl::loop's order for records of effect topics.
  gate_.release_due(steady_.now());
  std::vector<KafkaMessage> batch = fetch_.poll(config_.batch_size, options_.fetch_per_partition);
  gate_.drop_held(batch);
  if (config_.retry_topics.enabled() && !batch.empty()) {
    gate_.defer_not_due(
        batch, retry_topics_,
        std::chrono::duration_cast<std::chrono::milliseconds>(wall_.now().time_since_epoch())
            .count(),
        steady_.now());
  }
  ConsumerStats delta;
  if (!batch.empty()) pipeline_->admit(batch, delta);
  pipeline_->turn(delta, true);
  for (const auto& moved : positions_.progress().take_moved())
    committed_[key_of(moved.tp)] = moved.offset;
  stats_.add(delta);
}

void EffectHarness::reassign(const std::vector<TopicPartition>& partitions) {
  ConsumerStats delta;
  pipeline_->settle(delta);
  for (const auto& p : positions_.positions(partitions)) committed_[key_of(p.tp)] = p.offset;
  positions_.forget(partitions);
  gate_.forget(partitions);
  pipeline_->on_revoked(partitions);
  for (const auto& tp : partitions) {
    const auto c = committed(tp);
    fetch_.assign(tp, c.value_or(0));
  }
  stats_.add(delta);
}

std::optional<std::int64_t> EffectHarness::committed(const TopicPartition& tp) const {
  const auto it = committed_.find(key_of(tp));
  if (it == committed_.end()) return std::nullopt;
  return it->second;
}

std::int64_t EffectHarness::effects_of(const Uuid& event_id) {
  auto tx = store_->begin_read();
  const Rows rows = tx->execute("SELECT count(*) FROM effect_log WHERE event_id = $1", event_id);
  tx->rollback();
  return rows[0].int64(0);
}

std::int64_t EffectHarness::effects() {
  return count_effects(*store_, config_.group_id);
}

std::vector<ReadRecord> EffectHarness::dead_letters(const std::string& source_topic) {
  const std::string dlq = source_topic + config_.dlq_suffix;
  const std::vector<std::int64_t> end = end_offsets(broker_.bootstrap_servers(), dlq, 1);
  if (end.at(0) == 0) return {};
  return read_topic(broker_.bootstrap_servers(), dlq, 1, static_cast<std::size_t>(end.at(0)), 30s);
}

}  // namespace idem::test
