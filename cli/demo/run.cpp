// `idem demo`: the reference system as separate processes, faults injected phase by
// phase, then audited.
//
//   this process: dev broker (embedded), order service (creates and confirms orders,
//                 writing order.confirmed.v1 to the outbox in the same transaction),
//                 fault injection, progress, audit
//   children:     idem provider             payment provider (Idempotency-Key)
//                 idem relay                outbox -> Kafka
//                 idem consume ×2           billing group (charges the provider)
//                 idem consume              analytics group (revenue per customer)
//
// Phases (docs/demo.md): warm-up (the consumers join their groups); (1) a steady
// stream of orders during which the relay is SIGKILLed at random points, billing-1 and
// analytics are SIGKILLed and restarted, billing-2 is SIGKILLed for good (a rebalance:
// billing-1 takes its partitions), and the provider resets connections after storing
// charges and answers 503; (2) a producer resend: a range of outbox rows is marked
// unpublished and the relay sends them again with the same event_id; (3) malformed
// messages; (4) the provider declines, declined charges land in the DLQ, the cause is
// fixed and `idem dlq replay` sends them back; (5), overlapping (4): the analytics group
// is rewound to offset 0 and re-reads the whole topic. Then every child stops and the
// audit checks the invariant (audit.hpp).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include "demo/audit.hpp"
#include "demo/children.hpp"
#include "demo/demo.hpp"
#include "demo/provider_admin.hpp"
#include "idem/amount.hpp"
#include "idem/devtools/dev_broker.hpp"
#include "idem/devtools/kafka_admin.hpp"
#include "idem/error.hpp"
#include "idem/outbox.hpp"
#include "idem/producer.hpp"
#include "idem/reference/order_service.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"

namespace idem::cli::demo {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

FaultMix FaultMix::parse(const std::string& list) {
  FaultMix m;
  if (list == "all") return m;
  m = FaultMix{false, false, false, false, false, false, false, false};
  if (list == "none") return m;
  std::istringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item == "relay-kill")
      m.relay_kills = true;
    else if (item == "consumer-kill")
      m.consumer_kills = true;
    else if (item == "rebalance")
      m.rebalance = true;
    else if (item == "provider")
      m.provider = true;
    else if (item == "resend")
      m.resend = true;
    else if (item == "malformed")
      m.malformed = true;
    else if (item == "dlq-replay")
      m.dlq_replay = true;
    else if (item == "offset-reset")
      m.offset_reset = true;
    else
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                  fmt::format("--faults: unknown fault '{}' (known: relay-kill, consumer-kill, "
                              "rebalance, provider, resend, malformed, dlq-replay, offset-reset; "
                              "or all, none)",
                              item));
  }
  return m;
}

namespace {

// Messages that can never be valid, one per kind the boundary must reject, each with
// the DLQ error class the consumers must give it.
std::vector<std::pair<std::string, std::string>> malformed_messages() {
  const std::string id = new_uuid_v7().to_string();
  const std::string head = "{\"event_id\":\"" + id + "\",\"event_type\":\"order.confirmed.v1\",";
  const std::string tail =
      R"("occurred_at":"2026-11-29T10:00:00Z","order_id":1,"customer_id":1,"total_amount":"1.00"})";
  return {
      {"{not json", "validation.invalid_json"},
      {head + "\"x\":\"\xff\"," + tail, "validation.invalid_utf8"},
      {R"({"event_type":"order.confirmed.v1",)" + tail, "validation.missing"},
      {R"({"event_id":"not-a-uuid","event_type":"order.confirmed.v1",)" + tail,
       "validation.not_uuid"},
      {R"({"event_id":"6ba7b810-9dad-41d1-80b4-00c04fd430c8","event_type":"order.confirmed.v1",)" +
           tail,
       "validation.not_uuid_v7"},
      {"{\"event_id\":\"" + id + R"(","event_type":"order.cancelled.v1",)" + tail,
       "validation.unknown_event_type"},
      {head + R"("occurred_at":"yesterday","order_id":1,"customer_id":1,"total_amount":"1.00"})",
       "validation.not_rfc3339"},
      {head +
           R"("occurred_at":"2026-11-29T10:00:00Z","order_id":1,"customer_id":1,"total_amount":12.5})",
       "validation.wrong_type"},
      {head +
           R"("occurred_at":"2026-11-29T10:00:00Z","order_id":1,"customer_id":1,"total_amount":"-3.00"})",
       "validation.negative_amount"},
      {head +
           R"("occurred_at":"2026-11-29T10:00:00Z","order_id":1,"customer_id":1,"total_amount":"1.005"})",
       "validation.too_many_fraction_digits"},
  };
}

/// Kafka properties every demo client gets: the mock cluster's first group join waits
/// 3 s (session.timeout.ms must be above that), and a SIGKILLed member's partitions
/// move after session.timeout.ms, so it is as short as the mock allows.
const std::vector<std::string> kClientProperties = {"session.timeout.ms=4000",
                                                    "heartbeat.interval.ms=1000",
                                                    "reconnect.backoff.max.ms=1000", "log_level=3"};

class Demo {
 public:
  explicit Demo(const DemoOptions& o) : o_(o), mix_(FaultMix::parse(o.faults)), rng_(o.seed) {}

  int run() {
    setup();
    start_children();
    phase_warm_up();
    phase_orders_with_kills();
    phase_resend_and_malformed();
    phase_dlq_and_offset_reset();
    wait_or_throw("final", [&] { return drained(); });
    return finish();
  }

  ~Demo() {
    // Children go first (their destructors SIGKILL whatever still runs), then the broker.
    provider_.reset();
    relay_.reset();
    for (auto& c : consumers_) c.reset();
    if (!o_.keep && !failed_ && !dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
  Demo(const Demo&) = delete;
  Demo& operator=(const Demo&) = delete;

 private:
  // ---- setup -----------------------------------------------------------------------

  void setup() {
    started_ = Clock::now();
    deadline_ = started_ + std::chrono::seconds(o_.timeout_s);
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("idem-demo-{}-{}", ::getpid(), Clock::now().time_since_epoch().count());
    std::filesystem::create_directories(dir_ / "logs");
    url_ = o_.db.empty() ? "sqlite://" + (dir_ / "idem.db").string() : o_.db;

    scope_.topic = std::string(kOrderConfirmedTopic);
    scope_.dlq_topic = scope_.topic + ".dlq";
    if (o_.brokers.empty()) {
      broker_.emplace(DevBrokerOptions{
          .brokers = 1, .topics = {{scope_.topic, o_.partitions}, {scope_.dlq_topic, 3}}});
      scope_.brokers = broker_->bootstrap_servers();
    } else {
      scope_.brokers = o_.brokers;
    }
    scope_.partitions = partition_count(scope_.brokers, scope_.topic);
    scope_.dlq_partitions = partition_count(scope_.brokers, scope_.dlq_topic);
    scope_.topic_start = end_offsets(scope_.brokers, scope_.topic, scope_.partitions);
    scope_.dlq_start = end_offsets(scope_.brokers, scope_.dlq_topic, scope_.dlq_partitions);

    store_ = open_store(url_);
    idem::migrate_reference_system(*store_);
    {
      auto tx = store_->begin();
      const Rows rows = tx->execute("SELECT COALESCE(MAX(id), 0) FROM outbox");
      scope_.outbox_after = rows[0].int64(0);
      scope_.first_order = OrderService::next_order_id(*tx);
      tx->rollback();
    }
    scope_.orders = o_.orders;
    std::cout << fmt::format(
        "idem demo: {} orders, store {} ({}), Kafka {} ({}, topic {} with {} partitions), seed {}\n"
        "  child processes log to {}\n",
        o_.orders, to_string(store_->backend()), o_.db.empty() ? "fresh SQLite file" : "--db",
        scope_.brokers, broker_ ? "embedded dev broker" : "--brokers", scope_.topic,
        scope_.partitions, o_.seed, (dir_ / "logs").string());

    // Create every order up front (status 'created'); the phases confirm them.
    orders_ = std::make_unique<OrderService>(outbox_);
    auto tx = store_->begin();
    for (std::int64_t i = 0; i < scope_.orders; ++i) {
      orders_->create(*tx, scope_.first_order + i, 1 + static_cast<std::int64_t>(rng_() % 50),
                      Amount::from_hundredths(100 + static_cast<std::int64_t>(rng_() % 100000)));
    }
    tx->commit();
  }

  std::filesystem::path log(const std::string& name) const {
    return dir_ / "logs" / (name + ".log");
  }

  std::vector<std::string> with_kafka(std::vector<std::string> args) const {
    for (const auto& kv : kClientProperties) {
      args.emplace_back("--kafka");
      args.push_back(kv);
    }
    return args;
  }

  void start_children() {
    step(
        "starting the payment provider, the relay, two billing consumers and an analytics "
        "consumer");
    provider_ = std::make_unique<ManagedChild>(
        "provider",
        std::vector<std::string>{"provider", "--db", "sqlite://" + (dir_ / "provider.db").string(),
                                 "--listen", "127.0.0.1:0", "--seed", std::to_string(o_.seed),
                                 "--latency-ms", std::to_string(o_.provider_latency_ms)},
        "listening ", log("provider"));
    const std::string line = provider_->start();
    provider_url_ = line.substr(std::string_view("listening ").size());

    relay_ = std::make_unique<ManagedChild>(
        "relay",
        with_kafka({"relay", "--db", url_, "--brokers", scope_.brokers, "--poll-interval-ms", "50",
                    "--batch-size", "100", "--progress-ms", "0"}),
        "ready", log("relay"));
    relay_->start();

    const auto consumer = [&](const std::string& name, std::string_view group,
                              std::vector<std::string> handler) {
      std::vector<std::string> args{"consume",    "--brokers", scope_.brokers,          "--topic",
                                    scope_.topic, "--group",   std::string(group),      "--db",
                                    url_,         "--batch",   std::to_string(o_.batch)};
      args.insert(args.end(), handler.begin(), handler.end());
      return std::make_unique<ManagedChild>(name, with_kafka(std::move(args)), "consuming",
                                            log(name));
    };
    consumers_[kBilling1] =
        consumer("billing-1", kBilling, {"--handler", "billing", "--provider-url", provider_url_});
    consumers_[kBilling2] =
        consumer("billing-2", kBilling, {"--handler", "billing", "--provider-url", provider_url_});
    consumers_[kAnalyticsConsumer] = consumer("analytics", kAnalytics, {"--handler", "analytics"});
    for (auto& c : consumers_) c->start();
  }

  // ---- progress and waiting --------------------------------------------------------

  void step(std::string_view what) {
    const double t = std::chrono::duration<double>(Clock::now() - started_).count();
    std::cout << fmt::format("[{:5.1f}s] {}\n", t, what) << std::flush;
  }

  /// The live counts; the last ones read when the database is busy. (SQLite: every
  /// transaction takes the write lock, and a billing batch holds it through its calls
  /// to the provider, retries included.)
  Counts counts() {
    try {
      last_counts_ = read_counts(*store_, scope_);
    } catch (const Error& e) {
      if (!e.transient()) throw;
    }
    return last_counts_;
  }

  void progress_line(std::string_view phase) {
    const Counts c = counts();
    const double t = std::chrono::duration<double>(Clock::now() - started_).count();
    std::cout << fmt::format(
                     "[{:5.1f}s]   {:<14} confirmed {}/{}  published {}  billed {}  analytics {}\n",
                     t, phase, confirmed_, scope_.orders, c.events - c.unpublished, c.billing,
                     c.analytics)
              << std::flush;
  }

  /// Polls `done` (and runs `tick` between polls) until it holds; prints a progress
  /// line every second. Throws when the demo's deadline passes first.
  void wait_or_throw(std::string_view phase, const std::function<bool()>& done,
                     const std::function<void()>& tick = {}) {
    auto next_print = Clock::now() + 1s;
    while (!done()) {
      if (Clock::now() >= deadline_) {
        progress_line(phase);
        print_offsets();
        throw std::runtime_error(
            fmt::format("phase '{}' did not finish before --timeout {} s", phase, o_.timeout_s));
      }
      if (tick) tick();
      std::this_thread::sleep_for(
          100ms);  // polling interval of the condition, not a synchronisation
      if (Clock::now() >= next_print) {
        next_print = Clock::now() + 1s;
        progress_line(phase);
      }
    }
  }

  /// Committed offsets of both groups against the end offsets, for a stuck phase.
  void print_offsets() {
    try {
      const auto end = end_offsets(scope_.brokers, scope_.topic, scope_.partitions, 5s);
      std::cout << fmt::format("  end offsets        {}\n", fmt::join(end, " "));
      for (const auto group : {kBilling, kAnalytics}) {
        std::cout << fmt::format("  committed {:<9}{}\n", group.substr(0, group.find('-')),
                                 fmt::join(committed_offsets(scope_.brokers, std::string(group),
                                                             scope_.topic, scope_.partitions, 5s),
                                           " "));
      }
    } catch (const std::exception& e) {
      std::cout << "  offsets: " << e.what() << "\n";
    }
  }

  /// `group` committed every partition up to its end: everything on the topic is
  /// processed, dead-lettered or skipped as a duplicate, and the DB commit came first.
  bool caught_up(std::string_view group) {
    try {
      const auto end = end_offsets(scope_.brokers, scope_.topic, scope_.partitions, 5s);
      const auto committed = committed_offsets(scope_.brokers, std::string(group), scope_.topic,
                                               scope_.partitions, 5s);
      for (std::size_t p = 0; p < end.size(); ++p) {
        if (end[p] > 0 && committed[p] != end[p]) return false;
      }
      return true;
    } catch (const Error&) {
      return false;  // the coordinator is busy with a rebalance: ask again later
    }
  }

  /// The system settled: the relay published every confirmed order's event and both
  /// groups committed offsets up to the end of the topic. Offsets are committed only
  /// after the DB commit (or the DLQ acknowledgement), so every record on the topic has
  /// been applied, skipped as a duplicate or dead-lettered. Whether that is right is the
  /// audit's question, not the wait's: a wait for "every effect applied" would turn a
  /// lost event into a timeout instead of a violation.
  bool drained() {
    Counts c;
    try {
      c = read_counts(*store_, scope_);
    } catch (const Error& e) {
      if (!e.transient()) throw;
      return false;  // busy: ask again later
    }
    if (c.unpublished != 0 || c.events != confirmed_) return false;
    return caught_up(kBilling) && caught_up(kAnalytics);
  }

  // ---- the order service -----------------------------------------------------------

  /// Confirms the next `n` orders, each in its own transaction (order row + outbox row).
  void confirm(std::int64_t n, const std::function<void(std::int64_t)>& after_each = {}) {
    for (std::int64_t i = 0; i < n && confirmed_ < scope_.orders; ++i) {
      for (;;) {
        try {
          (void)orders_->confirm(*store_, scope_.first_order + confirmed_);
          break;
        } catch (const Error& e) {
          // Busy beyond confirm()'s own redos (see counts()): redo until the deadline.
          // An InDoubt COMMIT is not redone blindly: confirm() changes nothing when the
          // order is already confirmed, so redoing it is safe here.
          if (!e.transient() || Clock::now() >= deadline_) throw;
        }
      }
      ++confirmed_;
      if (after_each) after_each(confirmed_);
    }
  }

  // ---- phases ----------------------------------------------------------------------

  void phase_warm_up() {
    // The mock cluster's first group join takes about 3 s: the first orders wait for
    // every consumer to be in its group, so that the kills below land in their work.
    const std::int64_t n = std::max<std::int64_t>(1, scope_.orders / 10);
    step(fmt::format("warm-up: {} orders; the consumers join their groups", n));
    confirm(n);
    wait_or_throw("warm-up", [&] { return drained(); });
  }

  void phase_orders_with_kills() {
    const std::int64_t n = scope_.orders / 2;
    if (mix_.provider) {
      set_provider_faults(provider_url_, {.reset_after_commit = o_.reset_after_commit,
                                          .unavailable = o_.unavailable,
                                          .decline = 0,
                                          .latency_ms = o_.provider_latency_ms});
      step(fmt::format("provider faults on: connection reset after a stored charge p={}, 503 p={}",
                       o_.reset_after_commit, o_.unavailable));
    }
    // Kills at random points of a steady stream of orders, so that they land in the
    // middle of the victims' work: the relay wherever it is (claiming, producing,
    // waiting for acknowledgements, marking), billing-1 and analytics alternately
    // (restarted at once), billing-2 for good (the rebalance: its partitions move to
    // billing-1 once its session times out).
    enum class Victim { Relay, Billing1, Analytics, Billing2ForGood };
    std::multimap<std::int64_t, Victim> kills;
    // Consumers die in the first 60% of the stream, so that their groups have recovered
    // (after session.timeout.ms) by the time the stream ends.
    std::uniform_int_distribution<std::int64_t> anywhere(1, std::max<std::int64_t>(1, n - 1));
    std::uniform_int_distribution<std::int64_t> early(1, std::max<std::int64_t>(1, n * 6 / 10));
    if (mix_.relay_kills) {
      for (int i = 0; i < o_.relay_kills; ++i) kills.emplace(anywhere(rng_), Victim::Relay);
    }
    if (mix_.consumer_kills) {
      for (int i = 0; i < o_.consumer_kills; ++i)
        kills.emplace(early(rng_), i % 2 == 0 ? Victim::Billing1 : Victim::Analytics);
    }
    if (mix_.rebalance) kills.emplace(early(rng_), Victim::Billing2ForGood);
    step(fmt::format("phase 1: {} orders over {} s; {} SIGKILLs at random points", n,
                     kPhaseOneSeconds, kills.size()));
    // The pace of the order stream (not a synchronisation: nothing waits on it).
    const auto pause =
        std::chrono::microseconds(kPhaseOneSeconds * 1'000'000 / std::max<std::int64_t>(1, n));
    std::int64_t done_in_phase = 0;
    confirm(n, [&](std::int64_t) {
      ++done_in_phase;
      const auto [first, last] = kills.equal_range(done_in_phase);
      for (auto it = first; it != last; ++it) {
        ManagedChild& victim = it->second == Victim::Relay       ? *relay_
                               : it->second == Victim::Analytics ? *consumers_[kAnalyticsConsumer]
                               : it->second == Victim::Billing1  ? *consumers_[kBilling1]
                                                                 : *consumers_[kBilling2];
        if (!victim.running()) continue;
        victim.kill();
        const bool restart = it->second != Victim::Billing2ForGood;
        if (restart) victim.start();
        step(fmt::format("  {} SIGKILLed after {} of {} orders{}", victim.name(), done_in_phase, n,
                         restart ? " and restarted" : "; billing-1 takes over its partitions"));
      }
      std::this_thread::sleep_for(pause);
    });
    wait_or_throw("kills", [&] { return drained(); });
    if (mix_.provider) set_provider_faults(provider_url_, {.latency_ms = o_.provider_latency_ms});
  }

  void phase_resend_and_malformed() {
    inject_resend();
    inject_malformed();
    if (mix_.resend || mix_.malformed) wait_or_throw("resend+bad", [&] { return drained(); });
  }

  void inject_resend() {
    if (!mix_.resend) return;
    // A producer resend: a range of published outbox rows becomes unpublished again, as
    // if the relay had lost its marks, and the relay sends the same events (same
    // event_id) once more.
    const Counts c = counts();
    const auto count = static_cast<std::int64_t>(static_cast<double>(c.events) * o_.resend_share);
    if (count <= 0) return;
    const std::int64_t first =
        scope_.outbox_after + 1 +
        std::uniform_int_distribution<std::int64_t>(0, c.events - count)(rng_);
    auto tx = store_->begin();
    injected_.resent_rows =
        tx->execute("UPDATE outbox SET published_at = NULL WHERE id >= $1 AND id < $2", first,
                    first + count)
            .affected();
    tx->commit();
    step(fmt::format(
        "phase 2: producer resend: {} outbox rows published again with the same event_id",
        injected_.resent_rows));
  }

  void inject_malformed() {
    if (!mix_.malformed) return;
    ProducerConfig pc;
    pc.bootstrap_servers = scope_.brokers;
    Producer producer(pc);
    const auto bad = malformed_messages();
    for (const auto& [payload, reason] : bad) {
      (void)producer.send(ProducerMessage{.topic = scope_.topic,
                                          .key = "malformed",
                                          .payload = payload,
                                          .event_id = Uuid(),
                                          .traceparent = {},
                                          .headers = {}});
      ++injected_.malformed_by_class[reason];
    }
    std::vector<Delivery> deliveries;
    if (!producer.flush(30s, deliveries))
      throw std::runtime_error("the broker did not acknowledge the malformed messages");
    step(fmt::format("phase 3: {} malformed messages, one of each kind the boundary rejects",
                     bad.size()));
  }

  /// Phases 4 and 5 overlap, because each costs the mock cluster's slow group joins:
  /// billing meets declines (DLQ) while the analytics group is rewound to offset 0.
  void phase_dlq_and_offset_reset() {
    const bool replay = mix_.dlq_replay && has_subcommand({"dlq", "replay"});
    if (mix_.dlq_replay && !replay)
      step("phase 4: DLQ replay SKIPPED: this build has no `idem dlq replay`");
    if (replay) {
      set_provider_faults(provider_url_,
                          {.decline = o_.decline, .latency_ms = o_.provider_latency_ms});
      step(fmt::format(
          "phase 4: the provider declines p={}; declined charges go to the DLQ with their reason",
          o_.decline));
    }
    if (mix_.offset_reset) {
      step(
          "phase 5: offset reset to earliest: analytics stops, its group is rewound to offset 0, "
          "it restarts");
      consumers_[kAnalyticsConsumer]->stop();
    }
    const std::int64_t rest = scope_.orders - confirmed_;
    step(fmt::format("phases 4-5: the last {} orders", rest));
    confirm(rest);
    if (mix_.offset_reset) {
      std::vector<std::pair<std::string, std::string>> props;
      for (const auto& kv : kClientProperties) {
        props.emplace_back(kv.substr(0, kv.find('=')), kv.substr(kv.find('=') + 1));
      }
      rewind_group(scope_.brokers, std::string(kAnalytics), scope_.topic, scope_.partitions, 60s,
                   props);
      injected_.offset_reset = true;
      consumers_[kAnalyticsConsumer]->start();
      step("phase 5: analytics re-reads the whole topic from offset 0");
    }
    if (!replay) {
      wait_or_throw("offset reset", [&] { return drained(); });
      return;
    }
    wait_or_throw("declines", [&] { return drained(); });
    set_provider_faults(provider_url_, {.latency_ms = o_.provider_latency_ms});
    step(
        "phase 4: the cause is fixed (declines off); `idem dlq replay` sends the billing DLQ "
        "entries back");
    ChildProcess replayer = ChildProcess::spawn(
        self_program(),
        {"dlq", "replay", "--brokers", scope_.brokers, "--topic", scope_.dlq_topic, "--to",
         scope_.topic, "--reason", "handler.dead_letter", "--group", std::string(kBilling)},
        {}, log("dlq-replay").string());
    std::string last;
    while (auto line = replayer.read_line(60s)) {
      std::cout << "  dlq replay: " << *line << "\n";
      last = *line;
    }
    if (const int status = replayer.wait(60s); status != 0) {
      throw std::runtime_error(fmt::format("idem dlq replay exited with {}; see {}", status,
                                           log("dlq-replay").string()));
    }
    const auto counters = parse_counters(last);
    const auto it = counters.find("replayed");
    injected_.dlq_replayed = it == counters.end() ? 0 : static_cast<std::int64_t>(it->second);
    wait_or_throw("dlq replay", [&] { return drained(); });
  }

  // ---- the end ----------------------------------------------------------------------

  int finish() {
    step("stopping the children (SIGTERM) and auditing");
    std::optional<ProviderSummary> summary;
    try {
      summary = provider_summary(provider_url_);
    } catch (const std::exception& e) {
      std::cerr << "idem demo: " << e.what() << "\n";
    }
    relay_->stop();
    for (auto& c : consumers_) c->stop();
    provider_->stop();
    const std::vector<const ManagedChild*> children{
        relay_.get(), consumers_[kBilling1].get(), consumers_[kBilling2].get(),
        consumers_[kAnalyticsConsumer].get(), provider_.get()};
    const AuditResult result = audit(*store_, scope_, injected_, summary, children);
    const double secs = std::chrono::duration<double>(Clock::now() - started_).count();
    std::cout << fmt::format("\nfinished in {:.1f} s\n", secs);
    if (!result.violations.empty()) {
      failed_ = true;
      std::cout << "FAILED: the exactly-once invariant does not hold (logs kept in "
                << dir_.string() << ")\n";
      return 1;
    }
    std::cout
        << "OK: every order charged exactly once with one ledger row, analytics totals exact, "
           "no valid event lost, every malformed message in the DLQ with its reason\n";
    return 0;
  }

 public:
  void mark_failed() { failed_ = true; }
  [[nodiscard]] std::filesystem::path dir() const { return dir_; }

 private:
  static constexpr int kPhaseOneSeconds = 3;
  static constexpr int kBilling1 = 0;
  static constexpr int kBilling2 = 1;
  static constexpr int kAnalyticsConsumer = 2;

  DemoOptions o_;
  FaultMix mix_;
  std::mt19937_64 rng_;
  Clock::time_point started_;
  Clock::time_point deadline_;
  std::filesystem::path dir_;
  std::string url_;
  std::optional<DevBroker> broker_;  // declared before the children: destroyed after them
  RunScope scope_;
  std::unique_ptr<Store> store_;
  Outbox outbox_;
  std::unique_ptr<OrderService> orders_;
  std::int64_t confirmed_ = 0;
  std::string provider_url_;
  std::unique_ptr<ManagedChild> provider_;
  std::unique_ptr<ManagedChild> relay_;
  std::unique_ptr<ManagedChild> consumers_[3];
  Injected injected_;
  Counts last_counts_;
  bool failed_ = false;
};

}  // namespace

int run_demo(const DemoOptions& options) {
  Demo demo(options);
  try {
    return demo.run();
  } catch (...) {
    demo.mark_failed();
    std::cerr << "idem demo: logs kept in " << demo.dir().string() << "\n";
    throw;
  }
}

}  // namespace idem::cli::demo
