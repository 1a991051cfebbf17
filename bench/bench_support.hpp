#pragma once
// What several benchmarks here share: timing, percentiles, the process's memory, and one
// timed idem::Consumer pass over records already in a topic.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "idem/consumer.hpp"
#include "idem/store.hpp"

namespace idem::bench {

using SteadyClock = std::chrono::steady_clock;

/// The flags of the benchmarks that compare a consumer with a feature on and off in
/// rounds over one topic (bench_metrics, bench_console).
struct OnOffOptions {
  std::uint64_t events = 200'000;
  std::size_t batch = 1000;
  int rounds = 3;
  int partitions = 0;
};

/// Parses --events, --batch, --rounds and --partitions (default `partitions`).
inline OnOffOptions parse_on_off_options(int argc, char** argv, int partitions) {
  OnOffOptions o;
  o.partitions = partitions;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--events")
      o.events = std::stoull(value);
    else if (flag == "--batch")
      o.batch = std::stoul(value);
    else if (flag == "--rounds")
      o.rounds = std::stoi(value);
    else if (flag == "--partitions")
      o.partitions = std::stoi(value);
    else
      throw std::runtime_error("unknown flag " + flag);
  }
  return o;
}

inline double seconds_between(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// The `p` quantile (0..1) of `v` (nearest rank below), 0 for none.
inline double percentile_ms(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1));
  return v[i];
}

struct Memory {
  double rss_mib = 0;
  double hwm_mib = 0;
};

/// VmRSS and VmHWM of this process (/proc/self/status).
inline Memory read_memory() {
  Memory m;
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    const auto kib = [&] {
      return std::strtod(line.c_str() + line.find(':') + 1, nullptr) / 1024.0;
    };
    if (line.rfind("VmRSS:", 0) == 0) m.rss_mib = kib();
    if (line.rfind("VmHWM:", 0) == 0) m.hwm_mib = kib();
  }
  return m;
}

/// Group settings for the mock cluster. IDEM_BENCH_FETCH_WAIT_MS sets the consumers'
/// fetch.wait.max.ms (librdkafka default 500): the mock cluster answers an empty fetch
/// only after that wait, even when records arrive meanwhile, which puts up to that long
/// into an idle pipeline's latency.
inline std::vector<std::pair<std::string, std::string>> group_props() {
  std::vector<std::pair<std::string, std::string>> props = {
      {"session.timeout.ms", "6000"}, {"heartbeat.interval.ms", "1000"}, {"log_level", "3"}};
  if (const char* wait = std::getenv("IDEM_BENCH_FETCH_WAIT_MS"))
    props.emplace_back("fetch.wait.max.ms", wait);
  return props;
}

inline ConsumerConfig consumer_config(const std::string& bootstrap, const std::string& topic,
                                      std::string group, std::size_t batch) {
  ConsumerConfig c;
  c.bootstrap_servers = bootstrap;
  c.group_id = std::move(group);
  c.topics = {topic};
  c.batch_size = batch;
  c.kafka = group_props();
  return c;
}

/// CPU time (user and system) of every thread of this process so far.
inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

/// One consumer pass over the `expected` records already in the topic, with the handler
/// `route` installs; events/s from the first polled batch to the offset commit after
/// which `expected` events were processed (group join and produce are excluded).
/// `final_stats`, when given, receives the consumer's stats at the end (redeliveries and
/// retries say whether the pass ran clean); `cpu_seconds`, when given, the CPU time the
/// whole process used over the same span (the consumer and whatever else runs in it).
inline double timed_pass(const ConsumerConfig& config, const std::string& url,
                         std::uint64_t expected, const std::function<void(Consumer&)>& route,
                         ConsumerStats* final_stats = nullptr, double* cpu_seconds = nullptr) {
  Consumer* self = nullptr;
  SteadyClock::time_point t0;
  SteadyClock::time_point t1;
  double cpu0 = 0;
  bool started = false;
  ConsumerHooks hooks;
  hooks.at = [&](HookPoint p) {
    if (p == HookPoint::BatchPolled && !started) {
      started = true;
      t0 = SteadyClock::now();
      cpu0 = process_cpu_seconds();
    }
    if (p == HookPoint::AfterOffsetCommit && self->stats().processed >= expected) {
      t1 = SteadyClock::now();
      if (cpu_seconds != nullptr) *cpu_seconds = process_cpu_seconds() - cpu0;
      self->stop();
    }
  };
  Consumer consumer(config, open_store(url), hooks);
  self = &consumer;
  route(consumer);
  consumer.run();
  const ConsumerStats stats = consumer.stats();
  if (final_stats) *final_stats = stats;
  return static_cast<double>(stats.processed) / seconds_between(t0, t1);
}

}  // namespace idem::bench
