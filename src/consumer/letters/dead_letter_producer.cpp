#include "consumer/letters/dead_letter_producer.hpp"

#include <algorithm>
#include <array>
#include <string_view>

#include <fmt/format.h>

#include "consumer/letters/retry_topics.hpp"
#include "idem/error.hpp"
#include "idem/kafka/kafka_handle.hpp"
#include "idem/sha256.hpp"

namespace idem::detail {

namespace {

// Pending marker for a letter whose delivery report has not arrived yet.
constexpr rd_kafka_resp_err_t kPending = RD_KAFKA_RESP_ERR__IN_PROGRESS;

// Properties that only mean something to a consumer. The pass-through list is meant for
// both handles (TLS/SASL must reach the producer too), but consumer-only keys would make
// librdkafka warn on every start.
constexpr std::array<std::string_view, 16> kConsumerOnly = {"group.id",
                                                            "group.instance.id",
                                                            "session.timeout.ms",
                                                            "heartbeat.interval.ms",
                                                            "auto.offset.reset",
                                                            "max.poll.interval.ms",
                                                            "partition.assignment.strategy",
                                                            "enable.auto.commit",
                                                            "auto.commit.interval.ms",
                                                            "enable.auto.offset.store",
                                                            "isolation.level",
                                                            "enable.partition.eof",
                                                            "fetch.wait.max.ms",
                                                            "fetch.min.bytes",
                                                            "fetch.max.bytes",
                                                            "queued.min.messages"};

bool consumer_only(std::string_view key) {
  return std::find(kConsumerOnly.begin(), kConsumerOnly.end(), key) != kConsumerOnly.end();
}

}  // namespace

DeadLetterProducer::DeadLetterProducer(const ConsumerConfig& config,
                                       const RetryTopicMap& retry_topics, const LogFn* log,
                                       bool forward_kafka_logs)
    : config_(config),
      retry_topics_(retry_topics),
      log_(log),
      forward_kafka_logs_(forward_kafka_logs) {
  build_handle();
}

DeadLetterProducer::~DeadLetterProducer() {
  if (rk_) {
    // Letters that were acknowledged are done; anything still queued belongs to a
    // record whose offset was not committed, so it will be dead-lettered again.
    rd_kafka_purge(rk_.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_flush(rk_.get(), 1000);
  }
}

void DeadLetterProducer::build_handle() {
  KafkaConf conf(rd_kafka_conf_new());
  std::vector<Property> props = {{"bootstrap.servers", config_.bootstrap_servers}};
  for (const auto& p : config_.kafka) {
    if (!consumer_only(p.first)) props.push_back(p);
  }
  // Owned by idem: no duplicates from the producer's own retries, and "acknowledged"
  // means written to every in-sync replica.
  props.emplace_back("enable.idempotence", "true");
  props.emplace_back("acks", "all");
  props.emplace_back("message.timeout.ms",
                     std::to_string(std::max(1, to_kafka_ms(config_.dlq_ack_timeout))));
  set_properties(conf.get(), props);
  if (forward_kafka_logs_) {
    CallbackContext::kafka_log = log_;
    forward_logs(conf.get());
  }
  rd_kafka_conf_set_opaque(conf.get(), static_cast<CallbackContext*>(this));
  rd_kafka_conf_set_dr_msg_cb(conf.get(), &DeadLetterProducer::delivery_trampoline);
  rk_ = create_handle(RD_KAFKA_PRODUCER, std::move(conf));
}

void DeadLetterProducer::delivery_trampoline(rd_kafka_t* /*rk*/, const rd_kafka_message_t* m,
                                             void* opaque) {
  auto* self = static_cast<DeadLetterProducer*>(static_cast<CallbackContext*>(opaque));
  const auto id = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(m->_private));
  if (id < self->base_id_ || id >= self->base_id_ + self->results_.size()) return;
  self->results_[id - self->base_id_] = m->err;
}

void DeadLetterProducer::produce_one(const DeadLetter& letter, std::uint64_t id, bool truncate) {
  const rd_kafka_message_t& m = *letter.original;
  // A record read from a retry topic stands for its record on the source topic: its
  // retries and its dead letter belong to that topic and keep the first coordinates.
  const RetryTopicMap::Level* retry_level = retry_topics_.find(rd_kafka_topic_name(m.rkt));
  const std::string source =
      retry_level != nullptr ? retry_level->source : rd_kafka_topic_name(m.rkt);
  std::string original_partition = std::to_string(m.partition);
  std::string original_offset = std::to_string(m.offset);
  if (retry_level != nullptr) {
    if (auto p = message_header(m, "idem.original.partition")) original_partition = *p;
    if (auto o = message_header(m, "idem.original.offset")) original_offset = *o;
  }
  const std::string topic = letter.retry_level > 0
                                ? retry_topic_name(source, config_.group_id, letter.retry_level)
                                : source + config_.dlq_suffix;

  rd_kafka_headers_t* headers = rd_kafka_headers_new(16);
  for_each_header(m, [&](const char* name, std::string_view value) {
    // A record replayed from a DLQ carries the idem.* headers of its earlier failure;
    // the new ones below replace them instead of piling up beside them.
    if (std::string_view(name).starts_with("idem.")) return;
    rd_kafka_header_add(headers, name, -1, value.data(), static_cast<ssize_t>(value.size()));
  });
  const auto add = [&](const char* name, std::string_view value) {
    rd_kafka_header_add(headers, name, -1, value.data(), static_cast<ssize_t>(value.size()));
  };
  add("idem.original.topic", source);
  add("idem.original.partition", original_partition);
  add("idem.original.offset", original_offset);
  add("idem.consumer.group", config_.group_id);
  add("idem.error.class", letter.error_class);
  add("idem.error.message", letter.message);
  add(kAttemptsHeader, std::to_string(letter.attempts));
  if (letter.retry_level > 0) add(kNotBeforeHeader, std::to_string(letter.not_before_ms));
  // A retry carries the whole record (it is processed again); a dead letter too large to
  // carry whole carries a prefix and says so.
  const bool cut = letter.retry_level == 0 && (truncate || m.len > kDeadLetterMaxPayload);
  std::size_t payload_size = m.len;
  if (cut) {
    payload_size = std::min(m.len, kDeadLetterPayloadPrefix);
    add("idem.payload.truncated", "true");
    add("idem.original.size", std::to_string(m.len));
    add("idem.original.sha256",
        idem::sha256_hex(std::string_view(static_cast<const char*>(m.payload), m.len)));
  }

  // rd_kafka_produceva instead of producev: the RD_KAFKA_V_* macros are C casts.
  std::array<rd_kafka_vu_t, 6> vus{};
  vus[0].vtype = RD_KAFKA_VTYPE_TOPIC;
  vus[0].u.cstr = topic.c_str();
  vus[1].vtype = RD_KAFKA_VTYPE_KEY;
  vus[1].u.mem = {m.key, m.key_len};
  vus[2].vtype = RD_KAFKA_VTYPE_VALUE;
  vus[2].u.mem = {m.payload, payload_size};
  vus[3].vtype = RD_KAFKA_VTYPE_MSGFLAGS;
  vus[3].u.i = RD_KAFKA_MSG_F_COPY;
  vus[4].vtype = RD_KAFKA_VTYPE_HEADERS;
  vus[4].u.headers = headers;
  vus[5].vtype = RD_KAFKA_VTYPE_OPAQUE;
  vus[5].u.ptr = reinterpret_cast<void*>(static_cast<std::uintptr_t>(id));
  rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
  if (rd_kafka_error_t* e = rd_kafka_produceva(rk_.get(), vus.data(), vus.size())) {
    err = rd_kafka_error_code(e);
    rd_kafka_error_destroy(e);
  }
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    rd_kafka_headers_destroy(headers);  // ownership passes only on success
    results_[id - base_id_] = err;
  }
}

void DeadLetterProducer::remember(SourceRecord record) {
  if (!acknowledged_.insert(record).second) return;
  acknowledged_order_.push_back(std::move(record));
  if (acknowledged_order_.size() > kRememberedLetters) {
    acknowledged_.erase(acknowledged_order_.front());
    acknowledged_order_.pop_front();
  }
}

std::vector<rd_kafka_resp_err_t> DeadLetterProducer::produce_and_wait(
    std::span<const DeadLetter> letters, const std::vector<std::size_t>& which, bool truncate,
    std::chrono::milliseconds timeout) {
  base_id_ = next_id_;
  next_id_ += which.size();
  results_.assign(which.size(), kPending);
  for (std::size_t i = 0; i < which.size(); ++i)
    produce_one(letters[which[i]], base_id_ + i, truncate);

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::any_of(results_.begin(), results_.end(), [](auto e) { return e == kPending; })) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    rd_kafka_poll(rk_.get(), std::min(to_kafka_ms(left), 100));
  }
  std::vector<rd_kafka_resp_err_t> errors = results_;
  for (auto& e : errors) {
    if (e == kPending) e = RD_KAFKA_RESP_ERR__TIMED_OUT;
  }
  // Stop waiting for anything still pending; a late report no longer matches a slot.
  if (std::any_of(results_.begin(), results_.end(), [](auto e) { return e == kPending; })) {
    rd_kafka_purge(rk_.get(), RD_KAFKA_PURGE_F_QUEUE);
  }
  results_.clear();
  return errors;
}

std::vector<rd_kafka_resp_err_t> DeadLetterProducer::send(std::span<const DeadLetter> letters,
                                                          std::chrono::milliseconds timeout) {
  std::vector<rd_kafka_resp_err_t> result(letters.size(), RD_KAFKA_RESP_ERR_NO_ERROR);
  if (letters.empty()) return result;
  if (char reason[256]; rd_kafka_fatal_error(rk_.get(), reason, sizeof reason)) {
    // A fatal idempotent-producer error poisons the handle: rebuild it.
    if (log_ != nullptr && *log_)
      (*log_)(fmt::format("idem dlq: producer rebuilt after fatal error: {}", reason));
    rd_kafka_purge(rk_.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rk_.reset();
    build_handle();
  }

  const auto source_of = [](const DeadLetter& letter) {
    const rd_kafka_message_t& m = *letter.original;
    return SourceRecord{rd_kafka_topic_name(m.rkt), m.partition, m.offset, letter.retry_level};
  };
  std::vector<std::size_t> to_send;
  for (std::size_t i = 0; i < letters.size(); ++i) {
    if (!acknowledged_.contains(source_of(letters[i]))) {
      to_send.push_back(i);
    }
  }
  // The others were sent and acknowledged when this batch was tried before.
  if (to_send.empty()) return result;

  std::vector<rd_kafka_resp_err_t> errors = produce_and_wait(letters, to_send, false, timeout);
  // Refused as too large (by librdkafka's message.max.bytes or the broker's): once more,
  // cut to a prefix. Anything else permanent is reported as such; a transient failure
  // (broker unavailable, timeout) is retried by the caller with its partition.
  std::vector<std::size_t> too_large;
  std::vector<std::size_t> too_large_slots;
  for (std::size_t k = 0; k < to_send.size(); ++k) {
    if (too_large_produce_error(errors[k])) {
      if (letters[to_send[k]].retry_level == 0) {
        too_large.push_back(to_send[k]);
        too_large_slots.push_back(k);
      }
    }
  }
  if (!too_large.empty()) {
    const auto retried = produce_and_wait(letters, too_large, true, timeout);
    for (std::size_t k = 0; k < too_large.size(); ++k) errors[too_large_slots[k]] = retried[k];
  }

  for (std::size_t k = 0; k < to_send.size(); ++k) {
    const std::size_t i = to_send[k];
    result[i] = errors[k];
    if (errors[k] == RD_KAFKA_RESP_ERR_NO_ERROR) {
      remember(source_of(letters[i]));
    } else if (log_ != nullptr && *log_) {
      (*log_)(fmt::format(
          "idem dlq: {} [{}] offset {} not acknowledged ({}): {}",
          rd_kafka_topic_name(letters[i].original->rkt), letters[i].original->partition,
          letters[i].original->offset,
          permanent_produce_error(errors[k]) ? "permanent" : "transient",
          errors[k] == RD_KAFKA_RESP_ERR__TIMED_OUT ? "timed out" : rd_kafka_err2str(errors[k])));
    }
  }
  return result;
}

}  // namespace idem::detail
