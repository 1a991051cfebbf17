#include "consumer/intake/poll_loop.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "idem/error.hpp"

namespace idem::detail {

namespace {

// Upper bound of one rd_kafka_consumer_poll call, so the stop flag is seen promptly even
// if rd_kafka_queue_yield does not interrupt this particular wait.
constexpr std::chrono::milliseconds kMaxPollSlice{100};

std::vector<TopicPartition> to_vector(const rd_kafka_topic_partition_list_t* list) {
  std::vector<TopicPartition> out;
  if (list == nullptr) return out;
  out.reserve(static_cast<std::size_t>(list->cnt));
  for (int i = 0; i < list->cnt; ++i) {
    out.push_back({list->elems[i].topic, list->elems[i].partition});
  }
  return out;
}

PartitionList one_partition(const PartitionOffset& at) {
  PartitionList list = make_partition_list(1);
  rd_kafka_topic_partition_list_add(list.get(), at.tp.topic.c_str(), at.tp.partition)->offset =
      at.offset;
  return list;
}

PartitionList partition_list(std::span<const PartitionOffset> offsets) {
  PartitionList list = make_partition_list(static_cast<int>(offsets.size()));
  for (const auto& o : offsets) {
    rd_kafka_topic_partition_list_add(list.get(), o.tp.topic.c_str(), o.tp.partition)->offset =
        o.offset;
  }
  return list;
}

// The next wait of a loop that ends at `deadline`: at most kMaxPollSlice, nullopt once it
// has passed.
std::optional<std::chrono::milliseconds> remaining_slice(
    std::chrono::steady_clock::time_point deadline) {
  const auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (remaining.count() <= 0) return std::nullopt;
  return std::min(remaining, kMaxPollSlice);
}

std::string kafka_error(rd_kafka_error_t* error) {
  std::string text = rd_kafka_error_string(error);
  rd_kafka_error_destroy(error);
  return text;
}

}  // namespace

PollLoop::PollLoop(const ConsumerConfig& config, const LogFn* log, bool forward_kafka_logs,
                   Listener listener)
    : log_(log), listener_(std::move(listener)) {
  KafkaConf conf(rd_kafka_conf_new());
  const std::vector<Property> defaults = {
      {"bootstrap.servers", config.bootstrap_servers},
      {"group.id", config.group_id},
      // The next offset to read after a restart is the committed one (CONS-X1); a new
      // group starts at the beginning, so nothing produced before it joined is skipped.
      {"auto.offset.reset", "earliest"},
  };
  set_properties(conf.get(), defaults);
  if (!config.instance_id.empty()) {
    const std::vector<Property> static_member = {{"group.instance.id", config.instance_id}};
    set_properties(conf.get(), static_member);
  }
  set_properties(conf.get(), config.kafka);
  // Owned by idem; applied last so nothing can turn them back on (the Consumer
  // constructor already rejects attempts to).
  const std::vector<Property> owned = {
      {"enable.auto.commit", "false"},
      {"enable.auto.offset.store", "false"},
  };
  set_properties(conf.get(), owned);
  if (forward_kafka_logs) {
    CallbackContext::kafka_log = log_;
    forward_logs(conf.get());
  }
  rd_kafka_conf_set_opaque(conf.get(), static_cast<CallbackContext*>(this));
  rd_kafka_conf_set_rebalance_cb(conf.get(), &PollLoop::rebalance_trampoline);
  rd_kafka_conf_set_offset_commit_cb(conf.get(), &PollLoop::commit_trampoline);
  rd_kafka_conf_set_error_cb(conf.get(), &PollLoop::error_trampoline);
  rk_ = create_handle(RD_KAFKA_CONSUMER, std::move(conf));
  // Serve every callback (errors, logs, commits, rebalances) from the consumer queue,
  // i.e. on the thread that calls poll_batch().
  rd_kafka_poll_set_consumer(rk_.get());
  queue_.reset(rd_kafka_queue_get_consumer(rk_.get()));
}

PollLoop::~PollLoop() {
  queue_.reset();
  if (abandoned_) {
    // rd_kafka_destroy would join librdkafka's main thread, which waits for the group
    // coordinator to answer the commit and the leave that timed out: without bound when
    // the broker is gone. The handle is left to the process's exit instead; its log
    // lines are silenced first, since they would go to this (destroyed) object.
    rd_kafka_set_log_level(rk_.get(), -1);
    static_cast<void>(rk_.release());
    return;
  }
  if (!closed_) {
    // run() never got to close (or never started): leaving the group here would call
    // the rebalance listener into a half-destroyed owner. The group notices the missing
    // member after session.timeout.ms, exactly as after a crash.
    rd_kafka_destroy_flags(rk_.release(), RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
  }
}

void PollLoop::log_line(std::string_view line) const {
  if (log_ != nullptr && *log_) (*log_)(line);
}

void PollLoop::subscribe(const std::vector<std::string>& topics) {
  PartitionList list = make_partition_list(static_cast<int>(topics.size()));
  for (const auto& t : topics) {
    rd_kafka_topic_partition_list_add(list.get(), t.c_str(), RD_KAFKA_PARTITION_UA);
  }
  const rd_kafka_resp_err_t err = rd_kafka_subscribe(rk_.get(), list.get());
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Kafka,
                fmt::format("cannot subscribe: {}", rd_kafka_err2str(err)), rd_kafka_err2name(err));
  }
}

void PollLoop::poll_batch(std::vector<KafkaMessage>& out, std::size_t max,
                          std::chrono::milliseconds first_wait, std::chrono::milliseconds window,
                          const std::atomic<bool>& stop, const std::atomic<bool>* ready) {
  using SteadyClock = std::chrono::steady_clock;
  out.clear();
  collecting_ = &out;
  struct Reset {
    PollLoop* self;
    ~Reset() { self->collecting_ = nullptr; }
  } reset{this};

  const auto first_deadline = SteadyClock::now() + first_wait;
  std::optional<SteadyClock::time_point> window_deadline;
  while (out.size() < max && !stop.load(std::memory_order_relaxed)) {
    const auto deadline = window_deadline ? *window_deadline : first_deadline;
    const auto remaining =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    const bool woken = ready != nullptr && ready->load(std::memory_order_relaxed);
    // Woken: one poll that does not wait still serves callbacks (rebalances) and takes
    // what is already fetched.
    const auto slice = woken ? std::chrono::milliseconds(0)
                             : std::clamp(remaining, std::chrono::milliseconds(0), kMaxPollSlice);
    KafkaMessage m(rd_kafka_consumer_poll(rk_.get(), to_kafka_ms(slice)));
    rethrow_pending();
    if (!m && woken) break;
    if (!m) {
      if (SteadyClock::now() >= deadline) break;
      continue;
    }
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      handle_message_error(*m);
      continue;
    }
    out.push_back(std::move(m));
    if (!window_deadline) window_deadline = SteadyClock::now() + window;
  }
}

void PollLoop::handle_message_error(const rd_kafka_message_t& m) {
  if (m.err == RD_KAFKA_RESP_ERR__PARTITION_EOF) return;
  if (m.err == RD_KAFKA_RESP_ERR__FATAL) {
    char reason[512];
    const rd_kafka_resp_err_t fatal = rd_kafka_fatal_error(rk_.get(), reason, sizeof reason);
    throw Error(ErrorCode::Internal, ErrorSource::Kafka,
                fmt::format("fatal consumer error: {}", reason), rd_kafka_err2name(fatal));
  }
  const char* topic = m.rkt != nullptr ? rd_kafka_topic_name(m.rkt) : "-";
  log_line(
      fmt::format("idem consumer: {} [{}]: {}", topic, m.partition, rd_kafka_message_errstr(&m)));
}

void PollLoop::rethrow_pending() {
  if (pending_) std::rethrow_exception(std::exchange(pending_, nullptr));
}

void PollLoop::pause_and_seek(const PartitionOffset& at) {
  PartitionList list = one_partition(at);
  // Pausing also purges records of this partition that were already fetched (librdkafka
  // bumps the partition's op version), so nothing beyond the failed record slips through.
  rd_kafka_pause_partitions(rk_.get(), list.get());
  if (rd_kafka_error_t* e = rd_kafka_seek_partitions(rk_.get(), list.get(), 0)) {
    log_line(fmt::format("idem consumer: seek {} [{}] to {}: {}", at.tp.topic, at.tp.partition,
                         at.offset, kafka_error(e)));
  }
}

void PollLoop::seek_and_resume(const PartitionOffset& at) {
  PartitionList list = one_partition(at);
  if (rd_kafka_error_t* e = rd_kafka_seek_partitions(rk_.get(), list.get(), 0)) {
    log_line(fmt::format("idem consumer: seek {} [{}] to {}: {}", at.tp.topic, at.tp.partition,
                         at.offset, kafka_error(e)));
  }
  rd_kafka_resume_partitions(rk_.get(), list.get());
}

std::vector<CommittedOffset> PollLoop::committed(std::span<const TopicPartition> partitions,
                                                 std::chrono::milliseconds timeout) {
  std::vector<CommittedOffset> out(partitions.size());
  if (partitions.empty()) return out;
  PartitionList list = make_partition_list(static_cast<int>(partitions.size()));
  for (const auto& tp : partitions)
    rd_kafka_topic_partition_list_add(list.get(), tp.topic.c_str(), tp.partition);
  const rd_kafka_resp_err_t err = rd_kafka_committed(rk_.get(), list.get(), to_kafka_ms(timeout));
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw Error(err == RD_KAFKA_RESP_ERR__TIMED_OUT ? ErrorCode::Timeout : ErrorCode::Connection,
                ErrorSource::Kafka,
                fmt::format("cannot read the group's committed offsets: {}", rd_kafka_err2str(err)),
                rd_kafka_err2name(err));
  }
  for (std::size_t i = 0; i < partitions.size(); ++i) {
    const rd_kafka_topic_partition_t& e = list->elems[i];
    if (e.err != RD_KAFKA_RESP_ERR_NO_ERROR || e.offset < 0) continue;
    out[i].offset = e.offset;
    if (e.metadata != nullptr)
      out[i].metadata.assign(static_cast<const char*>(e.metadata), e.metadata_size);
  }
  return out;
}

std::vector<std::string> PollLoop::finish(std::span<const PartitionOffset> positions,
                                          std::chrono::steady_clock::time_point deadline,
                                          std::string_view within) {
  std::vector<std::string> undone;
  if (!positions.empty()) {
    const auto now = std::chrono::steady_clock::now();
    const rd_kafka_resp_err_t err =
        commit_before(positions, deadline > now ? now + (deadline - now) / 2 : deadline);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      const std::string why = err == RD_KAFKA_RESP_ERR__TIMED_OUT
                                  ? "no answer from the group coordinator (broker unreachable)"
                                  : std::string(rd_kafka_err2str(err));
      undone.push_back(
          fmt::format("final offset commit not made within {}: {}; the uncommitted events will be "
                      "redelivered and deduplicated",
                      within, why));
    }
  }
  if (!close_before(deadline)) {
    undone.push_back(
        fmt::format("consumer group not left within {}: the group reassigns its partitions after "
                    "session.timeout.ms",
                    within));
  }
  return undone;
}

PartitionList PollLoop::commit_list(std::span<const PartitionOffset> offsets) const {
  PartitionList list = partition_list(offsets);
  if (!listener_.commit_metadata) return list;
  for (int i = 0; i < list->cnt; ++i) {
    rd_kafka_topic_partition_t& e = list->elems[i];
    const std::string_view metadata = listener_.commit_metadata({e.topic, e.partition});
    if (metadata.empty()) continue;
    // The list frees it with free() (librdkafka's rd_free) when destroyed.
    void* copy = std::malloc(metadata.size());
    if (copy == nullptr) throw std::bad_alloc();
    std::memcpy(copy, metadata.data(), metadata.size());
    e.metadata = copy;
    e.metadata_size = metadata.size();
  }
  return list;
}

std::vector<TopicPartition> PollLoop::assignment() const {
  rd_kafka_topic_partition_list_t* list = nullptr;
  if (rd_kafka_assignment(rk_.get(), &list) != RD_KAFKA_RESP_ERR_NO_ERROR) return {};
  const PartitionList owned(list);
  return to_vector(owned.get());
}

rd_kafka_resp_err_t PollLoop::commit(std::span<const PartitionOffset> offsets, bool async) {
  if (offsets.empty()) return RD_KAFKA_RESP_ERR_NO_ERROR;
  const PartitionList list = commit_list(offsets);
  const rd_kafka_resp_err_t err = rd_kafka_commit(rk_.get(), list.get(), async ? 1 : 0);
  if (!async && err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    // Not fatal: a commit that did not happen means redelivery, and the dedup rows make
    // that harmless. The mock cluster rejects commits during a rebalance with
    // REBALANCE_IN_PROGRESS (docs/dev-broker.md).
    log_line(fmt::format("idem consumer: offset commit failed: {}", rd_kafka_err2str(err)));
  }
  return err;
}

rd_kafka_resp_err_t PollLoop::commit_before(std::span<const PartitionOffset> offsets,
                                            std::chrono::steady_clock::time_point deadline) {
  if (offsets.empty()) return RD_KAFKA_RESP_ERR_NO_ERROR;
  const PartitionList list = commit_list(offsets);
  // The answer goes to a queue of its own (event API, so no callback), which is polled
  // only until the deadline; an answer arriving later is dropped with the queue.
  const KafkaQueue answers(rd_kafka_queue_new(rk_.get()));
  const rd_kafka_resp_err_t queued =
      rd_kafka_commit_queue(rk_.get(), list.get(), answers.get(), nullptr, nullptr);
  if (queued != RD_KAFKA_RESP_ERR_NO_ERROR) return queued;
  while (true) {
    const auto slice = remaining_slice(deadline);
    if (!slice) return RD_KAFKA_RESP_ERR__TIMED_OUT;
    rd_kafka_event_t* event = rd_kafka_queue_poll(answers.get(), to_kafka_ms(*slice));
    if (event == nullptr) continue;
    const bool answer = rd_kafka_event_type(event) == RD_KAFKA_EVENT_OFFSET_COMMIT;
    const rd_kafka_resp_err_t err = rd_kafka_event_error(event);
    rd_kafka_event_destroy(event);
    if (answer) return err;
  }
}

bool PollLoop::close_before(std::chrono::steady_clock::time_point deadline) {
  if (closed_) return true;
  // rd_kafka_consumer_close() waits for the coordinator without bound when the broker is
  // gone; the queued close does the same work in the background while this thread serves
  // its rebalance callbacks, and stops waiting at the deadline.
  const KafkaQueue closing(rd_kafka_queue_new(rk_.get()));
  if (rd_kafka_error_t* e = rd_kafka_consumer_close_queue(rk_.get(), closing.get())) {
    log_line(fmt::format("idem consumer: close: {}", kafka_error(e)));
    abandoned_ = true;
    return false;
  }
  while (rd_kafka_consumer_closed(rk_.get()) == 0) {
    const auto slice = remaining_slice(deadline);
    if (!slice) {
      abandoned_ = true;
      return false;
    }
    // Served like rd_kafka_consumer_close() serves its own queue: callbacks (the
    // revocation) run, and records or errors that were still on their way come back as
    // messages, dropped here (never processed, never committed: redelivered). Serving
    // this queue with rd_kafka_queue_poll_callback() aborts inside librdkafka 2.0.2
    // (rd_kafka_q_serve: assert res != RD_KAFKA_OP_RES_PASS) when a record arrives.
    if (rd_kafka_message_t* late = rd_kafka_consume_queue(closing.get(), to_kafka_ms(*slice)))
      rd_kafka_message_destroy(late);
  }
  closed_ = true;
  if (pending_) {
    try {
      std::rethrow_exception(std::exchange(pending_, nullptr));
    } catch (const std::exception& e) {
      log_line(fmt::format("idem consumer: during close: {}", e.what()));
    } catch (...) {
      log_line("idem consumer: during close: unknown exception");
    }
  }
  return true;
}

void PollLoop::wake() noexcept {
  if (queue_) rd_kafka_queue_yield(queue_.get());
}

void PollLoop::rebalance_trampoline(rd_kafka_t* /*rk*/, rd_kafka_resp_err_t err,
                                    rd_kafka_topic_partition_list_t* partitions, void* opaque) {
  auto* self = static_cast<PollLoop*>(static_cast<CallbackContext*>(opaque));
  try {
    self->on_rebalance(err, partitions);
  } catch (...) {
    if (!self->pending_) self->pending_ = std::current_exception();
  }
}

void PollLoop::on_rebalance(rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t* partitions) {
  rd_kafka_t* rk = rk_.get();
  const bool cooperative = std::strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
  const std::vector<TopicPartition> tps = to_vector(partitions);
  std::exception_ptr listener_error;

  if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
    if (listener_.start_offsets) {
      // Assigned with a start offset, a partition is fetched from there, not from the
      // group's committed offset ("Storing Offsets Outside Kafka").
      try {
        const std::vector<std::optional<std::int64_t>> starts = listener_.start_offsets(tps);
        for (std::size_t i = 0; i < starts.size() && i < tps.size(); ++i) {
          if (starts[i]) partitions->elems[i].offset = *starts[i];
        }
      } catch (...) {
        // Not assigned: Kafka's committed offset is no safe start when the store's
        // could not be read. The error stops the consumer (rethrown below).
        if (!pending_) pending_ = std::current_exception();
        return;
      }
    }
    if (cooperative) {
      if (rd_kafka_error_t* e = rd_kafka_incremental_assign(rk, partitions)) {
        log_line(fmt::format("idem consumer: incremental assign: {}", kafka_error(e)));
      }
    } else if (const auto e = rd_kafka_assign(rk, partitions); e != RD_KAFKA_RESP_ERR_NO_ERROR) {
      log_line(fmt::format("idem consumer: assign: {}", rd_kafka_err2str(e)));
    }
    // An application pause is a flag on librdkafka's partition object and can outlive a
    // revoke/assign cycle; a retry pause from an earlier ownership must not stick.
    rd_kafka_resume_partitions(rk, partitions);
    try {
      if (listener_.assigned) listener_.assigned(tps);
    } catch (...) {
      listener_error = std::current_exception();
    }
  } else {
    if (err != RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
      log_line(fmt::format("idem consumer: rebalance error: {}", rd_kafka_err2str(err)));
    }
    // Abandon records of revoked partitions that were collected but not processed: the
    // new owner gets them from the last committed offset.
    if (collecting_ != nullptr) {
      std::erase_if(*collecting_, [&](const KafkaMessage& m) {
        const char* topic = rd_kafka_topic_name(m->rkt);
        return std::any_of(tps.begin(), tps.end(), [&](const TopicPartition& tp) {
          return tp.partition == m->partition && tp.topic == topic;
        });
      });
    }
    try {
      if (listener_.revoked) listener_.revoked(tps, rd_kafka_assignment_lost(rk) != 0);
    } catch (...) {
      listener_error = std::current_exception();
    }
    if (cooperative && err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
      if (rd_kafka_error_t* e = rd_kafka_incremental_unassign(rk, partitions)) {
        log_line(fmt::format("idem consumer: incremental unassign: {}", kafka_error(e)));
      }
    } else {
      rd_kafka_assign(rk, nullptr);
    }
  }
  if (listener_error) std::rethrow_exception(listener_error);
}

void PollLoop::commit_trampoline(rd_kafka_t* /*rk*/, rd_kafka_resp_err_t err,
                                 rd_kafka_topic_partition_list_t* /*offsets*/, void* opaque) {
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR || err == RD_KAFKA_RESP_ERR__NO_OFFSET) return;
  auto* self = static_cast<PollLoop*>(static_cast<CallbackContext*>(opaque));
  try {
    self->log_line(
        fmt::format("idem consumer: offset commit failed: {} (records will be "
                    "redelivered and deduplicated)",
                    rd_kafka_err2str(err)));
  } catch (...) {
  }
}

void PollLoop::error_trampoline(rd_kafka_t* rk, int err, const char* reason, void* opaque) {
  auto* self = static_cast<PollLoop*>(static_cast<CallbackContext*>(opaque));
  try {
    const auto code = static_cast<rd_kafka_resp_err_t>(err);
    if (code == RD_KAFKA_RESP_ERR__FATAL) {
      char text[512];
      const rd_kafka_resp_err_t fatal = rd_kafka_fatal_error(rk, text, sizeof text);
      if (!self->pending_) {
        self->pending_ = std::make_exception_ptr(
            Error(ErrorCode::Internal, ErrorSource::Kafka,
                  fmt::format("fatal consumer error: {}", text), rd_kafka_err2name(fatal)));
      }
      return;
    }
    self->log_line(fmt::format("idem consumer: kafka: {}: {}", rd_kafka_err2name(code), reason));
  } catch (...) {
  }
}

}  // namespace idem::detail
