// Billing end to end through the concurrent path (bench/BILLING-RESULTS.md):
// orders already in a topic of `idem dev-broker` (its own process) -> idem::Consumer with
// billing_effect (the charge is the call phase, over loopback HTTP to the in-process
// PaymentProvider; the ledger row and the order update are the apply phase) -> ledger rows
// committed.
//
// Per backend (SQLite synchronous=FULL, the store's default; PostgreSQL with the server's
// fsync on) and per provider latency (ProviderFaults::latency: 0, 10, 100 ms), in one run:
//   effect M     billing_effect with max_in_flight M = 1, 64, 256, 1024
//   configured M the same billing declared in a file (examples/configured/billing.toml:
//                idem::sinks, what `idem consume --config` runs), same M; its check
//                column gives its rate as a share of `effect M` in the same run
//   sequential   the old billing_handler (the charge inside the batch transaction, one
//                order at a time), batch 100
//   ideal        M / latency
//   /limit       orders/s over the run's ceiling: the lowest of the ideal, the same M at
//                latency 0 (the machine's rate with calls but no waiting) and the db limit
//   db limit     the effect handler whose call phase completes at once, M = 1024, on
//                the same apply phase: the database's own limit (latency-independent)
//   paced        1,000 orders/s sent while the consumer runs (latency 10 and 100 ms,
//                M = 1024): p50/p99 from enqueue (the producer's send) to the commit of
//                the transaction holding the order's ledger row
// orders/s = processed / (first polled batch .. the offset commit covering the last);
// every record key is its order id (the billing effect's ordering key), 16 partitions.
// RSS (VmRSS) at the start and the end of the whole run.
//
//   idem_bench_billing [--quick] [--orders N] [--paced-s S] [--latencies 0,10,100]
//                      [--in-flight 1,64,256,1024] [--soak N] [--rounds R]
// --rounds R: `effect M` and `configured M` R times each, alternating (and which goes
// first alternating too), best of each shown (a loaded machine slows one pass or another;
// alternating keeps the ratio fair). Both also give the CPU time this process (consumer,
// HTTP client, provider; not the broker) spent per order, lowest of the rounds: the
// work each does, without the waits for the provider's latency or a CPU other processes
// hold.
// --soak N: instead of the matrix, N passes of one configuration (SQLite, latency 10 ms,
// M 256, one provider for all of them), with RSS after each pass, as is and after
// malloc_trim(0) (what the allocator holds free is then given back): a leak grows both
// pass after pass; a high-water mark of the allocator stops growing.
//   IDEM_TEST_PG_DSN (scripts/with-postgres.sh) adds PostgreSQL, a fresh database per run.
// --quick: 300 orders per run and 2 s paced (a smoke run); the default (full) is 20,000
// orders per run and 10 s paced. Runs whose ideal rate would take longer than ~8 s
// (M = 1 at 10/100 ms, the sequential handler at 10/100 ms) take fewer orders, at
// least 30: the figure is a rate either way.
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench_support.hpp"
#include "idem/consumer.hpp"
#include "idem/reference/billing.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/payment_provider.hpp"
#include "idem/reference/schema.hpp"
#include "idem/sinks/configured_sinks.hpp"
#include "idem/sinks/sink_config.hpp"
#include "idem/store.hpp"
#include "postgres_durable.hpp"
#include "support/consumer_scenario.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/postgres_test_db.hpp"
#include "support/wait.hpp"

namespace {

using namespace idem::bench;  // NOLINT(google-build-using-namespace): this program's toolkit
using namespace std::chrono_literals;

constexpr int kPartitions = 16;
constexpr std::size_t kBatch = 1000;
constexpr double kSecondsPerCappedRun = 8.0;

struct Options {
  std::int64_t orders = 20'000;
  double paced_s = 10;
  std::vector<int> latencies{0, 10, 100};
  std::vector<std::size_t> in_flight{1, 64, 256, 1024};
  int soak = 0;
  int rounds = 1;
  std::vector<std::string> backends{"sqlite", "postgres"};
};

std::vector<std::int64_t> parse_list(const std::string& text) {
  std::vector<std::int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoll(item));
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const auto value = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", flag.c_str());
        std::exit(2);
      }
      return std::string(argv[++i]);
    };
    if (flag == "--quick") {
      o.orders = 300;
      o.paced_s = 2;
    } else if (flag == "--orders") {
      o.orders = std::stoll(value());
    } else if (flag == "--paced-s") {
      o.paced_s = std::stod(value());
    } else if (flag == "--latencies") {
      o.latencies.clear();
      for (auto v : parse_list(value())) o.latencies.push_back(static_cast<int>(v));
    } else if (flag == "--backends") {
      o.backends.clear();
      std::stringstream in(value());
      for (std::string b; std::getline(in, b, ',');) o.backends.push_back(b);
    } else if (flag == "--rounds") {
      o.rounds = std::max(1, std::stoi(value()));
    } else if (flag == "--soak") {
      o.soak = std::stoi(value());
    } else if (flag == "--in-flight") {
      o.in_flight.clear();
      for (auto v : parse_list(value())) o.in_flight.push_back(static_cast<std::size_t>(v));
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      std::exit(2);
    }
  }
  return o;
}

struct Backend {
  std::string name;
  std::string settings;
  std::function<std::string()> fresh;
};

std::string fresh_sqlite() {
  static int seq = 0;
  return fmt::format("sqlite://{}/idem-bench-billing-{}-{}.db",
                     std::filesystem::temp_directory_path().string(), ::getpid(), ++seq);
}

void remove_if_sqlite(const std::string& url) {
  if (url.rfind("sqlite://", 0) != 0) return;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::error_code ec;
    std::filesystem::remove(url.substr(9) + suffix, ec);
  }
}

/// The PostgreSQL settings of the run, after switching the flushes on.
std::string postgres_settings(const std::string& dsn) {
  postgres_durable(dsn);
  std::string out;
  for (const char* name : {"fsync", "full_page_writes", "synchronous_commit", "server_version"})
    out += fmt::format("{}{}={}", out.empty() ? "" : " ", name, pg_show(dsn, name));
  return out;
}

/// A fresh topic holding orders 1..n, each keyed by its order id.
std::string topic_with_orders(idem::test::DevBrokerProcess& broker, std::int64_t n) {
  const std::string topic = idem::test::unique_name("billing-bench");
  broker.create_topic(topic, kPartitions);
  (void)idem::test::produce_keyed_order_events(broker.bootstrap(), topic, static_cast<int>(n),
                                               [](std::int64_t id) { return std::to_string(id); });
  return topic;
}

std::int64_t ledger_rows(const std::string& url) {
  auto store = idem::open_store(url);
  auto tx = store->begin_read();
  const idem::Rows rows = tx->execute("SELECT count(*) FROM billing_ledger");
  tx->commit();
  return rows[0].int64(0);
}

struct Pass {
  std::int64_t orders = 0;
  double per_s = 0;
  double cpu_us_per_order = 0;  // of this whole process: consumer, HTTP client, provider
  std::string check = "ok";
};

/// One consumer pass with `route` over `n` fresh orders, on a fresh billing database.
Pass pass(idem::test::DevBrokerProcess& broker, const Backend& backend, std::int64_t n,
          std::size_t batch, std::size_t max_in_flight,
          const std::function<void(idem::Consumer&, const std::string&)>& route) {
  const std::string topic = topic_with_orders(broker, n);
  const std::string db = backend.fresh();
  idem::migrate_reference_system(*idem::open_store(db));
  idem::ConsumerConfig config =
      consumer_config(broker.bootstrap(), topic, idem::test::unique_name("billing"), batch);
  config.max_in_flight = max_in_flight;
  config.check_topic_retention = false;  // the mock cluster never answers it (a 5 s wait)
  Pass p;
  p.orders = n;
  idem::ConsumerStats stats;
  double cpu_seconds = 0;
  p.per_s = timed_pass(
      config, db, static_cast<std::uint64_t>(n), [&](idem::Consumer& c) { route(c, topic); },
      &stats, &cpu_seconds);
  p.cpu_us_per_order = 1e6 * cpu_seconds / static_cast<double>(std::max<std::int64_t>(1, n));
  const std::int64_t rows = ledger_rows(db);
  if (rows != n) p.check = fmt::format("ledger {} of {}", rows, n);
  // Not failures, but a pass that had them did more than n orders' work: say so.
  const auto n_records = static_cast<std::uint64_t>(n);
  if (stats.delivered > n_records)
    p.check += fmt::format(", {} redelivered", stats.delivered - n_records);
  if (stats.call_retries + stats.retries > 0)
    p.check += fmt::format(", {} call / {} partition retries", stats.call_retries, stats.retries);
  remove_if_sqlite(db);
  return p;
}

/// The effect handler whose call phase does nothing: the apply phase alone.
idem::EffectHandler<idem::OrderConfirmed, idem::BillingCharge> no_call_effect() {
  return {.call =
              [](const idem::OrderConfirmed& e, const idem::RecordInfo&,
                 idem::CallCompletion<idem::BillingCharge> done) {
                done.done(idem::BillingCharge{"pay_" + e.event_id.to_string()});
              },
          .apply = [](const idem::OrderConfirmed& e, const idem::RecordInfo&,
                      const idem::BillingCharge& c,
                      idem::Transaction& tx) { return idem::apply_charge(e, c, tx); },
          .ordering_key = {}};
}

/// The billing consumer as configuration (examples/configured/billing.toml) on `topic`,
/// charging `provider_url`: what `idem consume --config` runs.
std::unique_ptr<idem::sinks::ConfiguredSinks> configured_billing(const std::string& topic,
                                                                 const std::string& provider_url,
                                                                 idem::Backend backend) {
  std::ifstream in(std::string(IDEM_EXAMPLES_DIR) + "/configured/billing.toml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string example_topic = "order-service.order.confirmed";
  const std::size_t at = text.find(example_topic);
  if (at == std::string::npos) throw std::runtime_error("billing.toml: no topic to replace");
  text.replace(at, example_topic.size(), topic);
  const auto path = std::filesystem::temp_directory_path() /
                    fmt::format("{}.toml", idem::test::unique_name("billing-sink"));
  std::ofstream(path) << text;
  auto config = idem::sinks::load_sink_config(path.string(), {{"PROVIDER_URL", provider_url}});
  std::filesystem::remove(path);
  return std::make_unique<idem::sinks::ConfiguredSinks>(std::move(*config), backend);
}

struct Latency {
  double p50_ms = 0;
  double p99_ms = 0;
  std::int64_t orders = 0;
  std::string check = "ok";
};

/// 1,000 orders/s sent for `seconds` while a billing_effect consumer (M = 1024) runs;
/// enqueue (send) to the commit of the order's ledger row.
Latency paced(idem::test::DevBrokerProcess& broker, const Backend& backend,
              const std::string& provider_url, double seconds) {
  const auto n = static_cast<std::int64_t>(seconds * 1000);
  const std::string topic = idem::test::unique_name("billing-paced");
  broker.create_topic(topic, kPartitions);
  const std::string db = backend.fresh();
  idem::migrate_reference_system(*idem::open_store(db));
  idem::ConsumerConfig config =
      consumer_config(broker.bootstrap(), topic, idem::test::unique_name("billing"), kBatch);
  config.max_in_flight = 1024;
  config.check_topic_retention = false;

  std::vector<SteadyClock::time_point> sent(static_cast<std::size_t>(n) + 2);
  std::vector<SteadyClock::time_point> committed(static_cast<std::size_t>(n) + 2);
  std::vector<std::int64_t> in_tx;  // consumer thread only
  std::atomic<std::int64_t> done{0};
  idem::ConsumerHooks hooks;
  hooks.at = [&](idem::HookPoint p) {
    if (p != idem::HookPoint::AfterDbCommit) return;
    const auto now = SteadyClock::now();
    for (const std::int64_t id : in_tx) {
      auto& at = committed[static_cast<std::size_t>(id)];
      if (at == SteadyClock::time_point{}) {
        at = now;
        ++done;
      }
    }
    in_tx.clear();
  };
  idem::Consumer consumer(config, idem::open_store(db), hooks);
  idem::BillingConfig bc;
  bc.provider_url = provider_url;
  bc.client.max_host_connections = config.max_in_flight;
  auto billing = idem::billing_effect(bc);
  auto apply = billing.apply;
  billing.apply = [&in_tx, apply](const idem::OrderConfirmed& e, const idem::RecordInfo& r,
                                  const idem::BillingCharge& c, idem::Transaction& tx) {
    in_tx.push_back(e.order_id);
    return apply(e, r, c, tx);
  };
  consumer.on_effect(topic, billing);
  std::thread runner([&] { consumer.run(); });
  // The group join takes seconds on the mock cluster: a warm-up order (id 1) first; the
  // paced stream (ids 2..n+1, one every millisecond) starts once it is billed.
  (void)idem::test::produce_keyed_order_events(broker.bootstrap(), topic, 1,
                                               [](std::int64_t) { return std::string("warm-up"); });
  if (!idem::test::eventually([&] { return consumer.stats().processed >= 1; }, 60s, 5ms)) {
    consumer.stop();
    runner.join();
    return {0, 0, 0, "the consumer never billed the warm-up order"};
  }
  {
    idem::test::KafkaTestProducer producer(broker.bootstrap());
    const auto start = SteadyClock::now();
    for (std::int64_t id = 2; id <= n + 1; ++id) {
      std::this_thread::sleep_until(start + std::chrono::microseconds(1000 * (id - 2)));
      idem::OrderConfirmed e;
      e.event_id = idem::new_uuid_v7();
      e.occurred_at =
          std::chrono::time_point_cast<std::chrono::microseconds>(std::chrono::system_clock::now());
      e.order_id = id;
      e.customer_id = 42;
      e.total_amount = idem::Amount::from_hundredths(1999);
      sent[static_cast<std::size_t>(id)] = SteadyClock::now();
      producer.send({topic,
                     std::to_string(id),
                     idem::to_json(e),
                     {{"event_id", e.event_id.to_string()}},
                     -1});
    }
    producer.flush(60s);
  }
  const bool all = idem::test::eventually([&] { return done.load() >= n + 1; }, 120s, 5ms);
  consumer.stop();
  runner.join();
  Latency l;
  l.orders = n;
  std::vector<double> ms;
  for (std::int64_t id = 2; id <= n + 1; ++id) {
    const auto& at = committed[static_cast<std::size_t>(id)];
    if (at == SteadyClock::time_point{}) continue;
    ms.push_back(seconds_between(sent[static_cast<std::size_t>(id)], at) * 1000.0);
  }
  l.p50_ms = percentile_ms(ms, 0.50);
  l.p99_ms = percentile_ms(ms, 0.99);
  if (!all) l.check = fmt::format("only {} of {} billed", ms.size(), n);
  remove_if_sqlite(db);
  return l;
}

}  // namespace

/// --soak: one configuration again and again in one process; RSS after each pass.
void soak(idem::test::DevBrokerProcess& broker, const Backend& backend, const Options& opts) {
  constexpr std::size_t kInFlight = 256;
  const std::string provider_db = backend.fresh();
  idem::http::ProviderConfig pc;
  pc.faults.latency = 10ms;
  idem::http::PaymentProvider provider(idem::open_store(provider_db), pc);
  provider.start("127.0.0.1", 0);
  idem::BillingConfig bc;
  bc.provider_url = provider.base_url();
  bc.client.max_host_connections = kInFlight;
  std::printf("soak: %s, latency 10 ms, effect %zu, %lld orders per pass\n", backend.name.c_str(),
              kInFlight, static_cast<long long>(opts.orders));
  std::printf("%5s %10s %12s %18s\n", "pass", "orders/s", "RSS MiB", "RSS trimmed MiB");
  for (int i = 1; i <= opts.soak; ++i) {
    const Pass p = pass(
        broker, backend, opts.orders, kBatch, kInFlight,
        [&](idem::Consumer& c, const std::string& t) { c.on_effect(t, idem::billing_effect(bc)); });
    const double rss = read_memory().rss_mib;
    malloc_trim(0);
    std::printf("%5d %10.0f %12.0f %18.0f  %s\n", i, p.per_s, rss, read_memory().rss_mib,
                p.check.c_str());
    std::fflush(stdout);
  }
  provider.stop();
  remove_if_sqlite(provider_db);
}

int main(int argc, char** argv) {
  const Options opts = parse(argc, argv);
  std::vector<Backend> backends = {
      {"sqlite", "SQLite WAL, synchronous=FULL (both the consumer's and the provider's store)",
       fresh_sqlite}};
  if (const char* dsn = std::getenv("IDEM_TEST_PG_DSN")) {
    backends.push_back({"postgres", "PostgreSQL " + postgres_settings(dsn),
                        [] { return idem::test::fresh_postgres_url(); }});
  } else {
    std::printf("postgres: skipped (run under scripts/with-postgres.sh)\n");
  }
  // The mock cluster answers a fetch only after fetch.wait.max.ms even when records
  // arrive meanwhile (bench/E2E-RESULTS.md); librdkafka's 500 ms default would be most of
  // every latency here. IDEM_BENCH_FETCH_WAIT_MS overrides the 10 ms.
  ::setenv("IDEM_BENCH_FETCH_WAIT_MS", "10", /*overwrite=*/0);
  const double rss_start = read_memory().rss_mib;
  std::printf(
      "billing end to end: %lld orders per run (capped runs fewer), %d partitions, "
      "consumer batch %zu, fetch.wait.max.ms %s, %u hardware threads\n",
      static_cast<long long>(opts.orders), kPartitions, kBatch,
      std::getenv("IDEM_BENCH_FETCH_WAIT_MS"), std::thread::hardware_concurrency());
  // `idem dev-broker` in its own process: the records of every run stay there, so the
  // RSS below is the consumer's and the provider's alone.
  idem::test::DevBrokerProcess broker(IDEM_CLI_PATH);
  if (opts.soak > 0) {
    soak(broker, backends.front(), opts);
    return 0;
  }
  double rss_warm = 0;  // after the first run: the broker, a provider and a consumer have run
  for (const Backend& backend : backends) {
    if (std::ranges::find(opts.backends, backend.name) == opts.backends.end()) continue;
    std::printf("\n== %s: %s\n", backend.name.c_str(), backend.settings.c_str());
    const Pass limit =
        pass(broker, backend, opts.orders, kBatch, 1024,
             [](idem::Consumer& c, const std::string& t) { c.on_effect(t, no_call_effect()); });
    std::printf("db limit (call phase does nothing, M 1024): %8.0f orders/s  (%lld orders) %s\n",
                limit.per_s, static_cast<long long>(limit.orders), limit.check.c_str());
    if (rss_warm == 0) rss_warm = read_memory().rss_mib;
    std::printf("%-9s %-12s %9s %10s %10s %9s %9s %9s  %s\n", "latency", "handler", "orders",
                "orders/s", "ideal/s", "/ideal", "/limit", "/seq", "check");
    // The same M without latency: what the machine does with calls but no waiting for
    // them (provider, HTTP, broker, consumer and database on these cores). The ceiling
    // of a run is the lowest of its ideal, this and the db limit.
    std::map<std::size_t, double> without_latency;
    for (const int latency_ms : opts.latencies) {
      const std::string provider_db = backend.fresh();
      idem::http::ProviderConfig pc;
      pc.faults.latency = std::chrono::milliseconds(latency_ms);
      idem::http::PaymentProvider provider(idem::open_store(provider_db), pc);
      provider.start("127.0.0.1", 0);
      idem::BillingConfig bc;
      bc.provider_url = provider.base_url();
      const auto capped = [&](double ideal_per_s) {
        if (latency_ms == 0) return opts.orders;
        return std::clamp(static_cast<std::int64_t>(ideal_per_s * kSecondsPerCappedRun),
                          std::int64_t{30}, opts.orders);
      };
      const double ideal_seq = latency_ms == 0 ? 0 : 1000.0 / latency_ms;
      const Pass seq = pass(broker, backend, capped(ideal_seq), 100, 1,
                            [&](idem::Consumer& c, const std::string& t) {
                              c.on<idem::OrderConfirmed>(t, idem::billing_handler(bc));
                            });
      std::printf("%6d ms %-12s %9lld %10.0f %10s %9s %9s %9s  %s\n", latency_ms, "sequential",
                  static_cast<long long>(seq.orders), seq.per_s,
                  latency_ms == 0 ? "-" : fmt::format("{:.0f}", ideal_seq).c_str(),
                  latency_ms == 0 ? "-" : fmt::format("{:.2f}", seq.per_s / ideal_seq).c_str(), "-",
                  "1.00", seq.check.c_str());
      std::int64_t charged = seq.orders;
      for (const std::size_t m : opts.in_flight) {
        const double ideal = latency_ms == 0 ? 0 : static_cast<double>(m) * 1000.0 / latency_ms;
        // As `idem consume` does: a connection per charge in flight (BillingConfig).
        idem::BillingConfig per_m = bc;
        per_m.client.max_host_connections = std::max(per_m.client.max_host_connections, m);
        Pass p;
        Pass configured;
        double effect_cpu = 0;  // the lowest CPU per order of any round
        double configured_cpu = 0;
        const auto lowest = [](double& low, double x) { low = low == 0 ? x : std::min(low, x); };
        for (int round = 0; round < opts.rounds; ++round) {
          const auto effect_pass = [&] {
            return pass(broker, backend, capped(ideal), kBatch, m,
                        [&](idem::Consumer& c, const std::string& t) {
                          c.on_effect(t, idem::billing_effect(per_m));
                        });
          };
          std::unique_ptr<idem::sinks::ConfiguredSinks> sinks;  // outlives the pass's run()
          const auto configured_pass = [&] {
            return pass(broker, backend, capped(ideal), kBatch, m,
                        [&](idem::Consumer& c, const std::string& t) {
                          sinks = configured_billing(t, provider.base_url(),
                                                     backend.name == "sqlite"
                                                         ? idem::Backend::Sqlite
                                                         : idem::Backend::Postgres);
                          sinks->install(c, m);
                        });
          };
          // Odd rounds run the configured pass first: the provider's store grows with every
          // pass, and the pass after another meets what that one left (dirty pages, a
          // checkpoint); alternating spreads both over the two.
          Pass e;
          Pass f;
          if (round % 2 == 0) {
            e = effect_pass();
            f = configured_pass();
          } else {
            f = configured_pass();
            e = effect_pass();
          }
          charged += e.orders + f.orders;
          if (e.per_s > p.per_s) p = e;
          if (f.per_s > configured.per_s) configured = f;
          lowest(effect_cpu, e.cpu_us_per_order);
          lowest(configured_cpu, f.cpu_us_per_order);
        }
        if (latency_ms == 0) without_latency[m] = p.per_s;
        double ceiling = limit.per_s;
        if (latency_ms != 0) ceiling = std::min(ceiling, ideal);
        if (const auto it = without_latency.find(m); it != without_latency.end())
          ceiling = std::min(ceiling, it->second);
        std::printf("%6d ms %-12s %9lld %10.0f %10s %9s %9.2f %9.2f  %s; cpu %.0f us/order\n",
                    latency_ms, fmt::format("effect {}", m).c_str(),
                    static_cast<long long>(p.orders), p.per_s,
                    latency_ms == 0 ? "-" : fmt::format("{:.0f}", ideal).c_str(),
                    latency_ms == 0 ? "-" : fmt::format("{:.2f}", p.per_s / ideal).c_str(),
                    p.per_s / ceiling, p.per_s / seq.per_s, p.check.c_str(), effect_cpu);
        std::printf(
            "%6d ms %-12s %9lld %10.0f %10s %9s %9.2f %9.2f  %s; %.0f%% of effect %zu; cpu %.0f "
            "us/order (%.0f%% of effect's)\n",
            latency_ms, fmt::format("configured {}", m).c_str(),
            static_cast<long long>(configured.orders), configured.per_s,
            latency_ms == 0 ? "-" : fmt::format("{:.0f}", ideal).c_str(),
            latency_ms == 0 ? "-" : fmt::format("{:.2f}", configured.per_s / ideal).c_str(),
            configured.per_s / ceiling, configured.per_s / seq.per_s, configured.check.c_str(),
            100.0 * configured.per_s / p.per_s, m, configured_cpu,
            effect_cpu > 0 ? 100.0 * configured_cpu / effect_cpu : 0.0);
        std::fflush(stdout);
      }
      if ((latency_ms == 10 || latency_ms == 100) && opts.paced_s > 0) {
        const Latency l = paced(broker, backend, provider.base_url(), opts.paced_s);
        std::printf(
            "%6d ms paced 1,000/s, effect 1024: %lld orders, enqueue->ledger p50 %.1f ms "
            "p99 %.1f ms  %s\n",
            latency_ms, static_cast<long long>(l.orders), l.p50_ms, l.p99_ms, l.check.c_str());
        charged += l.orders + 1;  // and the warm-up order
      }
      // Order ids repeat across runs (each run's topic holds orders 1..n), so the check
      // is on charges: one per order billed, none more.
      const auto summary = provider.summary();
      if (summary.charges != charged)
        std::printf("!! the provider made %lld charges for %lld orders billed at %d ms\n",
                    static_cast<long long>(summary.charges), static_cast<long long>(charged),
                    latency_ms);
      provider.stop();
      remove_if_sqlite(provider_db);
      std::fflush(stdout);
    }
  }
  std::printf(
      "\nRSS at start %.0f MiB, after the first run %.0f MiB, at end %.0f MiB "
      "(the broker runs in its own process)\n",
      rss_start, rss_warm, read_memory().rss_mib);
  return 0;
}
