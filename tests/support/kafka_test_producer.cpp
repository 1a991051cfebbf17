#include "support/kafka_test_producer.hpp"

#include <librdkafka/rdkafka.h>

#include <array>
#include <random>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "idem/reference/order_confirmed.hpp"

namespace idem::test {

namespace {

struct HandleDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
using Handle = std::unique_ptr<rd_kafka_t, HandleDeleter>;

int ms(std::chrono::milliseconds d) {
  return static_cast<int>(d.count());
}

Handle make_handle(rd_kafka_type_t type, const Headers& props,
                   void (*dr)(rd_kafka_t*, const rd_kafka_message_t*, void*) = nullptr,
                   void* opaque = nullptr) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char errstr[512];
  for (const auto& [k, v] : props) {
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      throw std::runtime_error(fmt::format("{}={}: {}", k, v, errstr));
    }
  }
  if (dr != nullptr) rd_kafka_conf_set_dr_msg_cb(conf, dr);
  if (opaque != nullptr) rd_kafka_conf_set_opaque(conf, opaque);
  rd_kafka_t* rk = rd_kafka_new(type, conf, errstr, sizeof errstr);
  if (rk == nullptr) {
    rd_kafka_conf_destroy(conf);
    throw std::runtime_error(errstr);
  }
  return Handle(rk);
}

}  // namespace

struct KafkaTestProducer::Impl {
  Handle rk;
  std::size_t failed = 0;
  std::string first_error;

  static void on_delivery(rd_kafka_t* /*rk*/, const rd_kafka_message_t* m, void* opaque) {
    auto* self = static_cast<Impl*>(opaque);
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (self->failed++ == 0) self->first_error = rd_kafka_err2str(m->err);
    }
  }
};

KafkaTestProducer::KafkaTestProducer(const std::string& bootstrap_servers)
    : impl_(std::make_unique<Impl>()) {
  impl_->rk = make_handle(RD_KAFKA_PRODUCER,
                          {{"bootstrap.servers", bootstrap_servers},
                           {"enable.idempotence", "true"},
                           {"linger.ms", "5"},
                           // Tests send oversized records on purpose (they must reach
                           // the DLQ, not be refused here).
                           {"message.max.bytes", "10000000"},
                           {"log_level", "3"}},
                          &Impl::on_delivery, impl_.get());
}

KafkaTestProducer::~KafkaTestProducer() = default;

void KafkaTestProducer::send(const TestRecord& r) {
  rd_kafka_headers_t* hdrs = rd_kafka_headers_new(r.headers.size() + 1);
  for (const auto& [k, v] : r.headers) {
    rd_kafka_header_add(hdrs, k.c_str(), -1, v.data(), static_cast<ssize_t>(v.size()));
  }
  std::array<rd_kafka_vu_t, 6> vus{};
  vus[0].vtype = RD_KAFKA_VTYPE_TOPIC;
  vus[0].u.cstr = r.topic.c_str();
  vus[1].vtype = RD_KAFKA_VTYPE_KEY;
  vus[1].u.mem = {const_cast<char*>(r.key.data()), r.key.size()};
  vus[2].vtype = RD_KAFKA_VTYPE_VALUE;
  vus[2].u.mem = {const_cast<char*>(r.payload.data()), r.payload.size()};
  vus[3].vtype = RD_KAFKA_VTYPE_MSGFLAGS;
  vus[3].u.i = RD_KAFKA_MSG_F_COPY;
  vus[4].vtype = RD_KAFKA_VTYPE_HEADERS;
  vus[4].u.headers = hdrs;
  vus[5].vtype = RD_KAFKA_VTYPE_PARTITION;
  vus[5].u.i32 = r.partition;
  for (;;) {
    rd_kafka_error_t* e = rd_kafka_produceva(impl_->rk.get(), vus.data(), vus.size());
    if (e == nullptr) return;
    const auto code = rd_kafka_error_code(e);
    const std::string text = rd_kafka_error_string(e);
    rd_kafka_error_destroy(e);
    if (code == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
      rd_kafka_poll(impl_->rk.get(), 100);
      continue;
    }
    rd_kafka_headers_destroy(hdrs);
    throw std::runtime_error(fmt::format("produce to {}: {}", r.topic, text));
  }
}

void KafkaTestProducer::flush(std::chrono::milliseconds timeout) {
  const auto err = rd_kafka_flush(impl_->rk.get(), ms(timeout));
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw std::runtime_error(fmt::format("flush: {}", rd_kafka_err2str(err)));
  }
  if (impl_->failed != 0) {
    throw std::runtime_error(
        fmt::format("{} record(s) failed, first: {}", impl_->failed, impl_->first_error));
  }
}

namespace {

/// Order `order_id`'s confirmation, as one record of `topic` keyed `key`.
TestRecord order_record(const std::string& topic, std::int64_t order_id, std::string key,
                        std::int32_t partition, Uuid& event_id) {
  OrderConfirmed e;
  e.event_id = new_uuid_v7();
  e.occurred_at =
      std::chrono::time_point_cast<std::chrono::microseconds>(std::chrono::system_clock::now());
  e.order_id = order_id;
  e.customer_id = 42;
  e.total_amount = Amount::from_hundredths(1999);
  event_id = e.event_id;
  return {topic, std::move(key), to_json(e), {{"event_id", e.event_id.to_string()}}, partition};
}

}  // namespace

std::map<std::int64_t, Uuid> produce_order_events(const std::string& bootstrap_servers,
                                                  const std::string& topic, int count,
                                                  std::int32_t partition) {
  std::map<std::int64_t, Uuid> ids;
  KafkaTestProducer producer(bootstrap_servers);
  for (int i = 1; i <= count; ++i)
    producer.send(order_record(topic, i, std::to_string(i), partition, ids[i]));
  producer.flush();
  return ids;
}

KeyedOrderEvents produce_keyed_order_events(
    const std::string& bootstrap_servers, const std::string& topic, int count,
    const std::function<std::string(std::int64_t)>& key_of) {
  KeyedOrderEvents out;
  KafkaTestProducer producer(bootstrap_servers);
  for (std::int64_t id = 1; id <= count; ++id) {
    std::string key = key_of(id);
    out.order_ids_by_key[key].push_back(id);
    out.key_of_order[id] = key;
    producer.send(order_record(topic, id, std::move(key), -1, out.event_ids[id]));
  }
  producer.flush(std::chrono::seconds(60));
  return out;
}

}  // namespace idem::test
