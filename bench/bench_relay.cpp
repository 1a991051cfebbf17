// Outbox relay throughput and enqueue cost, with two baselines measured in the same run
// (bench/RELAY-RESULTS.md has figures and how to read them):
//
//   relay      idem::Relay: outbox rows -> acknowledged on the topic -> marked published;
//              warm (a running relay, the figure that counts) and from a cold start
//   raw SQL    the relay's own claim and mark statements in a loop, no producer
//   ceiling    the relay's claims sent through idem::Producer with no mark at all
//   producer   a plain idempotent librdkafka producer sending the same payloads (warm)
//   enqueue    UPDATE orders (the confirm) with vs without outbox.enqueue, per transaction
//   replicated the warm relay with publish_after = replicated, when the primary has a
//              synchronous standby (run under bench/with-sync-standby.sh)
//
// Usage: idem_bench_relay [EVENTS]   (default 100000)
// PostgreSQL is measured when IDEM_BENCH_PG_DSN or IDEM_TEST_PG_DSN is set (e.g. under
// scripts/with-postgres.sh); SQLite always, in a file under /tmp.
#include <dirent.h>
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "idem/devtools/dev_broker.hpp"
#include "idem/outbox.hpp"
#include "idem/producer.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/order_service.hpp"
#include "idem/reference/schema.hpp"
#include "idem/relay.hpp"
#include "idem/store.hpp"
#include "idem/stores/postgres.hpp"
#include "outbox/claim_reader.hpp"
#include "stores/postgres/pg_outbox_sql.hpp"
#include "stores/sqlite/sqlite_outbox_sql.hpp"

#include "bench_settings.hpp"

namespace {

using SteadyClock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds_since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

/// CPU time used so far by this process (all threads: relay, marker, librdkafka, the
/// in-process mock broker) and by the bench's PostgreSQL server: its postmaster and
/// every child, exited ones included (the postmaster's reaped-children time holds
/// them). Other helpers' servers on the machine do not count. Differences between two
/// readings show where a run's CPU went: on a shared 2-core machine a run is bounded by
/// CPU as much as by round trips.
struct CpuReading {
  double self_s = 0;
  double postgres_s = 0;

  /// `postmaster` 0: this process only.
  static CpuReading now(long postmaster) {
    CpuReading r;
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    r.self_s = static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
               static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
    if (postmaster == 0) return r;
    const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
    if (DIR* d = ::opendir("/proc")) {
      while (const dirent* e = ::readdir(d)) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        const ProcStat st = read_stat(std::atol(e->d_name));
        if (st.pid == postmaster || st.ppid == postmaster) {
          r.postgres_s += st.cpu_ticks / tick;
        }
      }
      ::closedir(d);
    }
    return r;
  }

  struct ProcStat {
    long pid = 0;
    long ppid = 0;
    double cpu_ticks = 0;  // utime + stime + cutime + cstime
  };
  static ProcStat read_stat(long pid) {
    ProcStat st;
    std::ifstream in(fmt::format("/proc/{}/stat", pid));
    std::string line;
    if (!std::getline(in, line)) return st;
    const auto close = line.rfind(')');  // the command name may hold spaces
    if (close == std::string::npos) return st;
    // Fields after ")": state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17).
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    for (int i = 3; i <= 17 && rest >> field; ++i) {
      if (i == 4) st.ppid = std::stol(field);
      if (i >= 14) st.cpu_ticks += std::stod(field);
    }
    st.pid = pid;
    return st;
  }
};

/// The postmaster of the server `store` is connected to (the parent of its backend).
long postmaster_of(idem::Store& store) {
  auto tx = store.begin();
  const long backend = static_cast<long>(tx->execute("SELECT pg_backend_pid()")[0].int64(0));
  tx->commit();
  return CpuReading::read_stat(backend).ppid;
}

/// "bench us/ev, postgres us/ev" of CPU between two readings, for `n` events.
std::string cpu_per_event(const CpuReading& a, const CpuReading& b, std::int64_t n) {
  const auto dn = static_cast<double>(n);
  return fmt::format("cpu/event: bench {:.1f} us, postgres {:.1f} us",
                     (b.self_s - a.self_s) / dn * 1e6, (b.postgres_s - a.postgres_s) / dn * 1e6);
}

// The relay's statements, from the stores' own source (what the relay issues).
constexpr std::string_view kClaimPostgres = idem::detail::pg::kClaimOutboxSql;
constexpr std::string_view kClaimSqlite = idem::detail::sqlite::kClaimOutboxSql;
constexpr std::string_view kMarkPostgres = idem::detail::pg::kMarkOutboxSql;
constexpr std::string_view kMarkSqlite = idem::detail::sqlite::kMarkOutboxSql;

// Rows per claim (relay and raw loop alike); IDEM_BENCH_BATCH overrides.
const std::size_t kBatch =
    std::getenv("IDEM_BENCH_BATCH") ? std::stoul(std::getenv("IDEM_BENCH_BATCH")) : 1000;
constexpr int kPartitions = 32;

std::string all_shards() {
  std::string s = "{";
  for (int i = 0; i < idem::kOutboxShards; ++i) {
    if (i > 0) s.push_back(',');
    s += std::to_string(i);
  }
  s.push_back('}');
  return s;
}

void exec(idem::Store& store, std::string_view sql) {
  auto tx = store.begin();
  tx->execute(sql);
  tx->commit();
}

/// Rewrites the outbox compactly (PostgreSQL), so that each run starts from the same
/// table state. A plain VACUUM is not enough: every run's marks (and every reset) write a
/// new version of each row, and the table and its indexes keep growing; once they outgrow
/// shared_buffers, later runs pay for reads and writes through the kernel that earlier
/// runs did not (two runs of the same relay differed by 40 %).
void vacuum_outbox(idem::Store& store, bool postgres) {
  if (!postgres) return;
  // VACUUM cannot run in a transaction block; no idem transaction is open here.
  PGresult* r = PQexec(idem::postgres_native_handle(store), "VACUUM (FULL, ANALYZE) idem_outbox");
  if (PQresultStatus(r) != PGRES_COMMAND_OK) {
    std::fprintf(stderr, "VACUUM: %s", PQerrorMessage(idem::postgres_native_handle(store)));
  }
  PQclear(r);
}

/// Resets every row to unpublished, then vacuums.
void reset_outbox(idem::Store& store, bool postgres) {
  exec(store, "UPDATE idem_outbox SET published_at = NULL");
  vacuum_outbox(store, postgres);
}

/// Leaves only the first `rows` rows (in id order) unpublished, then vacuums: the warm-up
/// of a relay before its timed run.
void reset_outbox_to_first(idem::Store& store, bool postgres, std::int64_t rows) {
  exec(store, fmt::format("UPDATE idem_outbox SET published_at = CASE WHEN id < (SELECT min(id) "
                          "FROM idem_outbox) + {} "
                          "THEN NULL ELSE {} END",
                          rows, postgres ? "now()" : "0"));
  vacuum_outbox(store, postgres);
}

/// Sets every row after the first `rows` (in id order) back to unpublished, then vacuums.
void unpublish_after_first(idem::Store& store, bool postgres, std::int64_t rows) {
  exec(store, fmt::format("UPDATE idem_outbox SET published_at = NULL WHERE id >= (SELECT min(id) "
                          "FROM idem_outbox) + {}",
                          rows));
  vacuum_outbox(store, postgres);
}

/// Fills the outbox with `n` order.confirmed.v1 events (1000 per transaction).
void fill(idem::Store& store, idem::Outbox& outbox, const std::string& topic, std::int64_t n) {
  for (std::int64_t done = 0; done < n;) {
    auto tx = store.begin();
    for (std::size_t i = 0; i < kBatch && done < n; ++i, ++done) {
      const std::int64_t order = done + 1;
      outbox.enqueue(*tx, [&](const idem::Uuid& id) {
        idem::OrderConfirmed e;
        e.event_id = id;
        e.occurred_at = std::chrono::time_point_cast<std::chrono::microseconds>(
            std::chrono::system_clock::now());
        e.order_id = order;
        e.customer_id = 1 + order % 1000;
        e.total_amount = idem::Amount::from_hundredths(1000 + order % 50'000);
        return idem::OutboxMessage{"order", std::to_string(order), topic, idem::to_json(e), {}, {}};
      });
    }
    tx->commit();
  }
}

// Rows a warm relay publishes before its timed run (they are not counted).
constexpr std::int64_t kWarmUpRows = 1000;

/// The relay's producer, also used by the rows that measure idem::Producer without it.
idem::ProducerConfig producer_config(const std::string& bootstrap) {
  idem::ProducerConfig pc;
  pc.bootstrap_servers = bootstrap;
  pc.kafka = {{"log_level", "2"}};
  if (const char* v = std::getenv("IDEM_BENCH_LINGER_MS"))
    pc.linger = std::chrono::milliseconds(std::stol(v));
  return pc;
}

/// Builds a relay for the benchmark's store and broker.
idem::RelayConfig relay_config(const std::string& url, const std::string& bootstrap,
                               std::size_t mark_connections,
                               idem::PublishAfter publish_after = idem::PublishAfter::Committed) {
  idem::RelayConfig c;
  c.publish_after = publish_after;
  c.store_url = url;
  c.producer = producer_config(bootstrap);
  c.batch_size = kBatch;
  if (const char* v = std::getenv("IDEM_BENCH_IN_FLIGHT")) c.max_batches_in_flight = std::stoul(v);
  c.progress_interval = 0ms;
  c.cleanup_interval = 0ms;
  c.mark_connections = mark_connections;
  return c;
}

/// Times `relay` draining `n` unpublished rows and prints the figure under `label`.
double timed_drain(idem::Relay& relay, std::int64_t n, long postmaster, const std::string& label) {
  const std::uint64_t before = relay.progress().published;
  const auto cpu = CpuReading::now(postmaster);
  const auto t = SteadyClock::now();
  if (!relay.run_until_empty(600s)) std::fprintf(stderr, "relay did not drain\n");
  const double s = seconds_since(t);
  // Read before the relay closes its connections (their backends' CPU goes with them).
  std::printf("  relay run (%s): %.0f events/s, %s\n", label.c_str(), static_cast<double>(n) / s,
              cpu_per_event(cpu, CpuReading::now(postmaster), n).c_str());
  const std::uint64_t published = relay.progress().published - before;
  if (published != static_cast<std::uint64_t>(n)) {
    std::fprintf(stderr, "relay published %llu of %lld\n",
                 static_cast<unsigned long long>(published), static_cast<long long>(n));
  }
  return static_cast<double>(n) / s;
}

/// A cold start: the clock starts when the relay has been built, so the run includes
/// librdkafka's start-up (broker connection, metadata, and the idempotent producer's
/// InitProducerId, which librdkafka 2.0.2 retries on a 500 ms timer when no broker
/// connection is up yet: about 1 s before the first acknowledgement).
double relay_cold_run(idem::Store& store, bool postgres, const std::string& url,
                      const std::string& bootstrap, std::int64_t n, long postmaster) {
  reset_outbox(store, postgres);
  idem::Relay relay(relay_config(url, bootstrap, idem::RelayConfig{}.mark_connections));
  return timed_drain(relay, n, postmaster, "cold start");
}

/// A running relay: it first publishes kWarmUpRows rows (so its producer is connected
/// and has its producer id, as in a relay that has been up for a while), then the rest
/// of the table is set back to unpublished and the clock starts.
double relay_warm_run(idem::Store& store, bool postgres, const std::string& url,
                      const std::string& bootstrap, std::int64_t n, long postmaster,
                      std::size_t mark_connections,
                      idem::PublishAfter publish_after = idem::PublishAfter::Committed) {
  reset_outbox_to_first(store, postgres, kWarmUpRows);
  idem::Relay relay(relay_config(url, bootstrap, mark_connections, publish_after));
  if (!relay.run_until_empty(600s)) std::fprintf(stderr, "relay did not drain the warm-up rows\n");
  unpublish_after_first(store, postgres, kWarmUpRows);
  const bool replicated = publish_after == idem::PublishAfter::Replicated;
  const double rate = timed_drain(relay, n - kWarmUpRows, postmaster,
                                  fmt::format("warm, {} mark connection(s){}", mark_connections,
                                              replicated ? ", publish_after = replicated" : ""));
  if (replicated) {
    const idem::RelayProgress p = relay.progress();
    std::printf("  replication waits: %llu batches, %lld ms in all\n",
                static_cast<unsigned long long>(p.replication_waits),
                static_cast<long long>(p.replication_wait_total.count()));
  }
  return rate;
}

/// Up to `limit` unpublished rows after `cursor`, with the relay's claim statement in a
/// read transaction, as the relay claims.
idem::Rows claim_rows(idem::Store& store, bool postgres, std::int64_t cursor, std::size_t limit) {
  static const std::string shards = all_shards();
  auto tx = store.begin_read();
  idem::Rows rows =
      postgres ? tx->execute(kClaimPostgres, cursor, shards, static_cast<std::int64_t>(limit))
               : tx->execute(kClaimSqlite, cursor, static_cast<std::int64_t>(limit));
  tx->commit();
  return rows;
}

double raw_sql_run(idem::Store& store, bool postgres, std::int64_t n, long postmaster) {
  const auto cpu = CpuReading::now(postmaster);
  const auto t = SteadyClock::now();
  std::int64_t done = 0;
  std::int64_t cursor = 0;
  while (true) {
    const idem::Rows rows = claim_rows(store, postgres, cursor, kBatch);
    if (rows.empty()) break;
    std::string list(postgres ? "{" : "[");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (i > 0) list.push_back(',');
      list += rows[i].text(0);
    }
    list.push_back(postgres ? '}' : ']');
    cursor = rows[rows.size() - 1].int64(0);
    auto tx = store.begin();
    tx->execute(postgres ? kMarkPostgres : kMarkSqlite, list);
    tx->commit();
    done += static_cast<std::int64_t>(rows.size());
  }
  const double s = seconds_since(t);
  std::printf("  raw claim+mark loop: %.0f events/s, %s\n", static_cast<double>(done) / s,
              cpu_per_event(cpu, CpuReading::now(postmaster), done).c_str());
  if (done != n)
    std::fprintf(stderr, "raw loop marked %lld of %lld\n", static_cast<long long>(done),
                 static_cast<long long>(n));
  return static_cast<double>(done) / s;
}

/// The ceiling of any relay that claims with these statements and produces what it
/// claims, with a mark that costs nothing: the claim loop of raw_sql_run(), its rows
/// turned into messages as the relay turns them and sent through idem::Producer, no mark.
/// It answers whether a cheaper mark alone could bring the relay near the plain producer.
double claim_produce_run(idem::Store& store, bool postgres, const std::string& bootstrap,
                         std::int64_t n, long postmaster) {
  idem::Producer producer(producer_config(bootstrap));
  std::vector<idem::Delivery> deliveries;
  const auto claim_after = [&](std::int64_t cursor, std::size_t limit) {
    idem::detail::ClaimedBatch claim;
    idem::detail::to_messages(claim_rows(store, postgres, cursor, limit), claim);
    return claim;
  };
  // Warm, like the relay runs: the first row once, untimed (broker connection and the
  // idempotent producer's id), then the timed run from the start.
  for (idem::ProducerMessage& m : claim_after(0, 1).messages) {
    static_cast<void>(producer.send(std::move(m)));
  }
  producer.flush(60s, deliveries);
  deliveries.clear();
  const auto cpu = CpuReading::now(postmaster);
  const auto t = SteadyClock::now();
  std::int64_t sent = 0;
  std::int64_t cursor = 0;
  while (true) {
    idem::detail::ClaimedBatch claim = claim_after(cursor, kBatch);
    if (claim.ids.empty()) break;
    cursor = claim.ids.back();
    for (idem::ProducerMessage& m : claim.messages) static_cast<void>(producer.send(std::move(m)));
    sent += static_cast<std::int64_t>(claim.ids.size());
    producer.poll(0ms, deliveries);
  }
  producer.flush(60s, deliveries);
  const double s = seconds_since(t);
  const auto acked = std::count_if(deliveries.begin(), deliveries.end(),
                                   [](const idem::Delivery& d) { return d.ok; });
  std::printf("  claim + produce, no mark: %.0f events/s, %s\n", static_cast<double>(acked) / s,
              cpu_per_event(cpu, CpuReading::now(postmaster), acked).c_str());
  if (acked != n || sent != n)
    std::fprintf(stderr, "claim + produce: %lld sent, %lld acked of %lld\n",
                 static_cast<long long>(sent), static_cast<long long>(acked),
                 static_cast<long long>(n));
  return static_cast<double>(acked) / s;
}

struct Payload {
  std::string key;
  std::string value;
  std::string event_id;
};

double plain_producer_run(const std::string& bootstrap, const std::string& topic,
                          const std::vector<Payload>& payloads, long postmaster) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  const std::array<std::pair<const char*, const char*>, 6> props = {
      {{"bootstrap.servers", bootstrap.c_str()},
       {"enable.idempotence", "true"},
       {"acks", "all"},
       {"linger.ms", "5"},
       {"queue.buffering.max.messages", "200000"},
       {"log_level", "2"}}};
  for (const auto& [k, v] : props) rd_kafka_conf_set(conf, k, v, err, sizeof err);
  std::size_t acked = 0;
  rd_kafka_conf_set_opaque(conf, &acked);
  rd_kafka_conf_set_dr_msg_cb(conf, [](rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) ++*static_cast<std::size_t*>(opaque);
  });
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  const auto produce = [&](const Payload& p) {
    while (true) {
      rd_kafka_headers_t* h = rd_kafka_headers_new(1);
      rd_kafka_header_add(h, "event_id", -1, p.event_id.data(),
                          static_cast<ssize_t>(p.event_id.size()));
      std::array<rd_kafka_vu_t, 5> vus{};
      vus[0].vtype = RD_KAFKA_VTYPE_TOPIC;
      vus[0].u.cstr = topic.c_str();
      vus[1].vtype = RD_KAFKA_VTYPE_KEY;
      vus[1].u.mem = {const_cast<char*>(p.key.data()), p.key.size()};
      vus[2].vtype = RD_KAFKA_VTYPE_VALUE;
      vus[2].u.mem = {const_cast<char*>(p.value.data()), p.value.size()};
      vus[3].vtype = RD_KAFKA_VTYPE_MSGFLAGS;
      vus[3].u.i = RD_KAFKA_MSG_F_COPY;
      vus[4].vtype = RD_KAFKA_VTYPE_HEADERS;
      vus[4].u.headers = h;
      rd_kafka_error_t* e = rd_kafka_produceva(rk, vus.data(), vus.size());
      if (e == nullptr) return;
      rd_kafka_error_destroy(e);
      rd_kafka_headers_destroy(h);
      rd_kafka_poll(rk, 5);
    }
  };
  // Warm, like the relay: the first message (not counted) waits for the broker
  // connection and the producer id.
  produce(payloads.front());
  rd_kafka_flush(rk, 60'000);
  acked = 0;
  const auto cpu = CpuReading::now(postmaster);
  const auto t = SteadyClock::now();
  for (const Payload& p : payloads) {
    produce(p);
    rd_kafka_poll(rk, 0);
  }
  rd_kafka_flush(rk, 60'000);
  const double s = seconds_since(t);
  std::printf(
      "  plain producer: %.0f events/s, %s\n", static_cast<double>(acked) / s,
      cpu_per_event(cpu, CpuReading::now(postmaster), static_cast<std::int64_t>(acked)).c_str());
  rd_kafka_destroy(rk);
  if (acked != payloads.size())
    std::fprintf(stderr, "plain producer: %zu of %zu acked\n", acked, payloads.size());
  return static_cast<double>(acked) / s;
}

/// idem::Producer alone (no database) sending the same payloads, warm.
double idem_producer_run(const std::string& bootstrap, const std::string& topic,
                         const std::vector<Payload>& payloads) {
  idem::Producer producer(producer_config(bootstrap));
  std::vector<idem::Delivery> out;
  const Payload& w = payloads.front();  // warm-up, not counted
  static_cast<void>(producer.send({topic, w.key, w.value, *idem::Uuid::parse(w.event_id), {}, {}}));
  producer.flush(60s, out);
  out.clear();
  const auto t0 = SteadyClock::now();
  for (const Payload& p : payloads) {
    static_cast<void>(
        producer.send({topic, p.key, p.value, *idem::Uuid::parse(p.event_id), {}, {}}));
    producer.poll(0ms, out);
  }
  producer.flush(60s, out);
  const double rate = static_cast<double>(out.size()) / seconds_since(t0);
  std::printf("  idem::Producer alone: %.0f events/s\n", rate);
  return rate;
}

/// Per-transaction cost of the confirm with and without enqueue, interleaved in blocks.
std::pair<double, double> enqueue_cost(idem::Store& store, int n) {
  idem::Outbox outbox;
  idem::OrderService service(outbox);
  std::int64_t base = 0;
  {
    auto tx = store.begin();
    base = idem::OrderService::next_order_id(*tx);
    for (int i = 0; i < 2 * n; ++i) {
      service.create(*tx, base + i, 1 + i % 100, idem::Amount::from_hundredths(1000 + i));
    }
    tx->commit();
  }
  double with = 0;
  double without = 0;
  constexpr int kBlock = 100;
  for (int b = 0; b < n / kBlock; ++b) {
    auto t = SteadyClock::now();
    for (int i = 0; i < kBlock; ++i) {  // the same UPDATE as confirm(), no event
      const std::int64_t id = base + 2 * (b * kBlock + i);
      auto tx = store.begin();
      tx->execute(
          "UPDATE orders SET status = 'confirmed', confirmed_at = $2 "
          "WHERE id = $1 AND status = 'created' RETURNING customer_id, total_amount",
          id,
          std::chrono::time_point_cast<std::chrono::microseconds>(
              std::chrono::system_clock::now()));
      tx->commit();
    }
    without += seconds_since(t);
    t = SteadyClock::now();
    for (int i = 0; i < kBlock; ++i) {  // confirm(): UPDATE + enqueue, one transaction
      static_cast<void>(service.confirm(store, base + 2 * (b * kBlock + i) + 1));
    }
    with += seconds_since(t);
  }
  const int done = (n / kBlock) * kBlock;
  return {without / done * 1e6, with / done * 1e6};
}

/// Whether the primary of `store` has a standby in synchronous_standby_names, streaming.
bool has_sync_standby(idem::Store& store) {
  auto tx = store.begin_read();
  const idem::Rows rows = tx->execute(
      "SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')");
  tx->commit();
  return rows[0].int64(0) > 0;
}

void bench_backend(const std::string& name, const std::string& url, const std::string& bootstrap,
                   idem::DevBroker& broker, std::int64_t n, int* topic_seq) {
  auto store = idem::open_store(url);
  idem::migrate_reference_system(*store);
  const bool postgres = store->backend() == idem::Backend::Postgres;
  // IDEM_BENCH_SKIP_ENQUEUE=1: relay figures only (quicker runs while tuning).
  const bool skip_enqueue = std::getenv("IDEM_BENCH_SKIP_ENQUEUE") != nullptr;
  const auto [without_us, with_us] =
      skip_enqueue ? std::pair{0.0, 0.0} : enqueue_cost(*store, 5000);
  if (!skip_enqueue)
    std::printf(
        "%s enqueue: confirm tx without enqueue %.1f us, with enqueue %.1f us (+%.1f us, %.0f%%)\n",
        name.c_str(), without_us, with_us, with_us - without_us,
        (with_us / without_us - 1.0) * 100.0);
  if (postgres && !skip_enqueue) {
    // What the NOTIFY trigger costs: the same measurement with it disabled.
    exec(*store, "ALTER TABLE idem_outbox DISABLE TRIGGER idem_outbox_notify");
    const auto [wo, wi] = enqueue_cost(*store, 5000);
    exec(*store, "ALTER TABLE idem_outbox ENABLE TRIGGER idem_outbox_notify");
    std::printf(
        "%s enqueue without the NOTIFY trigger: without enqueue %.1f us, with %.1f us (+%.1f us)\n",
        name.c_str(), wo, wi, wi - wo);
  }
  exec(*store, "DELETE FROM idem_outbox");

  const std::string topic = fmt::format("bench-relay-{}-{}", name, (*topic_seq)++);
  broker.create_topic(topic, kPartitions);
  auto t = SteadyClock::now();
  idem::Outbox outbox;
  fill(*store, outbox, topic, n);
  std::printf("%s fill: %lld events in %.2f s (%.0f enqueues/s in 1000-row transactions)\n",
              name.c_str(), static_cast<long long>(n), seconds_since(t),
              static_cast<double>(n) / seconds_since(t));

  std::vector<Payload> payloads;
  {
    auto tx = store->begin();
    const idem::Rows rows =
        tx->execute("SELECT message_key, payload, event_id FROM idem_outbox ORDER BY id");
    tx->commit();
    for (const auto row : rows) {
      payloads.push_back(
          {std::string(row.text(0)), std::string(row.text(1)), row.uuid(2).to_string()});
    }
  }

  if (postgres) {
    // Each run starts from an explicit VACUUM ANALYZE (reset_outbox); an autovacuum
    // worker waking up in the middle of one run and not another would only add noise.
    exec(*store, "ALTER TABLE idem_outbox SET (autovacuum_enabled = off)");
  }
  const long postmaster = postgres ? postmaster_of(*store) : 0;
  const double cold = relay_cold_run(*store, postgres, url, bootstrap, n, postmaster);
  const std::size_t marks = idem::RelayConfig{}.mark_connections;
  // SQLite marks on one connection whatever is asked (one writer at a time): the other
  // count would be the same configuration again.
  const std::size_t other_marks = postgres ? (marks == 1 ? 2 : 1) : 0;
  // Every row is the best of `rounds` (IDEM_BENCH_ROUNDS, default 3), the rows taking
  // turns within a round, so a load change hits every row alike.
  const int rounds =
      std::getenv("IDEM_BENCH_ROUNDS") ? std::atoi(std::getenv("IDEM_BENCH_ROUNDS")) : 3;
  std::vector<std::pair<std::string, std::vector<double>>> rows = {
      {fmt::format("relay, warm, {} mark connection(s) (the default)", marks), {}},
      {"raw claim + mark SQL loop", {}},
      {fmt::format("relay, warm, {} mark connection(s)", other_marks), {}},
      {"relay, warm, marks inline (mark_connections=0)", {}},
      {"claim + produce with no mark (a free mark's ceiling)", {}},
      {"plain idempotent producer", {}},
      {"idem::Producer alone", {}},
      {fmt::format("relay, warm, {} mark connection(s), publish_after = replicated", marks), {}}};
  // The replicated row runs when the primary has a synchronous standby
  // (bench/with-sync-standby.sh): there its wait should cost nothing.
  const bool sync_standby = postgres && has_sync_standby(*store);
  for (int round = 0; round < rounds; ++round) {
    std::printf("%s round %d of %d:\n", name.c_str(), round + 1, rounds);
    // With a synchronous standby the two settings run side by side, taking turns at
    // going first, so neither is always the one after the other's table churn.
    const auto replicated_run = [&] {
      rows[7].second.push_back(relay_warm_run(*store, postgres, url, bootstrap, n, postmaster,
                                              marks, idem::PublishAfter::Replicated));
    };
    if (sync_standby && round % 2 == 1) replicated_run();
    rows[0].second.push_back(
        relay_warm_run(*store, postgres, url, bootstrap, n, postmaster, marks));
    if (sync_standby && round % 2 == 0) replicated_run();
    reset_outbox(*store, postgres);
    rows[1].second.push_back(raw_sql_run(*store, postgres, n, postmaster));
    if (other_marks > 0) {
      rows[2].second.push_back(
          relay_warm_run(*store, postgres, url, bootstrap, n, postmaster, other_marks));
    }
    rows[3].second.push_back(relay_warm_run(*store, postgres, url, bootstrap, n, postmaster, 0));
    reset_outbox(*store, postgres);
    rows[4].second.push_back(claim_produce_run(*store, postgres, bootstrap, n, postmaster));
    const std::string ptopic = fmt::format("bench-plain-{}-{}", name, (*topic_seq)++);
    broker.create_topic(ptopic, kPartitions);
    rows[5].second.push_back(plain_producer_run(bootstrap, ptopic, payloads, postmaster));
    const std::string itopic = fmt::format("bench-idem-producer-{}-{}", name, (*topic_seq)++);
    broker.create_topic(itopic, kPartitions);
    rows[6].second.push_back(idem_producer_run(bootstrap, itopic, payloads));
  }
  const auto best = [&](std::size_t row) {
    const std::vector<double>& v = rows[row].second;
    return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
  };
  std::printf(
      "%s, best of %d rounds (events/s; every round; best against the raw loop and the "
      "plain producer's best); cold start %.0f:\n",
      name.c_str(), rounds, cold);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].second.empty()) continue;
    std::printf("%s | %s | %.0f | %s | %.0f%% | %.0f%% |\n", name.c_str(), rows[i].first.c_str(),
                best(i), fmt::format("{:.0f}", fmt::join(rows[i].second, " / ")).c_str(),
                best(i) / best(1) * 100.0, best(i) / best(5) * 100.0);
  }
  if (sync_standby) {
    // Each round's replicated run against its committed neighbour: the ratio that the
    // round-to-round swing of the machine does not reach.
    std::vector<double> ratios;
    for (std::size_t r = 0; r < rows[7].second.size(); ++r) {
      ratios.push_back(rows[7].second[r] / rows[0].second[r] * 100.0);
    }
    std::sort(ratios.begin(), ratios.end());
    std::printf("%s | replicated / committed, per round (sorted) | %s | median %.0f%% |\n",
                name.c_str(), fmt::format("{:.0f}%", fmt::join(ratios, "% / ")).c_str(),
                ratios[ratios.size() / 2]);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t n = argc > 1 ? std::atoll(argv[1]) : 100'000;
  idem::DevBroker broker;
  int topic_seq = 0;
  const std::string sqlite_path = fmt::format("/tmp/idem-bench-relay-{}.sqlite", ::getpid());
  // IDEM_BENCH_SKIP_SQLITE=1: PostgreSQL only (quicker runs while tuning).
  if (std::getenv("IDEM_BENCH_SKIP_SQLITE") == nullptr) {
    bench_backend("sqlite", "sqlite://" + sqlite_path, broker.bootstrap_servers(), broker, n,
                  &topic_seq);
  }
  for (const char* suffix : {"", "-wal", "-shm", "-relay.lock"}) {
    std::filesystem::remove(sqlite_path + suffix);
  }
  const char* dsn = std::getenv("IDEM_BENCH_PG_DSN");
  if (dsn == nullptr) dsn = std::getenv("IDEM_TEST_PG_DSN");
  if (dsn != nullptr && *dsn != '\0') {
    // Figures at fsync on: with-postgres.sh starts the server with it off.
    idem::bench::postgres_durable(dsn);
    std::printf("postgres: %s; build %s; %s\n", idem::bench::postgres_settings(dsn).c_str(),
                idem::bench::build_type(), idem::bench::load_line().c_str());
    bench_backend("postgres", dsn, broker.bootstrap_servers(), broker, n, &topic_seq);
  } else {
    std::printf(
        "postgres: skipped (set IDEM_BENCH_PG_DSN or run under scripts/with-postgres.sh)\n");
  }
  return 0;
}
