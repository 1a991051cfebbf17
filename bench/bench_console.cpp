// A consumer with the web console on its admin port (admin.console) that nobody
// has open, against the same consumer with the plain admin server, in the same run.
//
//   off: idem::Consumer, Metrics::watch, an AdminServer on 127.0.0.1:0, scraped over HTTP
//        every second (as Prometheus would).
//   on:  the same, but a Console with admin_metrics serves that port: /metrics, /healthz
//        and /readyz as before, the pages and the API besides; its sampler is idle
//        because no page polls it (the claim under test: no cost when nobody looks).
//
// Runs alternate off/on `--rounds` times on fresh groups over the same topic; the report
// gives each round's ratio, the best and the spread.
//
//   idem_bench_console [--events N] [--batch B] [--rounds R] [--partitions P]
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench_support.hpp"
#include "idem/console/console.hpp"
#include "idem/devtools/dev_broker.hpp"
#include "idem/metrics/metrics.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/schema.hpp"
#include "support/kafka_test_producer.hpp"

namespace {

using namespace std::chrono_literals;

using Options = idem::bench::OnOffOptions;

std::string store_url(int round, bool on) {
  const auto path =
      std::filesystem::temp_directory_path() /
      fmt::format("idem-bench-console-{}-{}-{}.db", ::getpid(), round, on ? "on" : "off");
  return "sqlite://" + path.string();
}

double run(const std::string& bootstrap, const std::string& topic, const Options& o, bool on,
           int round) {
  const std::string url = store_url(round, on);
  {
    auto store = idem::open_store(url);
    static_cast<void>(store->migrate());
    idem::migrate_reference_system(*store);
  }
  const auto config = idem::bench::consumer_config(
      bootstrap, topic, fmt::format("bench-console-{}-{}", round, on ? "on" : "off"), o.batch);
  idem::Metrics metrics;
  std::unique_ptr<idem::AdminServer> admin;
  std::unique_ptr<idem::Console> console;
  std::atomic<bool> scraping{true};
  std::thread scraper;
  std::size_t scrapes = 0;
  const double rate = idem::bench::timed_pass(config, url, o.events, [&](idem::Consumer& c) {
    c.on<idem::OrderConfirmed>(topic, [](const idem::OrderConfirmed&, const idem::RecordInfo&,
                                         idem::Transaction&) { return idem::Outcome::Done; });
    metrics.watch(c, config.group_id);
    int port = 0;
    if (on) {
      idem::ConsoleOptions options;
      options.listen = "127.0.0.1:0";
      options.kafka = idem::DlqConnection{bootstrap, {}, 10s};
      options.store_url = url;
      options.groups = {config.group_id};
      options.admin_metrics = &metrics;
      console = std::make_unique<idem::Console>(std::move(options));
      port = console->port();
    } else {
      admin = std::make_unique<idem::AdminServer>("127.0.0.1:0", metrics);
      port = admin->port();
    }
    scraper = std::thread([&, port] {
      httplib::Client http("127.0.0.1", port);
      while (scraping.load()) {
        if (auto res = http.Get("/metrics"); res && res->status == 200) ++scrapes;
        std::this_thread::sleep_for(1s);  // a Prometheus scrape interval, shortened
      }
    });
  });
  scraping.store(false);
  scraper.join();
  console.reset();
  admin.reset();
  std::printf("  round %d %-3s: %.0f events/s (scrapes %zu)\n", round, on ? "on" : "off", rate,
              scrapes);
  std::fflush(stdout);
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = idem::bench::parse_on_off_options(argc, argv, 12);
  idem::DevBroker broker;
  const std::string topic = "bench-console";
  broker.create_topic(topic, o.partitions);
  broker.create_topic(topic + ".dlq", 1);
  for (int p = 0; p < o.partitions; ++p) {
    static_cast<void>(idem::test::produce_order_events(
        broker.bootstrap_servers(), topic, static_cast<int>(o.events / o.partitions), p));
  }
  const std::uint64_t events = o.events / o.partitions * o.partitions;
  std::printf(
      "consumer throughput, admin.console on vs off: %llu events, batch %zu, %d "
      "partitions, SQLite\n",
      static_cast<unsigned long long>(events), o.batch, o.partitions);
  Options run_options = o;
  run_options.events = events;
  std::vector<double> ratios;
  double best_off = 0;
  double best_on = 0;
  for (int round = 1; round <= o.rounds; ++round) {
    const bool on_first = round % 2 == 0;  // a slow phase of the machine hits both
    double off = 0;
    double on = 0;
    for (const bool mode : {on_first, !on_first}) {
      (mode ? on : off) = run(broker.bootstrap_servers(), topic, run_options, mode, round);
    }
    ratios.push_back(on / off);
    best_off = std::max(best_off, off);
    best_on = std::max(best_on, on);
    std::printf("  round %d on/off = %.3f\n", round, on / off);
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf(
      "best off %.0f events/s, best on %.0f events/s, best/best %.3f; per-round on/off: min %.3f "
      "median %.3f max %.3f\n",
      best_off, best_on, best_on / best_off, ratios.front(), ratios[ratios.size() / 2],
      ratios.back());
  return 0;
}
