// Consumer throughput with metrics and tracing on vs off, in the same run.
//
//   off: idem::Consumer, a handler that adds no SQL (idem's own cost dominates, so any
//        overhead shows), no hooks beyond the timing one.
//   on:  the same plus Metrics::instrument (batch and transaction histograms),
//        Metrics::timed (handler histogram), Metrics::watch (counters and lag at
//        scrape time), an AdminServer scraped over HTTP every 200 ms by a thread of
//        its own (far more often than Prometheus would), and per event the handler
//        reads the record's traceparent and derives the child context it would put
//        on an outgoing HTTP call.
//
// Every record carries a traceparent header in both modes, so the input is identical.
// Runs alternate off/on `--rounds` times on fresh groups over the same topic; the report
// gives each round's ratio, the best and the spread.
//
//   idem_bench_metrics [--events N] [--batch B] [--rounds R] [--partitions P]
//   IDEM_BENCH_PG_DSN / IDEM_TEST_PG_DSN: PostgreSQL store instead of SQLite.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "idem/consumer.hpp"
#include "idem/devtools/dev_broker.hpp"
#include "idem/metrics/metrics.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "idem/tracing.hpp"
#include "support/kafka_test_producer.hpp"

#include "bench_settings.hpp"
#include "bench_support.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

using Options = idem::bench::OnOffOptions;

// Benchmarks read their settings from the environment like the test harness does.
std::string store_url(int round, bool on) {
  for (const char* name : {"IDEM_BENCH_PG_DSN", "IDEM_TEST_PG_DSN"}) {
    const char* v = std::getenv(name);  // NOLINT: bench harness setting, not configuration
    if (v != nullptr && *v != '\0') {
      static const bool durable = [&] {  // figures at fsync on, once per run
        idem::bench::postgres_durable(v);
        std::printf("postgres: %s; build %s; %s\n", idem::bench::postgres_settings(v).c_str(),
                    idem::bench::build_type(), idem::bench::load_line().c_str());
        return true;
      }();
      (void)durable;
      return v;
    }
  }
  const auto path =
      std::filesystem::temp_directory_path() /
      fmt::format("idem-bench-metrics-{}-{}-{}.db", ::getpid(), round, on ? "on" : "off");
  return "sqlite://" + path.string();
}

// The handler of each mode. "on" is what a traced, metered service does per event.
idem::Handler<idem::OrderConfirmed> make_handler(bool on, idem::Metrics& metrics,
                                                 const std::string& group, const std::string& topic,
                                                 std::atomic<std::size_t>& traced) {
  if (!on) {
    return [](const idem::OrderConfirmed&, const idem::RecordInfo&, idem::Transaction&) {
      return idem::Outcome::Done;
    };
  }
  return metrics.timed<idem::OrderConfirmed>(
      group, topic,
      [&traced](const idem::OrderConfirmed&, const idem::RecordInfo& r, idem::Transaction&) {
        if (const auto trace = idem::trace_context(r)) {
          const std::string outgoing = trace->child().traceparent();  // what the HTTP call carries
          traced.fetch_add(outgoing.size() == 55 ? 1 : 0, std::memory_order_relaxed);
        }
        return idem::Outcome::Done;
      });
}

// The per-event work "on" adds, without Kafka or a database in the way: both handlers
// called in a tight loop, plus one on_batch per 1000 events. Stable where the end-to-end
// ratio is at the mercy of the machine's other load.
double added_ns_per_event() {
  constexpr std::size_t kCalls = 2'000'000;
  idem::Metrics metrics;
  std::atomic<std::size_t> traced{0};
  auto store = idem::open_store("sqlite://:memory:");
  auto tx = store->begin();
  const std::string traceparent = idem::TraceContext::new_root().traceparent();
  const std::string id = idem::new_uuid_v7().to_string();
  const idem::RecordHeader headers[] = {{"event_id", id}, {"traceparent", traceparent}};
  idem::RecordInfo record;
  record.topic = "t";
  record.headers = headers;
  const idem::OrderConfirmed event;
  const idem::ConsumerHooks hooks = metrics.instrument("g");
  double ns[2] = {0, 0};
  for (const bool on : {false, true}) {
    const auto handler = make_handler(on, metrics, "g", "t", traced);
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < kCalls; ++i) {
      static_cast<void>(handler(event, record, *tx));
      if (on && i % 1000 == 0) hooks.on_batch({1000, true, std::chrono::milliseconds(5)});
    }
    ns[on ? 1 : 0] = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / kCalls;
  }
  std::printf("per event: handler off %.1f ns, on %.1f ns: metrics+tracing add %.1f ns per event\n",
              ns[0], ns[1], ns[1] - ns[0]);
  return ns[1] - ns[0];
}

double run(const std::string& bootstrap, const std::string& topic, const std::string& url,
           std::size_t batch, std::size_t target, bool on, int round) {
  idem::migrate_reference_system(*idem::open_store(url));
  idem::ConsumerConfig c;
  c.bootstrap_servers = bootstrap;
  c.group_id = fmt::format("bench-metrics-{}-{}", round, on ? "on" : "off");
  c.topics = {topic};
  c.batch_size = batch;
  c.batch_window = 50ms;
  c.kafka = {{"session.timeout.ms", "6000"}, {"heartbeat.interval.ms", "1000"}, {"log_level", "3"}};

  idem::Metrics metrics;
  idem::Consumer* self = nullptr;
  Clock::time_point t0;
  Clock::time_point t1;
  bool started = false;
  bool done = false;
  idem::ConsumerHooks hooks;
  hooks.at = [&](idem::HookPoint p) {
    if (p == idem::HookPoint::BatchPolled && !started) {
      started = true;
      t0 = Clock::now();
    }
    if (p == idem::HookPoint::AfterOffsetCommit && !done && self->stats().delivered >= target) {
      t1 = Clock::now();
      done = true;
      self->stop();
    }
  };
  hooks.log = [](std::string_view) {};
  if (on) hooks = metrics.instrument(c.group_id, std::move(hooks));
  idem::Consumer consumer(c, idem::open_store(url), hooks);
  self = &consumer;
  std::atomic<std::size_t> traced{0};
  const auto handler = make_handler(on, metrics, c.group_id, topic, traced);
  consumer.on<idem::OrderConfirmed>(topic, handler);

  std::unique_ptr<idem::AdminServer> admin;
  std::atomic<bool> scraping{on};
  std::size_t scrapes = 0;
  std::thread scraper;
  if (on) {
    metrics.watch(consumer, c.group_id);
    admin = std::make_unique<idem::AdminServer>("127.0.0.1:0", metrics);
    scraper = std::thread([&, port = admin->port()] {
      httplib::Client http("127.0.0.1", port);
      while (scraping.load()) {
        if (auto res = http.Get("/metrics"); res && res->status == 200) ++scrapes;
        std::this_thread::sleep_for(200ms);  // the scrape interval being simulated
      }
    });
  }
  consumer.run();
  scraping.store(false);
  if (scraper.joinable()) scraper.join();
  if (on) metrics.unwatch(consumer);
  const idem::ConsumerStats s = consumer.stats();
  const double seconds = std::chrono::duration<double>(t1 - t0).count();
  const double rate = static_cast<double>(s.delivered) / seconds;
  std::printf("  round %d %-3s: %zu events in %.2f s = %.0f events/s (processed %llu dup %llu%s)\n",
              round, on ? "on" : "off", static_cast<std::size_t>(s.delivered), seconds, rate,
              static_cast<unsigned long long>(s.processed),
              static_cast<unsigned long long>(s.duplicates),
              on ? fmt::format(", traced {}, scrapes {}", traced.load(), scrapes).c_str() : "");
  std::fflush(stdout);
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = idem::bench::parse_on_off_options(argc, argv, 24);
  idem::DevBroker broker;
  const std::string topic = "bench-metrics";
  broker.create_topic(topic, o.partitions);
  broker.create_topic(topic + ".dlq", 1);

  // N events, 10% resends, each with a traceparent.
  {
    idem::test::KafkaTestProducer producer(broker.bootstrap_servers());
    std::vector<idem::OrderConfirmed> born;
    for (std::size_t i = 0; i < o.events; ++i) {
      idem::OrderConfirmed e;
      if (!born.empty() && i % 10 == 9) {
        e = born[i % born.size()];
      } else {
        e.event_id = idem::new_uuid_v7();
        e.occurred_at = std::chrono::time_point_cast<std::chrono::microseconds>(
            std::chrono::system_clock::now());
        e.order_id = static_cast<std::int64_t>(i + 1);
        e.customer_id = 7;
        e.total_amount = idem::Amount::from_hundredths(1999);
        born.push_back(e);
      }
      producer.send({topic,
                     std::to_string(e.order_id),
                     idem::to_json(e),
                     {{"event_id", e.event_id.to_string()},
                      {"traceparent", idem::TraceContext::new_root().traceparent()}},
                     static_cast<std::int32_t>(e.order_id % o.partitions)});
    }
    producer.flush(std::chrono::minutes(5));
  }
  const std::string backend = store_url(0, false).starts_with("sqlite") ? "SQLite" : "PostgreSQL";
  std::printf(
      "consumer throughput, metrics+tracing on vs off: %zu events, batch %zu, %d partitions, %s\n",
      o.events, o.batch, o.partitions, backend.c_str());

  std::vector<double> ratios;
  double best_off = 0;
  double best_on = 0;
  for (int round = 1; round <= o.rounds; ++round) {
    // Alternate which mode goes first, so a slow phase of the machine hits both.
    const bool on_first = round % 2 == 0;
    double off = 0;
    double on = 0;
    for (const bool mode : {on_first, !on_first}) {
      const double rate = run(broker.bootstrap_servers(), topic, store_url(round, mode), o.batch,
                              o.events, mode, round);
      (mode ? on : off) = rate;
    }
    ratios.push_back(on / off);
    best_off = std::max(best_off, off);
    best_on = std::max(best_on, on);
    std::printf("  round %d on/off = %.3f\n", round, on / off);
  }
  std::sort(ratios.begin(), ratios.end());
  const double added = added_ns_per_event();
  std::printf("at the best 'off' rate (%.0f ns per event) that is %.2f%% of an event's time\n",
              1e9 / best_off, 100.0 * added / (1e9 / best_off));
  std::printf(
      "best off %.0f events/s, best on %.0f events/s, best/best %.3f; per-round on/off: min %.3f "
      "median %.3f max %.3f\n",
      best_off, best_on, best_on / best_off, ratios.front(), ratios[ratios.size() / 2],
      ratios.back());
  return 0;
}
