#pragma once
// The loader's list of problems, shared by its layers (config_loader.cpp) and the schema
// that applies the settings (config_schema.cpp): every problem is collected before the
// loader throws, each naming its key and where the value came from.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "idem/config.hpp"

namespace idem::detail {

class Problems {
 public:
  void add(std::string key, ConfigOrigin origin, std::string message) {
    list_.push_back({std::move(key), std::move(origin), std::move(message)});
  }
  [[nodiscard]] bool empty() const noexcept { return list_.empty(); }
  std::vector<ConfigProblem> take() { return std::move(list_); }

 private:
  std::vector<ConfigProblem> list_;
};

/// The core's own keys (core_keys.cpp): store, postgres, consumer, relay, log, tracing,
/// dedup, maintenance, dlq.
void declare_core_keys(SectionKeys<Config>& keys);
/// `postgres.*`: libpq parameters applied on top of store.url (and so PG* variables).
struct PostgresParams {
  std::map<std::string, std::string, std::less<>> values;  ///< parameter -> value, set ones
};
void declare_postgres_keys(SectionKeys<PostgresParams>& keys);

/// The pass-through `kafka.*` keys: checked against librdkafka, `kafka.bootstrap.servers`
/// into Config::bootstrap_servers, the others into Config::kafka.
void apply_kafka_properties(const Settings& settings, Config& config, Problems& problems);

/// Prefix of the librdkafka pass-through keys.
inline constexpr std::string_view kKafkaPrefix = "kafka.";

/// `IDEM_` + name in upper case with dots as underscores.
[[nodiscard]] std::string env_name_of(std::string_view key);

}  // namespace idem::detail
