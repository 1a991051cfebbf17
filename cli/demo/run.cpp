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
#include "demo/faults.hpp"
#include "demo/processes.hpp"
#include "demo/progress.hpp"
#include "demo/provider_admin.hpp"
#include "idem/amount.hpp"
#include "idem/devtools/dev_broker.hpp"
#include "idem/devtools/kafka_admin.hpp"
#include "idem/error.hpp"
#include "idem/outbox.hpp"
#include "idem/producer.hpp"
#include "idem/reference/order_service.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "store_schema.hpp"

namespace idem::cli::demo {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

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
    progress_->wait_or_throw("final", [&] { return progress_->drained(); });
    return finish();
  }

  ~Demo() {
    // Children go first (their destructors SIGKILL whatever still runs), then the broker.
    processes_.reset();
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
    static_cast<void>(migrate_store(*store_, {}, /*reference=*/true));
    progress_ = std::make_unique<Progress>(scope_, *store_, confirmed_,
                                           static_cast<int>(o_.timeout.count()));
    {
      auto tx = store_->begin();
      scope_.outbox_after = outbox_last_row_id(*tx);
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

  void start_children() {
    progress_->step(
        "starting the payment provider, the relay, two billing consumers and an analytics "
        "consumer");
    processes_ = std::make_unique<DemoProcesses>(dir_ / "logs");
    processes_->start(scope_, url_, o_);
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
          // Busy beyond confirm()'s own redos (see Progress::counts()): redo until the deadline.
          // An InDoubt COMMIT is not redone blindly: confirm() changes nothing when the
          // order is already confirmed, so redoing it is safe here.
          if (!e.transient() || progress_->past_deadline()) throw;
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
    progress_->step(fmt::format("warm-up: {} orders; the consumers join their groups", n));
    confirm(n);
    progress_->wait_or_throw("warm-up", [&] { return progress_->drained(); });
  }

  void phase_orders_with_kills() {
    const std::int64_t n = scope_.orders / 2;
    if (mix_.provider) {
      set_provider_faults(processes_->provider_url(),
                          {.reset_after_commit = o_.reset_after_commit,
                           .unavailable = o_.unavailable,
                           .decline = 0,
                           .latency_ms = static_cast<int>(o_.provider_latency.count())});
      progress_->step(
          fmt::format("provider faults on: connection reset after a stored charge p={}, 503 p={}",
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
    progress_->step(fmt::format("phase 1: {} orders over {} s; {} SIGKILLs at random points", n,
                                kPhaseOneSeconds, kills.size()));
    // The pace of the order stream (not a synchronisation: nothing waits on it).
    const auto pause = std::chrono::microseconds(std::int64_t{kPhaseOneSeconds} * 1'000'000 /
                                                 std::max<std::int64_t>(1, n));
    std::int64_t done_in_phase = 0;
    confirm(n, [&](std::int64_t) {
      ++done_in_phase;
      const auto [first, last] = kills.equal_range(done_in_phase);
      for (auto it = first; it != last; ++it) {
        ManagedChild& victim = it->second == Victim::Relay       ? processes_->relay()
                               : it->second == Victim::Analytics ? processes_->analytics()
                               : it->second == Victim::Billing1  ? processes_->billing1()
                                                                 : processes_->billing2();
        if (!victim.running()) continue;
        victim.kill();
        const bool restart = it->second != Victim::Billing2ForGood;
        if (restart) victim.start();
        progress_->step(
            fmt::format("  {} SIGKILLed after {} of {} orders{}", victim.name(), done_in_phase, n,
                        restart ? " and restarted" : "; billing-1 takes over its partitions"));
      }
      std::this_thread::sleep_for(pause);
    });
    progress_->wait_or_throw("kills", [&] { return progress_->drained(); });
    if (mix_.provider)
      set_provider_faults(processes_->provider_url(),
                          {.latency_ms = static_cast<int>(o_.provider_latency.count())});
  }

  void phase_resend_and_malformed() {
    inject_resend();
    inject_malformed();
    if (mix_.resend || mix_.malformed)
      progress_->wait_or_throw("resend+bad", [&] { return progress_->drained(); });
  }

  void inject_resend() {
    if (!mix_.resend) return;
    injected_.resent_rows =
        resend_outbox_rows(*store_, scope_, progress_->counts().events, o_.resend_share, rng_);
    if (injected_.resent_rows == 0) return;
    progress_->step(fmt::format(
        "phase 2: producer resend: {} outbox rows published again with the same event_id",
        injected_.resent_rows));
  }

  void inject_malformed() {
    if (!mix_.malformed) return;
    const std::size_t sent = produce_malformed(scope_, injected_);
    progress_->step(
        fmt::format("phase 3: {} malformed messages, one of each kind the boundary rejects", sent));
  }

  /// Phases 4 and 5 overlap, because each costs the mock cluster's slow group joins:
  /// billing meets declines (DLQ) while the analytics group is rewound to offset 0.
  void phase_dlq_and_offset_reset() {
    const bool replay = mix_.dlq_replay && has_subcommand({"dlq", "replay"});
    if (mix_.dlq_replay && !replay)
      progress_->step("phase 4: DLQ replay SKIPPED: this build has no `idem dlq replay`");
    if (replay) {
      set_provider_faults(
          processes_->provider_url(),
          {.decline = o_.decline, .latency_ms = static_cast<int>(o_.provider_latency.count())});
      progress_->step(fmt::format(
          "phase 4: the provider declines p={}; declined charges go to the DLQ with their reason",
          o_.decline));
    }
    if (mix_.offset_reset) {
      progress_->step(
          "phase 5: offset reset to earliest: analytics stops, its group is rewound to offset 0, "
          "it restarts");
      processes_->analytics().stop();
    }
    const std::int64_t rest = scope_.orders - confirmed_;
    progress_->step(fmt::format("phases 4-5: the last {} orders", rest));
    confirm(rest);
    if (mix_.offset_reset) {
      // Both places a consumer reads its position from: Kafka's committed offsets and the
      // store's (a reset made in Kafka alone is reported by the consumer, not followed).
      std::map<std::int32_t, std::int64_t> zero;
      for (int p = 0; p < scope_.partitions; ++p) zero[p] = 0;
      reset_group_offsets(*store_, scope_.brokers, std::string(kAnalytics), scope_.topic, zero, 60s,
                          demo_client_properties());
      injected_.offset_reset = true;
      processes_->analytics().start();
      progress_->step("phase 5: analytics re-reads the whole topic from offset 0");
    }
    if (!replay) {
      progress_->wait_or_throw("offset reset", [&] { return progress_->drained(); });
      return;
    }
    progress_->wait_or_throw("declines", [&] { return progress_->drained(); });
    set_provider_faults(processes_->provider_url(),
                        {.latency_ms = static_cast<int>(o_.provider_latency.count())});
    progress_->step(
        "phase 4: the cause is fixed (declines off); `idem dlq replay` sends the billing DLQ "
        "entries back");
    injected_.dlq_replayed = run_dlq_replay(scope_, processes_->log("dlq-replay"));
    progress_->wait_or_throw("dlq replay", [&] { return progress_->drained(); });
  }

  // ---- the end ----------------------------------------------------------------------

  int finish() {
    progress_->step("stopping the children (SIGTERM) and auditing");
    std::optional<ProviderSummary> summary;
    try {
      summary = provider_summary(processes_->provider_url());
    } catch (const std::exception& e) {
      std::cerr << "idem demo: " << e.what() << "\n";
    }
    processes_->stop_all();
    const AuditResult result = audit(*store_, scope_, injected_, summary, processes_->all());
    std::cout << fmt::format("\nfinished in {:.1f} s\n", progress_->elapsed_s());
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

  DemoOptions o_;
  FaultMix mix_;
  std::mt19937_64 rng_;
  std::filesystem::path dir_;
  std::string url_;
  std::optional<DevBroker> broker_;  // declared before the children: destroyed after them
  RunScope scope_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Progress> progress_;
  Outbox outbox_;
  std::unique_ptr<OrderService> orders_;
  std::int64_t confirmed_ = 0;
  std::unique_ptr<DemoProcesses> processes_;
  Injected injected_;
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
