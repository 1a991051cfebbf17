#pragma once
// Samples every group's lag (Kafka) and throughput (the consumers' /metrics) every
// `refresh`, and keeps the last `window` of samples for the charts. It samples only
// while someone looks: a page polls overview(), and after `idle_after` without a call the
// thread sleeps until the next one, so a console nobody has open costs nothing.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "console/kafka_view.hpp"
#include "console/store_access.hpp"

namespace idem::console {

struct SamplerOptions {
  std::chrono::milliseconds refresh{2000};
  std::chrono::milliseconds window = std::chrono::minutes(10);
  std::chrono::milliseconds idle_after = std::chrono::seconds(30);
  std::vector<std::string> groups;  ///< shown besides the store's
  std::vector<std::string> scrape;  ///< host:port of admin servers serving /metrics
  /// The process's own metrics in Prometheus text (a console inside a consumer); may be empty.
  std::function<std::string()> local_metrics;
};

/// Counters of one route of a configured sink (`idem_route_*`), summed over every source.
struct RouteCounters {
  double applied = 0;
  double duplicates = 0;
  double dead_lettered = 0;
  double call_seconds = 0;  ///< the call-latency histogram's sum
  double calls = 0;         ///< and its count
  bool paused = false;      ///< any source says so
};

/// Counters of one group, summed over every metrics source.
struct GroupCounters {
  double processed = 0;
  double duplicates = 0;
  double dead_lettered = 0;
  std::map<std::string, RouteCounters> routes;  ///< by `route` label
};

/// Sums the three consumer counters per `group` label in Prometheus text, and the route
/// counters per `group` and `route`.
void add_counters(std::string_view prometheus_text, std::map<std::string, GroupCounters>& out);

class Sampler {
 public:
  Sampler(KafkaView& kafka, StoreAccess& store, SamplerOptions options);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  /// The latest sample of every group with its history, as the page shows it. Wakes the
  /// sampler; the first call after a pause waits (up to a few seconds) for a fresh sample.
  [[nodiscard]] nlohmann::json overview();

 private:
  struct Point {
    std::int64_t t_ms = 0;
    std::int64_t lag = 0;
    std::optional<double> processed_rate, duplicate_rate, dead_letter_rate;
  };
  struct History {
    std::deque<Point> points;
    nlohmann::json routes = nlohmann::json::array();  ///< the last sample's per-route rates
    std::optional<GroupCounters> last_counters;
    std::chrono::steady_clock::time_point last_at{};
  };

  void run();
  void sample_once();
  std::vector<std::string> groups_to_show(const std::map<std::string, GroupCounters>& counters);
  std::map<std::string, GroupCounters> scrape_counters(std::string& errors);

  KafkaView& kafka_;
  StoreAccess& store_;
  SamplerOptions options_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable sampled_;
  bool stop_ = false;
  std::uint64_t samples_ = 0;
  std::chrono::steady_clock::time_point last_request_{};
  nlohmann::json latest_;
  std::map<std::string, History> history_;  // only the sampler thread touches it
  std::thread thread_;
};

}  // namespace idem::console
