// End to end for billing: the whole reference pipeline in one process, with
// three baselines measured in the same run on the same events (bench/E2E-RESULTS.md):
//
//   e2e       OrderService::confirm (UPDATE orders + outbox enqueue, one transaction per
//             order) on the main thread -> idem::Relay on a thread -> in-process
//             DevBroker -> idem::Consumer with billing_handler on a thread, which charges
//             the in-process PaymentProvider over loopback HTTP and writes the ledger row.
//             events/s = events / (first enqueue .. last ledger row committed);
//             latency per event = enqueue committed .. its ledger row committed, both
//             taken by this program (steady clock), saturated (orders confirmed as fast
//             as they go, so it holds queueing) and paced (200 more orders at 25/s).
//   provider  the billing handler's HTTP client making the same charges in a loop
//   billing   idem::Consumer with billing_handler alone over the same topic, charging a
//             second provider with an empty store (new charges), nothing else running
//   count     idem::Consumer with count_handler over the same topic (dedup + count row)
//   relay     idem::Relay alone over the same outbox rows (reset to unpublished); its
//             ~1 s start-up (producer connect, shard locks) is inside the figure
//
// Consumer batch sizes 1, 100, 1000. Usage: idem_bench_e2e [EVENTS_BATCH1 [EVENTS_OTHER]]
// (defaults 2000 and 20000). SQLite always (files under /tmp); PostgreSQL when
// IDEM_TEST_PG_DSN is set (scripts/with-postgres.sh), a fresh database per run.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

#include "bench_settings.hpp"
#include "bench_support.hpp"
#include "idem/consumer.hpp"
#include "idem/devtools/dev_broker.hpp"
#include "idem/http/idempotent_client.hpp"
#include "idem/outbox.hpp"
#include "idem/reference/billing.hpp"
#include "idem/reference/count_handler.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/order_service.hpp"
#include "idem/reference/payment_provider.hpp"
#include "idem/reference/schema.hpp"
#include "idem/relay.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "support/postgres_test_db.hpp"

namespace {

using idem::bench::consumer_config;
using idem::bench::percentile_ms;
using idem::bench::seconds_between;
using idem::bench::SteadyClock;
using idem::bench::timed_pass;
using namespace std::chrono_literals;

/// Idle relay poll. The production default is 500 ms (PostgreSQL's LISTEN wakes the relay
/// earlier; SQLite has no wake-up), which would put up to 500 ms of sleep into the
/// latency of the first event after every idle moment.
constexpr auto kRelayPoll = 20ms;

/// After the saturated run, this many more orders are confirmed one every kPacedInterval
/// (25/s, below every measured end-to-end rate), for the latency of an unloaded pipeline.
constexpr std::int64_t kPacedEvents = 200;
constexpr auto kPacedInterval = 40ms;

/// Where one run's two databases live (the consumer's, shared with the order service
/// and the relay as in the reference system; and the provider's own).
struct Databases {
  std::string app;
  std::string provider;
  std::string provider_for_baseline;  ///< a second, empty provider store
};

struct Backend {
  std::string name;
  std::function<Databases(int seq)> fresh;
};

Backend sqlite_backend() {
  return {"sqlite", [](int seq) {
            const auto dir = std::filesystem::temp_directory_path();
            const std::string base = fmt::format("idem-bench-e2e-{}-{}", ::getpid(), seq);
            return Databases{"sqlite://" + (dir / (base + ".db")).string(),
                             "sqlite://" + (dir / (base + "-provider.db")).string(),
                             "sqlite://" + (dir / (base + "-provider2.db")).string()};
          }};
}

Backend postgres_backend() {
  return {"postgres", [](int) {
            return Databases{idem::test::fresh_postgres_url(), idem::test::fresh_postgres_url(),
                             idem::test::fresh_postgres_url()};
          }};
}

void remove_sqlite_files(const Databases& dbs) {
  for (const std::string& url : {dbs.app, dbs.provider, dbs.provider_for_baseline}) {
    if (url.rfind("sqlite://", 0) != 0) continue;
    const std::string path = url.substr(9);
    for (const char* suffix : {"", "-wal", "-shm", "-relay.lock"}) {
      std::error_code ec;
      std::filesystem::remove(path + suffix, ec);
    }
  }
}

std::int64_t scalar(idem::Store& store, std::string_view sql) {
  auto tx = store.begin();
  const idem::Rows rows = tx->execute(sql);
  tx->rollback();
  return rows.empty() || rows[0].is_null(0) ? 0 : rows[0].int64(0);
}

struct RunResult {
  std::size_t batch = 0;
  std::int64_t events = 0;
  double e2e_s = 0;
  double enqueue_s = 0;  ///< first enqueue .. last enqueue committed (concurrent with the rest)
  double p50_ms = 0, p99_ms = 0, max_ms = 0;  ///< saturated: enqueue as fast as it goes
  double paced_p50_ms = 0, paced_p99_ms = 0;  ///< kPacedEvents at kPacedInterval
  double billing_per_s = 0;
  double provider_per_s = 0;
  double consumer_per_s = 0;
  double relay_per_s = 0;
  std::string check;  ///< "ok" or what did not add up

  [[nodiscard]] double e2e_per_s() const { return static_cast<double>(events) / e2e_s; }
};

/// The consumer with count_handler (dedup mark + one count row per event).
double count_baseline(const std::string& bootstrap, const std::string& topic,
                      const std::string& url, std::size_t batch, std::uint64_t expected, int seq) {
  return timed_pass(consumer_config(bootstrap, topic, fmt::format("count-e2e-{}", seq), batch), url,
                    expected, [&](idem::Consumer& c) {
                      c.on<idem::OrderConfirmed>(topic,
                                                 idem::count_handler<idem::OrderConfirmed>());
                    });
}

/// The billing consumer alone: billing_handler over the same records, charging a second
/// provider with an empty store (so the charges are new, not replays), with nothing
/// else running.
double billing_baseline(const std::string& bootstrap, const std::string& topic,
                        const std::string& url, const std::string& provider_store,
                        std::size_t batch, std::uint64_t expected, int seq) {
  idem::http::PaymentProvider provider(idem::open_store(provider_store));
  provider.start("127.0.0.1", 0);
  idem::BillingConfig bc;
  bc.provider_url = provider.base_url();
  return timed_pass(
      consumer_config(bootstrap, topic, fmt::format("billing-alone-e2e-{}", seq), batch), url,
      expected,
      [&](idem::Consumer& c) { c.on<idem::OrderConfirmed>(topic, idem::billing_handler(bc)); });
}

/// The billing handler's client alone: `n` new charges (fresh keys) in a loop.
double provider_baseline(const std::string& provider_url, std::int64_t n,
                         std::int64_t first_order) {
  idem::http::IdempotentClient client;
  const std::string url = provider_url + "/payments/charge";
  const auto t0 = SteadyClock::now();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::string body = fmt::format(R"({{"order_id":{},"amount":"10.50"}})", first_order + i);
    const auto r = client.post_json(url, body, idem::new_uuid_v7().to_string());
    if (!r.ok())
      std::fprintf(stderr, "provider baseline: HTTP %ld %s\n", r.http_status, r.error.c_str());
  }
  return static_cast<double>(n) / seconds_between(t0, SteadyClock::now());
}

idem::RelayConfig relay_config(const std::string& url, const std::string& bootstrap) {
  idem::RelayConfig c;
  c.store_url = url;
  c.producer.bootstrap_servers = bootstrap;
  c.producer.kafka = {{"log_level", "2"}};
  c.poll_interval = kRelayPoll;
  c.progress_interval = 0ms;
  c.cleanup_interval = 0ms;
  return c;
}

RunResult run_once(idem::DevBroker& broker, const Backend& backend, std::size_t batch,
                   std::int64_t n, int seq) {
  RunResult r;
  r.batch = batch;
  r.events = n;
  const Databases dbs = backend.fresh(seq);
  const std::string topic = fmt::format("order-confirmed-e2e-{}", seq);
  broker.create_topic(topic, 3);
  broker.create_topic(topic + ".dlq", 1);

  // Order 1 (the warm-up event), 2..n+1 (saturated), then the paced ones; created
  // before the clock starts.
  const std::int64_t total = n + 1 + kPacedEvents;
  auto store = idem::open_store(dbs.app);
  idem::migrate_reference_system(*store);
  for (std::int64_t id = 0; id < total;) {
    auto tx = store->begin();
    for (int k = 0; k < 1000 && id < total; ++k, ++id) {
      tx->execute(
          "INSERT INTO orders(id, customer_id, total_amount, status, created_at) "
          "VALUES ($1, $2, $3, 'created', '2026-11-30T00:00:00Z')",
          id + 1, 1 + id % 1000, "10.50");
    }
    tx->commit();
  }

  idem::http::PaymentProvider provider(idem::open_store(dbs.provider));
  provider.start("127.0.0.1", 0);

  // Index = order id - 1; written by one thread each, read after both joined.
  std::vector<SteadyClock::time_point> enqueued(static_cast<std::size_t>(total));
  std::vector<SteadyClock::time_point> recorded(static_cast<std::size_t>(total));

  auto relay = std::make_unique<idem::Relay>(relay_config(dbs.app, broker.bootstrap_servers()));
  std::thread relay_thread([&] { relay->run(); });

  const idem::ConsumerConfig cc = consumer_config(
      broker.bootstrap_servers(), topic, fmt::format("{}-e2e-{}", idem::kBillingGroup, seq), batch);
  idem::BillingConfig bc;
  bc.provider_url = provider.base_url();
  auto billing = idem::billing_handler(bc);
  std::vector<std::int64_t> in_batch;  // order ids the open transaction charged
  std::atomic<std::int64_t> committed{0};
  idem::Consumer* consumer_ptr = nullptr;
  idem::ConsumerHooks hooks;
  hooks.at = [&](idem::HookPoint p) {
    if (p == idem::HookPoint::BatchPolled) in_batch.clear();
    if (p == idem::HookPoint::AfterDbCommit) {
      const auto now = SteadyClock::now();
      for (const std::int64_t order : in_batch) recorded[static_cast<std::size_t>(order - 1)] = now;
      committed += static_cast<std::int64_t>(in_batch.size());
      in_batch.clear();
      if (committed.load() >= total) consumer_ptr->stop();
    }
  };
  idem::Consumer consumer(cc, idem::open_store(dbs.app), hooks);
  consumer_ptr = &consumer;
  consumer.on<idem::OrderConfirmed>(
      topic,
      [&](const idem::OrderConfirmed& e, const idem::RecordInfo& info, idem::Transaction& tx) {
        const idem::Outcome o = billing(e, info, tx);
        if (o == idem::Outcome::Done) in_batch.push_back(e.order_id);
        return o;
      });
  std::thread consumer_thread([&] { consumer.run(); });

  idem::Outbox outbox;
  idem::OrderServiceConfig oc;
  oc.topic = topic;
  idem::OrderService orders(outbox, oc);
  const auto wait_for = [&](std::int64_t count, std::chrono::seconds limit) {
    const auto deadline = SteadyClock::now() + limit;
    while (committed.load() < count && SteadyClock::now() < deadline)
      std::this_thread::sleep_for(1ms);
    return committed.load() >= count;
  };
  // Warm-up: one event through the whole pipeline (group joined, producer connected,
  // HTTP connection open) before the clock starts.
  orders.confirm(*store, 1);
  if (!wait_for(1, 60s)) r.check = "warm-up event never reached the ledger; ";

  const auto t0 = SteadyClock::now();
  for (std::int64_t id = 2; id <= n + 1; ++id) {
    if (!orders.confirm(*store, id)) r.check += fmt::format("order {} not confirmed; ", id);
    enqueued[static_cast<std::size_t>(id - 1)] = SteadyClock::now();
  }
  r.enqueue_s = seconds_between(t0, SteadyClock::now());
  bool drained = wait_for(n + 1, 600s);
  const auto t1 = SteadyClock::now();
  auto next = SteadyClock::now();
  for (std::int64_t id = n + 2; drained && id <= total; ++id) {
    std::this_thread::sleep_until(next);
    next += kPacedInterval;
    if (!orders.confirm(*store, id)) r.check += fmt::format("order {} not confirmed; ", id);
    enqueued[static_cast<std::size_t>(id - 1)] = SteadyClock::now();
  }
  drained = drained && wait_for(total, 120s);
  if (!drained) consumer.stop();
  consumer_thread.join();
  relay->request_stop();
  relay_thread.join();
  relay.reset();  // on SQLite it holds the relay lock the baseline relay needs
  r.e2e_s = seconds_between(t0, t1);

  std::vector<double> latencies;
  std::vector<double> paced;
  for (std::size_t i = 1; i < enqueued.size(); ++i) {
    const double ms = std::chrono::duration<double, std::milli>(recorded[i] - enqueued[i]).count();
    (static_cast<std::int64_t>(i) <= n ? latencies : paced).push_back(ms);
  }
  r.p50_ms = percentile_ms(latencies, 0.50);
  r.p99_ms = percentile_ms(latencies, 0.99);
  r.max_ms = percentile_ms(latencies, 1.0);
  r.paced_p50_ms = percentile_ms(paced, 0.50);
  r.paced_p99_ms = percentile_ms(paced, 0.99);

  // Every event charged once and recorded once.
  const std::int64_t ledger = scalar(*store, "SELECT count(*) FROM billing_ledger");
  const std::int64_t ledger_orders =
      scalar(*store, "SELECT count(DISTINCT order_id) FROM billing_ledger");
  const auto summary = provider.summary();
  if (!drained || ledger != total || ledger_orders != total || summary.charges != total ||
      !summary.orders_charged_more_than_once.empty()) {
    r.check += fmt::format("drained {} ledger {} orders {} charges {} (expected {})", drained,
                           ledger, ledger_orders, summary.charges, total);
  }
  if (r.check.empty()) r.check = "ok";

  // Baselines, on the same databases, topic and provider.
  r.consumer_per_s = count_baseline(broker.bootstrap_servers(), topic, dbs.app, batch,
                                    static_cast<std::uint64_t>(total), seq);
  r.billing_per_s =
      billing_baseline(broker.bootstrap_servers(), topic, dbs.app, dbs.provider_for_baseline, batch,
                       static_cast<std::uint64_t>(total), seq);
  {
    auto tx = store->begin();
    tx->execute("UPDATE idem_outbox SET published_at = NULL");
    tx->commit();
    idem::Relay alone(relay_config(dbs.app, broker.bootstrap_servers()));
    const auto t = SteadyClock::now();
    if (!alone.run_until_empty(600s)) r.check += "; relay baseline did not drain";
    r.relay_per_s =
        static_cast<double>(alone.progress().published) / seconds_between(t, SteadyClock::now());
  }
  r.provider_per_s = provider_baseline(provider.base_url(), n, 1'000'000'000);

  provider.stop();
  store.reset();
  remove_sqlite_files(dbs);
  return r;
}

void print(const std::string& backend, int round, const RunResult& r) {
  std::printf(
      "%-8s round %d batch %4zu events %6lld | e2e %7.0f ev/s (%.2f s; enqueue done at %.2f s) "
      "latency saturated p50 %7.1f p99 %7.1f max %7.1f ms, paced p50 %6.1f p99 %6.1f ms | "
      "provider %6.0f/s billing-consumer %6.0f/s count-consumer %7.0f/s relay %7.0f/s | "
      "e2e/provider %.2f e2e/billing %.2f e2e/count %.3f e2e/relay %.3f | %s\n",
      backend.c_str(), round, r.batch, static_cast<long long>(r.events), r.e2e_per_s(), r.e2e_s,
      r.enqueue_s, r.p50_ms, r.p99_ms, r.max_ms, r.paced_p50_ms, r.paced_p99_ms, r.provider_per_s,
      r.billing_per_s, r.consumer_per_s, r.relay_per_s, r.e2e_per_s() / r.provider_per_s,
      r.e2e_per_s() / r.billing_per_s, r.e2e_per_s() / r.consumer_per_s,
      r.e2e_per_s() / r.relay_per_s, r.check.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t n_batch1 = argc > 1 ? std::stoll(argv[1]) : 2000;
  const std::int64_t n_other = argc > 2 ? std::stoll(argv[2]) : 20000;
  const int rounds =
      std::getenv("IDEM_BENCH_ROUNDS") ? std::atoi(std::getenv("IDEM_BENCH_ROUNDS")) : 2;
  std::vector<Backend> backends = {sqlite_backend()};
  std::printf("build %s; %s; sqlite: WAL, synchronous=FULL\n", idem::bench::build_type(),
              idem::bench::load_line().c_str());
  if (const char* dsn = std::getenv("IDEM_TEST_PG_DSN"); dsn != nullptr) {
    // Figures at fsync on: with-postgres.sh starts the server with it off.
    idem::bench::postgres_durable(dsn);
    std::printf("postgres: %s\n", idem::bench::postgres_settings(dsn).c_str());
    backends.push_back(postgres_backend());
  } else {
    std::printf("postgres: skipped (run under scripts/with-postgres.sh)\n");
  }
  idem::DevBroker broker;
  int seq = 0;
  for (int round = 1; round <= rounds; ++round) {
    for (const Backend& backend : backends) {
      for (const std::size_t batch : {std::size_t{1}, std::size_t{100}, std::size_t{1000}}) {
        print(backend.name, round,
              run_once(broker, backend, batch, batch == 1 ? n_batch1 : n_other, ++seq));
      }
    }
  }
  return 0;
}
