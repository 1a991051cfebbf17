#include "support/kafka_handle.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace idem::test {

KafkaHandle make_kafka_handle(rd_kafka_type_t type, rd_kafka_conf_t* conf,
                              const KafkaProps& props) {
  char errstr[512];
  KafkaProps all{{"log_level", "2"}};
  all.insert(all.end(), props.begin(), props.end());
  for (const auto& [key, value] : all) {
    if (rd_kafka_conf_set(conf, key.c_str(), value.c_str(), errstr, sizeof errstr) !=
        RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      throw std::runtime_error(fmt::format("{}={}: {}", key, value, errstr));
    }
  }
  rd_kafka_t* rk = rd_kafka_new(type, conf, errstr, sizeof errstr);
  if (rk == nullptr) {
    rd_kafka_conf_destroy(conf);
    throw std::runtime_error(errstr);
  }
  return KafkaHandle(rk);
}

}  // namespace idem::test
