#include "console/sampler.hpp"

#include <httplib.h>

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "idem/metrics/metrics.hpp"
#include "idem/retention.hpp"

namespace idem::console {

namespace {

using std::chrono::milliseconds;

std::int64_t unix_ms_now() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The value of label `name` in `labels` (the text between the braces), unescaped.
std::optional<std::string> label_value(std::string_view labels, std::string_view name) {
  const std::string key = fmt::format("{}=\"", name);
  std::size_t at = 0;
  while ((at = labels.find(key, at)) != std::string_view::npos) {
    if (at == 0 || labels[at - 1] == ',' || labels[at - 1] == ' ') break;
    at += key.size();
  }
  if (at == std::string_view::npos) return std::nullopt;
  std::string out;
  for (std::size_t i = at + key.size(); i < labels.size(); ++i) {
    if (labels[i] == '\\' && i + 1 < labels.size()) {
      out.push_back(labels[++i] == 'n' ? '\n' : labels[i]);
    } else if (labels[i] == '"') {
      return out;
    } else {
      out.push_back(labels[i]);
    }
  }
  return std::nullopt;
}

nlohmann::json optional_number(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// The RouteCounters field a line of `idem_route_*` adds to; a null field for the paused
// gauge; nullopt for any other metric.
std::optional<double RouteCounters::*> route_counter(std::string_view name) {
  const std::string call(metric::kRouteCallSeconds);
  if (name == metric::kRouteApplied) return &RouteCounters::applied;
  if (name == metric::kRouteDuplicates) return &RouteCounters::duplicates;
  if (name == metric::kRouteDeadLettered) return &RouteCounters::dead_lettered;
  if (name == call + "_sum") return &RouteCounters::call_seconds;
  if (name == call + "_count") return &RouteCounters::calls;
  if (name == metric::kRoutePaused) return nullptr;
  return std::nullopt;
}

// Per route: events applied, skipped and dead-lettered per second and the mean call
// latency since the sample before (`before` null: the first sample, totals only).
nlohmann::json route_rates(const GroupCounters& now, const GroupCounters* before, double dt) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& entry : now.routes) {
    const std::string& name = entry.first;
    const RouteCounters& r = entry.second;  // not a structured binding: the lambda uses it
    const RouteCounters* b = nullptr;
    if (before != nullptr) {
      const auto it = before->routes.find(name);
      if (it != before->routes.end()) b = &it->second;
    }
    // A restarted consumer starts its counters at 0 again: no negative rates.
    const auto rate = [&](double RouteCounters::*f) -> nlohmann::json {
      if (b == nullptr || dt <= 0) return nullptr;
      return std::max(0.0, (r.*f - b->*f) / dt);
    };
    nlohmann::json latency = nullptr;
    if (b != nullptr && r.calls > b->calls)
      latency = (r.call_seconds - b->call_seconds) / (r.calls - b->calls) * 1000.0;
    out.push_back({{"route", name},
                   {"applied_rate", rate(&RouteCounters::applied)},
                   {"duplicate_rate", rate(&RouteCounters::duplicates)},
                   {"dead_letter_rate", rate(&RouteCounters::dead_lettered)},
                   {"call_latency_ms", latency},
                   {"applied", r.applied},
                   {"dead_lettered", r.dead_lettered},
                   {"paused", r.paused}});
  }
  return out;
}

}  // namespace

void add_counters(std::string_view text, std::map<std::string, GroupCounters>& out) {
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const std::size_t brace = line.find('{');
    const std::size_t close = line.rfind('}');
    if (brace == std::string_view::npos || close == std::string_view::npos || close < brace)
      continue;
    const std::string_view name = line.substr(0, brace);
    double GroupCounters::*field = nullptr;
    if (name == metric::kEventsProcessed) field = &GroupCounters::processed;
    if (name == metric::kDuplicatesSkipped) field = &GroupCounters::duplicates;
    if (name == metric::kDeadLettered) field = &GroupCounters::dead_lettered;
    const auto route_field = route_counter(name);
    if (field == nullptr && !route_field) continue;
    const std::string_view labels = line.substr(brace + 1, close - brace - 1);
    const auto group = label_value(labels, "group");
    if (!group) continue;
    std::string_view rest = line.substr(close + 1);
    rest.remove_prefix(std::min(rest.find_first_not_of(' '), rest.size()));
    const std::string number(rest.substr(0, rest.find(' ')));
    char* parsed_end = nullptr;
    const double value = std::strtod(number.c_str(), &parsed_end);
    if (parsed_end == number.c_str()) continue;
    if (field != nullptr) {
      out[*group].*field += value;
      continue;
    }
    const auto route = label_value(labels, "route");
    if (!route) continue;
    RouteCounters& r = out[*group].routes[*route];
    if (*route_field == nullptr) {
      r.paused = r.paused || value > 0;
    } else {
      r.** route_field += value;
    }
  }
}

Sampler::Sampler(KafkaView& kafka, StoreAccess& store, SamplerOptions options)
    : kafka_(kafka), store_(store), options_(std::move(options)) {
  thread_ = std::thread([this] { run(); });
}

Sampler::~Sampler() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

nlohmann::json Sampler::overview() {
  std::unique_lock lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  const bool was_idle = now - last_request_ > options_.idle_after;
  last_request_ = now;
  if (was_idle || samples_ == 0) {
    wake_.notify_all();
    const std::uint64_t seen = samples_;
    sampled_.wait_for(lock, std::chrono::seconds(10), [&] { return samples_ > seen || stop_; });
  }
  return latest_;
}

void Sampler::run() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    const bool idle = std::chrono::steady_clock::now() - last_request_ > options_.idle_after;
    if (idle) {
      wake_.wait(lock, [&] {
        return stop_ || std::chrono::steady_clock::now() - last_request_ <= options_.idle_after;
      });
      if (stop_) break;
    }
    lock.unlock();
    sample_once();
    lock.lock();
    wake_.wait_for(lock, options_.refresh, [&] { return stop_; });
  }
}

std::map<std::string, GroupCounters> Sampler::scrape_counters(std::string& errors) {
  std::map<std::string, GroupCounters> counters;
  if (options_.local_metrics) add_counters(options_.local_metrics(), counters);
  for (const std::string& target : options_.scrape) {
    const auto colon = target.rfind(':');
    httplib::Client client(target.substr(0, colon), std::atoi(target.c_str() + colon + 1));
    client.set_connection_timeout(1, 0);
    client.set_read_timeout(2, 0);
    const auto res = client.Get("/metrics");
    if (!res || res->status != 200) {
      errors += fmt::format("{}{}: no metrics ({})", errors.empty() ? "" : "; ", target,
                            res ? std::to_string(res->status) : httplib::to_string(res.error()));
      continue;
    }
    add_counters(res->body, counters);
  }
  return counters;
}

std::vector<std::string> Sampler::groups_to_show(
    const std::map<std::string, GroupCounters>& counters) {
  std::set<std::string> groups(options_.groups.begin(), options_.groups.end());
  for (const auto& [group, c] : counters) groups.insert(group);
  try {
    // Every consumer declares its dedup retention per group (cheap: one small table).
    for (const auto& d : store_.with([](Store& s) { return dedup_retention_declarations(s); }))
      groups.insert(d.consumer_group);
  } catch (const std::exception&) {
    // The store is shown as unreachable on the dedup page; Kafka's numbers still count.
  }
  return {groups.begin(), groups.end()};
}

void Sampler::sample_once() {
  std::string errors;
  const auto counters = scrape_counters(errors);
  const auto groups = groups_to_show(counters);
  std::vector<TopicInfo> topics;
  try {
    topics = kafka_.topics();
  } catch (const std::exception& e) {
    errors += fmt::format("{}{}", errors.empty() ? "" : "; ", e.what());
  }
  const auto now = std::chrono::steady_clock::now();
  const std::int64_t t_ms = unix_ms_now();
  nlohmann::json out_groups = nlohmann::json::array();
  for (const std::string& group : groups) {
    const GroupLag lag = kafka_.group_lag(group, topics);
    History& h = history_[group];
    Point point;
    point.t_ms = t_ms;
    nlohmann::json partitions = nlohmann::json::array();
    std::optional<std::int64_t> oldest_ms;
    std::set<std::string> group_topics;
    for (const PartitionLag& p : lag.partitions) {
      point.lag += p.lag;
      group_topics.insert(p.topic);
      nlohmann::json age = nullptr;
      if (p.oldest_unprocessed_age) {
        age = p.oldest_unprocessed_age->count();
        oldest_ms = std::max(oldest_ms.value_or(0), p.oldest_unprocessed_age->count());
      }
      partitions.push_back({{"topic", p.topic},
                            {"partition", p.partition},
                            {"committed", p.committed},
                            {"end", p.end},
                            {"lag", p.lag},
                            {"oldest_unprocessed_age_ms", age}});
    }
    const auto c = counters.find(group);
    if (c != counters.end()) {
      const double dt = std::chrono::duration<double>(now - h.last_at).count();
      h.routes = route_rates(c->second, h.last_counters ? &*h.last_counters : nullptr, dt);
      if (h.last_counters) {
        if (dt > 0) {
          // A restarted consumer starts its counters at 0 again: no negative rates.
          const auto rate = [&](double a, double b) { return std::max(0.0, (a - b) / dt); };
          point.processed_rate = rate(c->second.processed, h.last_counters->processed);
          point.duplicate_rate = rate(c->second.duplicates, h.last_counters->duplicates);
          point.dead_letter_rate = rate(c->second.dead_lettered, h.last_counters->dead_lettered);
        }
      }
      h.last_counters = c->second;
      h.last_at = now;
    }
    h.points.push_back(point);
    while (!h.points.empty() && h.points.front().t_ms < t_ms - options_.window.count())
      h.points.pop_front();
    nlohmann::json history = nlohmann::json::array();
    for (const Point& p : h.points) {
      history.push_back({p.t_ms, p.lag, optional_number(p.processed_rate),
                         optional_number(p.duplicate_rate), optional_number(p.dead_letter_rate)});
    }
    nlohmann::json totals = nullptr;
    if (c != counters.end()) {
      totals = {{"processed", c->second.processed},
                {"duplicates", c->second.duplicates},
                {"dead_lettered", c->second.dead_lettered}};
    }
    out_groups.push_back({{"group", group},
                          {"state", lag.state},
                          {"members", lag.members},
                          {"topics", group_topics},
                          {"partitions", std::move(partitions)},
                          {"lag", point.lag},
                          {"oldest_unprocessed_age_ms",
                           oldest_ms ? nlohmann::json(*oldest_ms) : nlohmann::json(nullptr)},
                          {"counters", std::move(totals)},
                          {"routes", h.routes},
                          {"history", std::move(history)},
                          {"error", lag.error}});
  }
  nlohmann::json snapshot = {
      {"sampled_at_ms", t_ms},
      {"refresh_ms", options_.refresh.count()},
      {"metrics_sources", options_.scrape.size() + (options_.local_metrics ? 1 : 0)},
      {"groups", std::move(out_groups)},
      {"error", errors}};
  std::lock_guard lock(mutex_);
  latest_ = std::move(snapshot);
  ++samples_;
  sampled_.notify_all();
}

}  // namespace idem::console
