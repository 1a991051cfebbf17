#include "idem/producer.hpp"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <array>
#include <deque>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "idem/kafka/kafka_handle.hpp"
#include "kafka/produce_errors.hpp"

namespace idem {

using detail::KafkaConf;
using detail::KafkaHandle;
using detail::Property;

struct Producer::Impl {
  ProducerConfig config;
  KafkaHandle rk;
  // Every message sent and not yet reported, in ticket order (= send order); after a
  // rebuild they are sent again from here, byte for byte. A window indexed by
  // ticket - pending_base (tickets are consecutive); reported slots are emptied and the
  // front is trimmed, so memory follows the oldest unreported message. Cheaper than a
  // node-based map at hundreds of thousands of messages per second.
  std::deque<std::optional<ProducerMessage>> pending;
  std::uint64_t pending_base = 1;  // ticket of pending.front()
  std::size_t pending_count = 0;   // engaged slots
  std::uint64_t next_ticket = 1;
  std::uint64_t rebuilds = 0;
  // Filled by the callbacks, which run inside rd_kafka_poll/flush on the caller's thread.
  std::vector<Delivery>* sink = nullptr;
  bool fatal = false;
  std::string fatal_reason;
  // Messages librdkafka refused for good in produce(): reported by the next poll()/flush().
  std::vector<Delivery> refused;

  void log(std::string_view line) const {
    if (config.log) config.log(line);
  }

  static Impl* self(void* opaque) { return static_cast<Impl*>(opaque); }

  std::optional<ProducerMessage>* find_pending(std::uint64_t ticket) {
    if (ticket < pending_base || ticket - pending_base >= pending.size()) return nullptr;
    auto& slot = pending[static_cast<std::size_t>(ticket - pending_base)];
    return slot.has_value() ? &slot : nullptr;
  }
  void erase_pending(std::optional<ProducerMessage>& slot) {
    slot.reset();
    --pending_count;
    while (!pending.empty() && !pending.front().has_value()) {
      pending.pop_front();
      ++pending_base;
    }
  }
  void clear_pending() {
    pending.clear();
    pending_count = 0;
    pending_base = next_ticket;
  }

  // librdkafka callbacks: nothing may throw through them, so each body is wrapped.
  static void delivery_trampoline(rd_kafka_t* /*rk*/, const rd_kafka_message_t* m,
                                  void* opaque) noexcept {
    try {
      self(opaque)->on_delivery(*m);
    } catch (...) {
      // Only std::bad_alloc can get here; the message stays pending and is resent
      // after the next rebuild or reported by a later flush. Nothing else to do.
    }
  }
  static void error_trampoline(rd_kafka_t* rk, int err, const char* reason, void* opaque) noexcept {
    try {
      Impl* impl = self(opaque);
      if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char why[512];
        rd_kafka_fatal_error(rk, why, sizeof why);
        impl->fatal = true;
        impl->fatal_reason = why;
      }
      impl->log(fmt::format("idem producer: {}: {}",
                            rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(err)), reason));
    } catch (...) {
    }
  }

  void on_delivery(const rd_kafka_message_t& m) {
    const auto ticket = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(m._private));
    auto* const slot = find_pending(ticket);
    if (slot == nullptr) return;  // purged, or from a handle being rebuilt
    if (m.err == RD_KAFKA_RESP_ERR__PURGE_QUEUE || m.err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT) {
      return;  // purge(): the caller already forgot it
    }
    if (m.err == RD_KAFKA_RESP_ERR__FATAL || fatal) {
      // Failed because the handle is poisoned: keep it pending, the rebuild resends it.
      fatal = true;
      return;
    }
    Delivery d;
    d.ticket = ticket;
    d.ok = m.err == RD_KAFKA_RESP_ERR_NO_ERROR;
    d.partition = m.partition;
    d.offset = m.offset;
    if (!d.ok) {
      d.error = fmt::format("{}: {}", rd_kafka_err2name(m.err), rd_kafka_err2str(m.err));
      d.permanent = detail::permanent_produce_error(m.err);
    }
    erase_pending(*slot);
    if (sink != nullptr) sink->push_back(std::move(d));
  }

  void build() {
    if (config.bootstrap_servers.empty()) {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                  "producer: bootstrap_servers is required");
    }
    KafkaConf conf(rd_kafka_conf_new());
    std::vector<Property> props = {{"bootstrap.servers", config.bootstrap_servers},
                                   {"client.id", config.client_id}};
    props.insert(props.end(), config.kafka.begin(), config.kafka.end());
    // Owned by idem (rule PROD), so they come last and win over the pass-through list.
    props.emplace_back("enable.idempotence", "true");
    props.emplace_back("acks", "all");
    props.emplace_back("message.timeout.ms",
                       std::to_string(detail::to_kafka_ms(config.delivery_timeout)));
    props.emplace_back("linger.ms", std::to_string(detail::to_kafka_ms(config.linger)));
    props.emplace_back(
        "queue.buffering.max.messages",
        std::to_string(std::clamp<std::size_t>(config.max_queued_messages, 1, 10'000'000)));
    detail::set_properties(conf.get(), props);
    rd_kafka_conf_set_opaque(conf.get(), this);
    rd_kafka_conf_set_dr_msg_cb(conf.get(), &Impl::delivery_trampoline);
    rd_kafka_conf_set_error_cb(conf.get(), &Impl::error_trampoline);
    rk = detail::create_handle(RD_KAFKA_PRODUCER, std::move(conf));
    fatal = false;
    fatal_reason.clear();
  }

  // Returns the librdkafka error of the produce call (the message is not queued then).
  rd_kafka_resp_err_t produce(std::uint64_t ticket, const ProducerMessage& msg) {
    rd_kafka_headers_t* headers = rd_kafka_headers_new(2 + msg.headers.size());
    char id[36];
    msg.event_id.format_to(id);
    rd_kafka_header_add(headers, "event_id", -1, id, sizeof id);
    if (!msg.traceparent.empty()) {
      rd_kafka_header_add(headers, "traceparent", -1, msg.traceparent.data(),
                          static_cast<ssize_t>(msg.traceparent.size()));
    }
    for (const auto& [name, value] : msg.headers) {
      rd_kafka_header_add(headers, name.c_str(), -1, value.data(),
                          static_cast<ssize_t>(value.size()));
    }
    // rd_kafka_produceva instead of producev: the RD_KAFKA_V_* macros are C casts.
    std::array<rd_kafka_vu_t, 6> vus{};
    vus[0].vtype = RD_KAFKA_VTYPE_TOPIC;
    vus[0].u.cstr = msg.topic.c_str();
    vus[1].vtype = RD_KAFKA_VTYPE_KEY;
    vus[1].u.mem = {const_cast<char*>(msg.key.data()), msg.key.size()};
    vus[2].vtype = RD_KAFKA_VTYPE_VALUE;
    vus[2].u.mem = {const_cast<char*>(msg.payload.data()), msg.payload.size()};
    vus[3].vtype = RD_KAFKA_VTYPE_MSGFLAGS;
    // Copied: purge() forgets messages whose bytes librdkafka may still reference.
    vus[3].u.i = RD_KAFKA_MSG_F_COPY;
    vus[4].vtype = RD_KAFKA_VTYPE_HEADERS;
    vus[4].u.headers = headers;
    vus[5].vtype = RD_KAFKA_VTYPE_OPAQUE;
    vus[5].u.ptr = reinterpret_cast<void*>(static_cast<std::uintptr_t>(ticket));
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (rd_kafka_error_t* e = rd_kafka_produceva(rk.get(), vus.data(), vus.size())) {
      err = rd_kafka_error_code(e);
      rd_kafka_error_destroy(e);
    }
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) rd_kafka_headers_destroy(headers);
    return err;
  }

  // A message librdkafka refused for good: forgotten like a delivered one, its failure
  // reported by the next poll(). A size refusal names the limit, so that whoever reads
  // the reason (the relay keeps it with a rejected outbox row) knows what to change.
  void refuse(std::uint64_t ticket, const ProducerMessage& msg, rd_kafka_resp_err_t err) {
    Delivery d;
    d.ticket = ticket;
    d.permanent = true;
    d.error = fmt::format("{}: {}", rd_kafka_err2name(err), rd_kafka_err2str(err));
    if (detail::too_large_produce_error(err)) {
      char limit[32] = "?";
      std::size_t size = sizeof limit;
      rd_kafka_conf_get(rd_kafka_conf(rk.get()), "message.max.bytes", limit, &size);
      d.error += fmt::format(" (payload {} bytes; the producer's message.max.bytes is {})",
                             msg.payload.size(), limit);
    }
    if (auto* slot = find_pending(ticket)) erase_pending(*slot);  // destroys `msg`
    refused.push_back(std::move(d));
  }

  void report_refused(std::vector<Delivery>& out) {
    for (Delivery& d : refused) out.push_back(std::move(d));
    refused.clear();
  }

  // Produces, waiting for room while the local queue is full.
  void produce_waiting(std::uint64_t ticket, const ProducerMessage& msg) {
    const auto deadline = std::chrono::steady_clock::now() + config.queue_full_timeout;
    while (true) {
      const rd_kafka_resp_err_t err = produce(ticket, msg);
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return;
      if (err == RD_KAFKA_RESP_ERR__FATAL) {
        fatal = true;
        return;  // stays pending; the rebuild sends it
      }
      if (detail::permanent_produce_error(err)) {
        refuse(ticket, msg, err);
        return;
      }
      if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        // Formatted first: erasing the slot destroys `msg`.
        std::string what = fmt::format("producer: librdkafka refused a message for {}: {}",
                                       msg.topic, rd_kafka_err2str(err));
        if (auto* slot = find_pending(ticket)) erase_pending(*slot);
        throw Error(ErrorCode::InvalidArgument, ErrorSource::Kafka, std::move(what),
                    rd_kafka_err2name(err));
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        if (auto* slot = find_pending(ticket)) erase_pending(*slot);
        throw Error(ErrorCode::Timeout, ErrorSource::Kafka,
                    "producer: local queue stayed full; the broker is not keeping up");
      }
      rd_kafka_poll(rk.get(), 10);
    }
  }

  // A fatal error poisons the handle: build a new one (new producer id, fresh sequence
  // numbers) and send every unacknowledged message again, in order, same bytes.
  void rebuild_if_fatal() {
    if (!fatal) {
      char why[512];
      if (rk && rd_kafka_fatal_error(rk.get(), why, sizeof why) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fatal = true;
        fatal_reason = why;
      } else {
        return;
      }
    }
    log(fmt::format("idem producer: fatal error ({}); rebuilding and resending {} message(s)",
                    fatal_reason, pending_count));
    if (rk) {
      // Any report the old handle still produces is ignored: sink_ is cleared and the
      // handle is destroyed before a new ticket could collide (tickets are never reused).
      std::vector<Delivery>* saved = sink;
      sink = nullptr;
      auto pending_copy = std::move(pending);
      const std::size_t count_copy = pending_count;
      const std::uint64_t base_copy = pending_base;
      clear_pending();
      rd_kafka_purge(rk.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT |
                                   RD_KAFKA_PURGE_F_NON_BLOCKING);
      rk.reset();  // rd_kafka_destroy: serves no more callbacks into us
      pending = std::move(pending_copy);
      pending_count = count_copy;
      pending_base = base_copy;
      sink = saved;
    }
    build();
    ++rebuilds;
    // By index: produce_waiting() may erase (and trim) a refused message.
    for (std::uint64_t ticket = pending_base; ticket < next_ticket; ++ticket) {
      if (auto* slot = find_pending(ticket)) produce_waiting(ticket, **slot);
    }
  }
};

Producer::Producer(ProducerConfig config) : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
  impl_->build();
}

Producer::~Producer() {
  try {
    std::vector<Delivery> ignored;
    flush(impl_->config.flush_timeout, ignored);
  } catch (...) {
  }
  if (impl_->rk) {
    impl_->sink = nullptr;
    impl_->clear_pending();  // destroy serves no callbacks into us after purge
    rd_kafka_purge(impl_->rk.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT |
                                        RD_KAFKA_PURGE_F_NON_BLOCKING);
    impl_->rk.reset();
  }
}

std::uint64_t Producer::send(ProducerMessage message) {
  impl_->rebuild_if_fatal();
  const std::uint64_t ticket = impl_->next_ticket++;
  if (impl_->pending.empty()) impl_->pending_base = ticket;
  impl_->pending.emplace_back(std::move(message));
  ++impl_->pending_count;
  impl_->produce_waiting(ticket, *impl_->pending.back());
  return ticket;
}

std::size_t Producer::poll(std::chrono::milliseconds timeout, std::vector<Delivery>& out) {
  const std::size_t before = out.size();
  impl_->report_refused(out);
  impl_->sink = &out;
  // Refusals are results too: do not wait for more once there are some.
  rd_kafka_poll(impl_->rk.get(), out.size() > before ? 0 : detail::to_kafka_ms(timeout));
  impl_->sink = nullptr;
  impl_->rebuild_if_fatal();
  return out.size() - before;
}

bool Producer::flush(std::chrono::milliseconds timeout, std::vector<Delivery>& out) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  impl_->report_refused(out);
  while (impl_->pending_count > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    poll(std::min(left, std::chrono::milliseconds(100)), out);
  }
  return true;
}

void Producer::purge() noexcept {
  impl_->refused.clear();
  if (!impl_->rk) return;
  impl_->clear_pending();
  rd_kafka_purge(impl_->rk.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT |
                                      RD_KAFKA_PURGE_F_NON_BLOCKING);
}

std::size_t Producer::pending() const noexcept {
  return impl_->pending_count;
}

std::uint64_t Producer::rebuilds() const noexcept {
  return impl_->rebuilds;
}

void Producer::raise_fatal_error_for_testing(std::string_view reason) {
  rd_kafka_test_fatal_error(impl_->rk.get(), RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                            std::string(reason).c_str());
}

}  // namespace idem
