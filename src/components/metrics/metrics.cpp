// Metrics: prometheus-cpp families for what is observed as it happens (histograms,
// relay marks, TTL runs) plus a collector that turns Consumer::stats() into counters at
// scrape time, so the consumer's hot path pays nothing for its counters.
#include "idem/metrics/metrics.hpp"

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

namespace idem {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

const prometheus::Histogram::BucketBoundaries kTransactionBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
const prometheus::Histogram::BucketBoundaries kHandlerBuckets = {
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
    0.005,   0.01,     0.025,   0.05,   0.1,     0.25,   1};
// Calls to a remote endpoint: from a few milliseconds on loopback to retries that take
// seconds (the HTTP client's backoff, Retry-After).
const prometheus::Histogram::BucketBoundaries kCallBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
const prometheus::Histogram::BucketBoundaries kBatchBuckets = {1,   10,   50,   100,  250,
                                                               500, 1000, 2500, 5000, 10000};

double seconds(std::chrono::nanoseconds d) {
  return std::chrono::duration<double>(d).count();
}

ClientMetric sample(std::vector<ClientMetric::Label> labels, double value, MetricType type) {
  ClientMetric m;
  m.label = std::move(labels);
  if (type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  return m;
}

// Consumer counters, read from stats() when scraped.
class ConsumerCollector final : public prometheus::Collectable {
 public:
  void add(const Consumer& c, std::string group) {
    std::lock_guard lock(mutex_);
    watched_.emplace_back(&c, std::move(group));
  }
  void remove(const Consumer& c) {
    std::lock_guard lock(mutex_);
    std::erase_if(watched_, [&](const auto& w) { return w.first == &c; });
  }

  std::vector<MetricFamily> Collect() const override {
    struct Def {
      std::string_view name;
      std::string_view help;
      std::uint64_t ConsumerStats::*field;
    };
    static constexpr Def kCounters[] = {
        {metric::kRecordsDelivered, "Records received from Kafka (redeliveries included)",
         &ConsumerStats::delivered},
        {metric::kEventsProcessed, "Handler effects committed", &ConsumerStats::processed},
        {metric::kDuplicatesSkipped, "Records skipped because their event was already processed",
         &ConsumerStats::duplicates},
        {metric::kRetries, "Partition pauses for a retry", &ConsumerStats::retries},
        {metric::kDeadLettersRefused,
         "Dead letters refused for good by the producer or the broker (retried in place)",
         &ConsumerStats::dead_letters_refused},
        {metric::kTransactions, "Database transactions committed", &ConsumerStats::transactions},
        {metric::kOffsetCommits, "Offset commits issued", &ConsumerStats::offset_commits},
        {metric::kOffsetDisagreements,
         "Partitions whose stored offset disagreed with Kafka's committed offset (or the "
         "consumer's position after a reconnect); the store won",
         &ConsumerStats::offset_disagreements},
        {metric::kOffsetRecordsReadAgain,
         "Records read again because the stored offset was behind (a failover, a reset "
         "forward with Kafka's tools)",
         &ConsumerStats::offset_records_read_again},
        {metric::kOffsetRecordsNotReadAgain,
         "Records not read again because the stored offset was ahead of Kafka's committed "
         "offset (a lost offset commit, a reset back with Kafka's tools)",
         &ConsumerStats::offset_records_not_read_again},
    };
    std::vector<MetricFamily> out;
    for (const Def& d : kCounters)
      out.push_back({std::string(d.name), std::string(d.help), MetricType::Counter, {}});
    MetricFamily dlq{std::string(metric::kDeadLettered),
                     "Records acknowledged on a DLQ topic, by reason",
                     MetricType::Counter,
                     {}};
    MetricFamily lag{std::string(metric::kLag),
                     "High watermark minus the next offset to process, per assigned partition",
                     MetricType::Gauge,
                     {}};
    MetricFamily assigned{
        std::string(metric::kAssignedPartitions), "Partitions assigned", MetricType::Gauge, {}};
    MetricFamily route_applied{std::string(metric::kRouteApplied),
                               "Effects committed, per route of a configured sink",
                               MetricType::Counter,
                               {}};
    MetricFamily route_duplicates{std::string(metric::kRouteDuplicates),
                                  "Records skipped as already processed, per route",
                                  MetricType::Counter,
                                  {}};
    MetricFamily route_dlq{std::string(metric::kRouteDeadLettered),
                           "Records acknowledged on a DLQ topic, per route and reason",
                           MetricType::Counter,
                           {}};
    std::lock_guard lock(mutex_);
    for (const auto& [consumer, group] : watched_) {
      const ConsumerStats s = consumer->stats();
      for (std::size_t i = 0; i < std::size(kCounters); ++i) {
        out[i].metric.push_back(sample(
            {{"group", group}}, static_cast<double>(s.*(kCounters[i].field)), MetricType::Counter));
      }
      for (const auto& [reason, n] : s.dead_lettered_by_reason) {
        dlq.metric.push_back(sample({{"group", group}, {"reason", reason}}, static_cast<double>(n),
                                    MetricType::Counter));
      }
      const std::vector<PartitionLag> partitions = consumer->lag();
      for (const PartitionLag& p : partitions) {
        if (p.lag < 0) continue;  // not known yet
        lag.metric.push_back(sample(
            {{"group", group}, {"topic", p.topic}, {"partition", std::to_string(p.partition)}},
            static_cast<double>(p.lag), MetricType::Gauge));
      }
      assigned.metric.push_back(
          sample({{"group", group}}, static_cast<double>(partitions.size()), MetricType::Gauge));
      for (const auto& [route, r] : s.routes) {
        const std::vector<ClientMetric::Label> labels = {{"group", group}, {"route", route}};
        route_applied.metric.push_back(
            sample(labels, static_cast<double>(r.applied), MetricType::Counter));
        route_duplicates.metric.push_back(
            sample(labels, static_cast<double>(r.duplicates), MetricType::Counter));
        for (const auto& [reason, n] : r.dead_lettered_by_reason) {
          route_dlq.metric.push_back(
              sample({{"group", group}, {"route", route}, {"reason", reason}},
                     static_cast<double>(n), MetricType::Counter));
        }
      }
    }
    out.push_back(std::move(route_applied));
    out.push_back(std::move(route_duplicates));
    out.push_back(std::move(route_dlq));
    out.push_back(std::move(dlq));
    out.push_back(std::move(lag));
    out.push_back(std::move(assigned));
    std::erase_if(out, [](const MetricFamily& f) { return f.metric.empty(); });
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<const Consumer*, std::string>> watched_;
};

}  // namespace

void DurationRecorder::record(std::chrono::nanoseconds d) const noexcept {
  try {
    static_cast<prometheus::Histogram*>(histogram_)->Observe(seconds(d));
  } catch (...) {  // Observe only locks a mutex; never let metrics break a handler
  }
}

struct Metrics::Impl {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  ConsumerCollector consumers;
  prometheus::Family<prometheus::Histogram>& transaction_seconds =
      prometheus::BuildHistogram()
          .Name(std::string(metric::kTransactionSeconds))
          .Help("Batch processing from validation to the database commit")
          .Register(*registry);
  prometheus::Family<prometheus::Histogram>& batch_records =
      prometheus::BuildHistogram()
          .Name(std::string(metric::kBatchRecords))
          .Help("Records per batch")
          .Register(*registry);
  prometheus::Family<prometheus::Histogram>& handler_seconds =
      prometheus::BuildHistogram()
          .Name(std::string(metric::kHandlerSeconds))
          .Help("Handler calls, inside the batch transaction")
          .Register(*registry);
  prometheus::Family<prometheus::Histogram>& call_seconds =
      prometheus::BuildHistogram()
          .Name(std::string(metric::kRouteCallSeconds))
          .Help("HTTP calls of a route, from the first attempt to the final answer")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& route_paused =
      prometheus::BuildGauge()
          .Name(std::string(metric::kRoutePaused))
          .Help(
              "1 while every call of the route fails for a reason of the route's own "
              "(401, 403, 404): its calls wait and retry, nothing is dead-lettered")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& relay_published =
      prometheus::BuildCounter()
          .Name(std::string(metric::kRelayPublished))
          .Help("Outbox rows published and marked")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& relay_batches =
      prometheus::BuildCounter()
          .Name(std::string(metric::kRelayBatches))
          .Help("Outbox batches marked")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& relay_resent =
      prometheus::BuildCounter()
          .Name(std::string(metric::kRelayResent))
          .Help("Rows sent again after a failure (same event_id)")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& relay_cleaned =
      prometheus::BuildCounter()
          .Name(std::string(metric::kRelayCleaned))
          .Help("Published outbox rows deleted by retention")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& relay_rejected =
      prometheus::BuildCounter()
          .Name(std::string(metric::kRelayRejected))
          .Help("Outbox rows refused for good by the producer or the broker, set aside")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& relay_rejected_rows =
      prometheus::BuildGauge()
          .Name(std::string(metric::kRelayRejectedRows))
          .Help("Outbox rows in the rejected state, waiting for `idem outbox requeue`")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& relay_backlog =
      prometheus::BuildGauge()
          .Name(std::string(metric::kRelayBacklog))
          .Help("Unpublished outbox rows")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& relay_lag =
      prometheus::BuildGauge()
          .Name(std::string(metric::kRelayLagSeconds))
          .Help("Age of the oldest unpublished outbox row (0 when none)")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& relay_shards =
      prometheus::BuildGauge()
          .Name(std::string(metric::kRelayOwnedShards))
          .Help("Outbox shards this relay publishes")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& relay_replication_waits =
      prometheus::BuildCounter()
          .Name(std::string(metric::kRelayReplicationWaits))
          .Help(
              "Outbox batches that waited for their commits on the standbys before they "
              "were published (relay.publish_after = replicated)")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& relay_replication_wait_seconds =
      prometheus::BuildCounter()
          .Name(std::string(metric::kRelayReplicationWaitSeconds))
          .Help("Time outbox batches waited for their commits on the standbys, summed")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& relay_replication_waiting =
      prometheus::BuildGauge()
          .Name(std::string(metric::kRelayReplicationWaiting))
          .Help(
              "How long the oldest outbox batch still waiting for the standbys has waited "
              "(0 when none waits)")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& ttl_runs = prometheus::BuildCounter()
                                                          .Name(std::string(metric::kTtlRuns))
                                                          .Help("Retention (TTL) runs")
                                                          .Register(*registry);
  prometheus::Family<prometheus::Counter>& ttl_rows =
      prometheus::BuildCounter()
          .Name(std::string(metric::kTtlDeletedRows))
          .Help("Rows deleted by retention (TTL) runs")
          .Register(*registry);
  // RelayProgress carries cumulative values; counters advance by the difference.
  std::mutex relay_mutex;
  std::uint64_t last_resent = 0;
  std::uint64_t last_cleaned = 0;
  std::uint64_t last_replication_waits = 0;
  std::chrono::milliseconds last_replication_wait{0};
};

Metrics::Metrics() : impl_(std::make_unique<Impl>()) {}
Metrics::~Metrics() = default;

void Metrics::watch(const Consumer& consumer, std::string group) {
  impl_->consumers.add(consumer, std::move(group));
}
void Metrics::unwatch(const Consumer& consumer) {
  impl_->consumers.remove(consumer);
}

ConsumerHooks Metrics::instrument(std::string group, ConsumerHooks hooks) {
  prometheus::Histogram& tx =
      impl_->transaction_seconds.Add({{"group", group}}, kTransactionBuckets);
  prometheus::Histogram& size = impl_->batch_records.Add({{"group", group}}, kBatchBuckets);
  hooks.on_batch = [&tx, &size, next = std::move(hooks.on_batch)](const BatchReport& report) {
    size.Observe(static_cast<double>(report.records));
    if (report.committed) tx.Observe(seconds(report.duration));
    if (next) next(report);
  };
  return hooks;
}

DurationRecorder Metrics::handler_recorder(const std::string& group, const std::string& topic) {
  return DurationRecorder(
      &impl_->handler_seconds.Add({{"group", group}, {"topic", topic}}, kHandlerBuckets));
}

DurationRecorder Metrics::call_recorder(const std::string& group, const std::string& route) {
  return DurationRecorder(
      &impl_->call_seconds.Add({{"group", group}, {"route", route}}, kCallBuckets));
}

void Metrics::set_route_paused(const std::string& group, const std::string& route, bool paused) {
  impl_->route_paused.Add({{"group", group}, {"route", route}}).Set(paused ? 1 : 0);
}

RelayObserver Metrics::instrument(RelayObserver observer) {
  Impl& m = *impl_;
  prometheus::Counter& published = m.relay_published.Add({});
  prometheus::Counter& batches = m.relay_batches.Add({});
  prometheus::Counter& rejected = m.relay_rejected.Add({});
  observer.on_step = [&published, &batches, &rejected, next = std::move(observer.on_step)](
                         RelayStep step, std::size_t rows) {
    if (step == RelayStep::Marked) {
      published.Increment(static_cast<double>(rows));
      batches.Increment();
    } else if (step == RelayStep::Rejected) {
      rejected.Increment(static_cast<double>(rows));
    }
    if (next) next(step, rows);
  };
  observer.on_progress = [&m, next = std::move(observer.on_progress)](const RelayProgress& p) {
    {
      std::lock_guard lock(m.relay_mutex);
      m.relay_resent.Add({}).Increment(
          static_cast<double>(p.resent - std::min(p.resent, m.last_resent)));
      m.relay_cleaned.Add({}).Increment(
          static_cast<double>(p.cleaned - std::min(p.cleaned, m.last_cleaned)));
      m.last_resent = std::max(m.last_resent, p.resent);
      m.last_cleaned = std::max(m.last_cleaned, p.cleaned);
      m.relay_replication_waits.Add({}).Increment(static_cast<double>(
          p.replication_waits - std::min(p.replication_waits, m.last_replication_waits)));
      m.relay_replication_wait_seconds.Add({}).Increment(seconds(
          p.replication_wait_total - std::min(p.replication_wait_total, m.last_replication_wait)));
      m.last_replication_waits = std::max(m.last_replication_waits, p.replication_waits);
      m.last_replication_wait = std::max(m.last_replication_wait, p.replication_wait_total);
    }
    m.relay_replication_waiting.Add({}).Set(seconds(p.replication_waiting));
    if (p.backlog >= 0) m.relay_backlog.Add({}).Set(static_cast<double>(p.backlog));
    if (p.rejected_rows >= 0) {
      m.relay_rejected_rows.Add({}).Set(static_cast<double>(p.rejected_rows));
    }
    m.relay_lag.Add({}).Set(p.oldest_unpublished_age
                                ? std::chrono::duration<double>(*p.oldest_unpublished_age).count()
                                : 0);
    m.relay_shards.Add({}).Set(p.owned_shards);
    if (next) next(p);
  };
  return observer;
}

void Metrics::record_ttl_run(std::string_view table, std::uint64_t deleted_rows) {
  const std::map<std::string, std::string> labels = {{"table", std::string(table)}};
  impl_->ttl_runs.Add(labels).Increment();
  impl_->ttl_rows.Add(labels).Increment(static_cast<double>(deleted_rows));
}

std::string Metrics::scrape() const {
  std::vector<MetricFamily> families = impl_->registry->Collect();
  std::vector<MetricFamily> consumers = impl_->consumers.Collect();
  families.insert(families.end(), std::make_move_iterator(consumers.begin()),
                  std::make_move_iterator(consumers.end()));
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace idem
