#include "support/kafka_test_producer.hpp"

#include <librdkafka/rdkafka.h>

#include <array>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

namespace idem::test {

namespace {

struct HandleDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
struct ListDeleter {
  void operator()(rd_kafka_topic_partition_list_t* l) const {
    rd_kafka_topic_partition_list_destroy(l);
  }
};
using Handle = std::unique_ptr<rd_kafka_t, HandleDeleter>;
using PartitionList = std::unique_ptr<rd_kafka_topic_partition_list_t, ListDeleter>;

int ms(std::chrono::milliseconds d) { return static_cast<int>(d.count()); }

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

std::optional<std::string> ReadRecord::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return std::nullopt;
}

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

std::vector<ReadRecord> read_topic(const std::string& bootstrap_servers, const std::string& topic,
                                   int partitions, std::size_t count,
                                   std::chrono::milliseconds timeout) {
  Handle rk = make_handle(RD_KAFKA_CONSUMER, {{"bootstrap.servers", bootstrap_servers},
                                              {"group.id", "idem-test-reader"},
                                              {"enable.auto.commit", "false"},
                                              {"log_level", "3"}});
  PartitionList list(rd_kafka_topic_partition_list_new(partitions));
  for (int p = 0; p < partitions; ++p) {
    rd_kafka_topic_partition_list_add(list.get(), topic.c_str(), p)->offset =
        RD_KAFKA_OFFSET_BEGINNING;
  }
  if (const auto err = rd_kafka_assign(rk.get(), list.get()); err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw std::runtime_error(fmt::format("assign: {}", rd_kafka_err2str(err)));
  }
  std::vector<ReadRecord> out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (out.size() < count && std::chrono::steady_clock::now() < deadline) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk.get(), 100);
    if (m == nullptr) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      ReadRecord r;
      r.topic = rd_kafka_topic_name(m->rkt);
      r.partition = m->partition;
      r.offset = m->offset;
      if (m->key != nullptr) r.key.assign(static_cast<const char*>(m->key), m->key_len);
      if (m->payload != nullptr) r.payload.assign(static_cast<const char*>(m->payload), m->len);
      rd_kafka_headers_t* hdrs = nullptr;
      if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char* name = nullptr;
        const void* value = nullptr;
        std::size_t size = 0;
        for (std::size_t i = 0;
             rd_kafka_header_get_all(hdrs, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
             ++i) {
          r.headers.emplace_back(name, value != nullptr
                                           ? std::string(static_cast<const char*>(value), size)
                                           : std::string());
        }
      }
      out.push_back(std::move(r));
    }
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(rk.get());
  return out;
}

std::vector<std::int64_t> committed_offsets(const std::string& bootstrap_servers,
                                            const std::string& group, const std::string& topic,
                                            int partitions, std::chrono::milliseconds timeout) {
  // A consumer handle with the group's id that never subscribes: it asks the group
  // coordinator without joining the group.
  Handle rk = make_handle(RD_KAFKA_CONSUMER, {{"bootstrap.servers", bootstrap_servers},
                                              {"group.id", group},
                                              {"enable.auto.commit", "false"},
                                              {"log_level", "3"}});
  PartitionList list(rd_kafka_topic_partition_list_new(partitions));
  for (int p = 0; p < partitions; ++p) rd_kafka_topic_partition_list_add(list.get(), topic.c_str(), p);
  if (const auto err = rd_kafka_committed(rk.get(), list.get(), ms(timeout));
      err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw std::runtime_error(fmt::format("committed: {}", rd_kafka_err2str(err)));
  }
  std::vector<std::int64_t> out(static_cast<std::size_t>(partitions), -1);
  for (int i = 0; i < list->cnt; ++i) {
    const auto& e = list->elems[i];
    out[static_cast<std::size_t>(e.partition)] = e.offset < 0 ? -1 : e.offset;
  }
  rd_kafka_destroy_flags(rk.release(), RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
  return out;
}

std::vector<std::int64_t> end_offsets(const std::string& bootstrap_servers,
                                      const std::string& topic, int partitions,
                                      std::chrono::milliseconds timeout) {
  Handle rk = make_handle(RD_KAFKA_CONSUMER, {{"bootstrap.servers", bootstrap_servers},
                                              {"group.id", "idem-test-watermarks"},
                                              {"log_level", "3"}});
  std::vector<std::int64_t> out;
  for (int p = 0; p < partitions; ++p) {
    std::int64_t low = 0;
    std::int64_t high = 0;
    const auto err =
        rd_kafka_query_watermark_offsets(rk.get(), topic.c_str(), p, &low, &high, ms(timeout));
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      throw std::runtime_error(fmt::format("watermarks: {}", rd_kafka_err2str(err)));
    }
    out.push_back(high);
  }
  rd_kafka_destroy_flags(rk.release(), RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
  return out;
}

std::string unique_name(std::string_view prefix) {
  static std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}-{:012x}", prefix, rng() & 0xffffffffffffULL);
}

}  // namespace idem::test
