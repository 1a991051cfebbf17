// The consumer process of the multi-process tests: an idem::Consumer configured by flags
// that can kill itself with SIGKILL at a chosen HookPoint (a real process death, not a
// simulated return). Its handler, by --handler:
//   count   the built-in count handler (one effect_log row per event; the default);
//   effect  an effect handler (Consumer::on_effect) whose call phase completes after 20 ms
//           on another thread (a stand-in for an HTTP call), up to 256 in flight, and
//           whose apply phase writes the count handler's row;
// either way, the order ids given with --always-retry ask for a retry on every attempt.
//
//   consumer_child --brokers B --topic T --group G --db URL [--handler count|effect]
//                  [--batch N] [--batch-window-ms MS] [--crash-point none|after_db_commit|
//                  after_handler|before_db_commit|batch_polled|after_offset_commit]
//                  [--crash-probability P] [--seed S] [--retry-delays-ms MS[,MS...]]
//                  [--always-retry ORDER_ID]... [--kafka key=value]...
//                  [--migrate yes|no] [--pipeline-depth 1|2]
//
// --pipeline-depth defaults to IDEM_CONSUMER_PIPELINE_DEPTH (the variable `idem consume`
// reads for consumer.pipeline_depth), else 1: the fault suites run once more with it set
// to 2 (tests/CMakeLists.txt), for these children and the CLI alike.
//
// --migrate no leaves the store as it is (the consumer must then refuse to start on a
// store without idem's schema); by default it is migrated first, as `idem consume` does.
//
// stdout protocol (one line each, flushed):
//   "ready"                       the consumer is constructed and about to run()
//   "first-batch"                 the first non-empty batch was polled (it owns partitions)
//   "crash <point> after <n> calls" written just before raise(SIGKILL)
//   "stats delivered=.. processed=.. duplicates=.. dead_lettered=.. retries=.. transactions=..
//          calls=.. retry_topic_sends=.. offset_disagreements=.. offset_records_not_read_again=.."
//                                 an answer to the stdin line "stats", and once more on exit
//   "stopped"                     after a graceful stop (SIGTERM/SIGINT); exit status 0
// The consumer's log lines go to stderr. Exit status 2 on a bad argument or a setup error,
// 3 when run() throws.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <iostream>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/consumer.hpp"
#include "idem/error.hpp"
#include "idem/reference/count_handler.hpp"
#include "idem/reference/order_confirmed.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "support/delayed_calls.hpp"

namespace {

struct Options {
  std::string brokers;
  std::string topic;
  std::string group;
  std::string db;
  std::size_t batch = 100;
  int batch_window_ms = 20;
  std::optional<idem::HookPoint> crash_point;
  double crash_probability = 0.0;
  std::uint64_t seed = 1;
  bool effect = false;
  std::vector<std::chrono::milliseconds> retry_delays;
  std::vector<std::int64_t> always_retry;
  std::vector<std::pair<std::string, std::string>> kafka;
  bool migrate = true;
  std::size_t pipeline_depth = 1;
};

std::mutex g_out_mutex;

/// One line to stdout, flushed: the parent reads it through a pipe.
void say(std::string_view line) {
  std::lock_guard lock(g_out_mutex);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

[[noreturn]] void usage(const std::string& message) {
  std::fprintf(stderr, "consumer_child: %s\n", message.c_str());
  std::exit(2);
}

std::optional<idem::HookPoint> parse_point(std::string_view name) {
  for (const auto p : {idem::HookPoint::BatchPolled, idem::HookPoint::AfterHandler,
                       idem::HookPoint::BeforeDbCommit, idem::HookPoint::AfterDbCommit,
                       idem::HookPoint::AfterOffsetCommit}) {
    if (idem::to_string(p) == name) return p;
  }
  if (name != "none") usage(fmt::format("unknown crash point '{}'", name));
  return std::nullopt;
}

std::vector<std::chrono::milliseconds> parse_delays(const std::string& list) {
  std::vector<std::chrono::milliseconds> out;
  std::size_t begin = 0;
  while (begin <= list.size()) {
    const std::size_t end = std::min(list.find(',', begin), list.size());
    out.emplace_back(std::stoll(list.substr(begin, end - begin)));
    begin = end + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  if (const char* depth = std::getenv("IDEM_CONSUMER_PIPELINE_DEPTH")) {
    try {
      o.pipeline_depth = std::stoul(depth);
    } catch (const std::logic_error&) {
      usage(fmt::format("bad IDEM_CONSUMER_PIPELINE_DEPTH '{}'", depth));
    }
  }
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) usage(fmt::format("{} needs a value", flag));
    const std::string value = argv[++i];
    try {
      if (flag == "--brokers")
        o.brokers = value;
      else if (flag == "--topic")
        o.topic = value;
      else if (flag == "--group")
        o.group = value;
      else if (flag == "--db")
        o.db = value;
      else if (flag == "--batch")
        o.batch = std::stoul(value);
      else if (flag == "--batch-window-ms")
        o.batch_window_ms = std::stoi(value);
      else if (flag == "--crash-point")
        o.crash_point = parse_point(value);
      else if (flag == "--crash-probability")
        o.crash_probability = std::stod(value);
      else if (flag == "--seed")
        o.seed = std::stoull(value);
      else if (flag == "--handler") {
        if (value != "count" && value != "effect") usage("--handler is count or effect");
        o.effect = value == "effect";
      } else if (flag == "--retry-delays-ms")
        o.retry_delays = parse_delays(value);
      else if (flag == "--always-retry")
        o.always_retry.push_back(std::stoll(value));
      else if (flag == "--pipeline-depth")
        o.pipeline_depth = std::stoul(value);
      else if (flag == "--migrate" && (value == "yes" || value == "no"))
        o.migrate = value == "yes";
      else if (flag == "--kafka") {
        const auto eq = value.find('=');
        if (eq == std::string::npos || eq == 0) usage("--kafka expects key=value");
        o.kafka.emplace_back(value.substr(0, eq), value.substr(eq + 1));
      } else {
        usage(fmt::format("unknown flag {}", flag));
      }
    } catch (const std::logic_error&) {  // stoul & co.
      usage(fmt::format("bad value for {}: '{}'", flag, value));
    }
  }
  if (o.brokers.empty() || o.topic.empty() || o.group.empty() || o.db.empty())
    usage("--brokers, --topic, --group and --db are required");
  return o;
}

std::string stats_line(const idem::ConsumerStats& s) {
  return fmt::format(
      "stats delivered={} processed={} duplicates={} dead_lettered={} retries={} transactions={} "
      "calls={} retry_topic_sends={} offset_disagreements={} offset_records_not_read_again={}",
      s.delivered, s.processed, s.duplicates, s.dead_lettered, s.retries, s.transactions, s.calls,
      s.retry_topic_sends, s.offset_disagreements, s.offset_records_not_read_again);
}

}  // namespace

int main(int argc, char** argv) {
  const Options opts = parse(argc, argv);

  // SIGTERM/SIGINT become consumer.stop() on a thread of their own (nothing runs in a
  // signal handler). Blocked before librdkafka starts its threads, which inherit the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  try {
    idem::ConsumerConfig config;
    config.bootstrap_servers = opts.brokers;
    config.group_id = opts.group;
    config.topics = {opts.topic};
    config.batch_size = opts.batch;
    config.batch_window = std::chrono::milliseconds(opts.batch_window_ms);
    config.pipeline_depth = opts.pipeline_depth;
    // Short backoffs: the DB-outage test waits for the retries to succeed.
    config.retry.initial_backoff = std::chrono::milliseconds(50);
    config.retry.max_backoff = std::chrono::milliseconds(1000);
    config.retry_topics.delays = opts.retry_delays;
    config.kafka = opts.kafka;
    // The dev broker never answers the check's DescribeConfigs; dedup_horizon_test is about it.
    config.check_topic_retention = false;

    auto store = idem::open_store(opts.db);
    if (opts.migrate) idem::migrate_reference_system(*store);

    std::mt19937_64 rng(opts.seed);
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    bool first_batch = true;
    std::uint64_t calls = 0;  // calls at the crash point, for the crash line
    idem::ConsumerHooks hooks;
    hooks.at = [&](idem::HookPoint point) {
      if (point == idem::HookPoint::BatchPolled && first_batch) {
        first_batch = false;
        say("first-batch");
      }
      if (!opts.crash_point || point != *opts.crash_point) return;
      ++calls;
      if (coin(rng) < opts.crash_probability) {
        say(fmt::format("crash {} after {} calls", idem::to_string(point), calls));
        ::raise(SIGKILL);
      }
    };

    // Declared before the consumer: calls still waiting complete into a closed queue.
    idem::test::DelayedCalls client;
    idem::Consumer consumer(config, std::move(store), std::move(hooks));
    const auto always_retry = [&opts](const idem::OrderConfirmed& e) {
      const auto& ids = opts.always_retry;
      return std::find(ids.begin(), ids.end(), e.order_id) != ids.end();
    };
    if (opts.effect) {
      consumer.on_effect(
          opts.topic,
          idem::EffectHandler<idem::OrderConfirmed, bool>{
              .call =
                  [&client, always_retry](const idem::OrderConfirmed& e, const idem::RecordInfo&,
                                          idem::CallCompletion<bool> done) {
                    const bool retry = always_retry(e);
                    client.after(std::chrono::milliseconds(20), [done, retry] {
                      if (retry) return done.retry("--always-retry");
                      done.done(true);
                    });
                  },
              .apply =
                  [](const idem::OrderConfirmed& event, const idem::RecordInfo& record, const bool&,
                     idem::Transaction& tx) {
                    idem::record_effect(tx, event.event_id, record);
                    return idem::Outcome::Done;
                  },
              .ordering_key = {}});
    } else {
      consumer.on<idem::OrderConfirmed>(
          opts.topic,
          [always_retry, count = idem::count_handler<idem::OrderConfirmed>()](
              const idem::OrderConfirmed& e, const idem::RecordInfo& r, idem::Transaction& tx) {
            return always_retry(e) ? idem::Outcome::Retry : count(e, r, tx);
          });
    }

    std::atomic<bool> done{false};
    std::thread signal_waiter([&] {
      const timespec slice{0, 100'000'000};
      while (!done.load()) {
        if (sigtimedwait(&stop_signals, nullptr, &slice) > 0) consumer.stop();
      }
    });
    // stdin: "stats" asks for a stats line. EOF ends the control channel only.
    std::thread control([&] {
      std::string line;
      while (std::getline(std::cin, line)) {
        if (line == "stats") say(stats_line(consumer.stats()));
      }
    });
    control.detach();  // blocked in read(); the process exit ends it

    say("ready");
    int status = 0;
    try {
      consumer.run();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "consumer_child: run: %s\n", e.what());
      status = 3;
    }
    done.store(true);
    signal_waiter.join();
    say(stats_line(consumer.stats()));
    if (status == 0) say("stopped");
    std::fflush(stdout);
    // The detached control thread may still sit in std::getline; skip static destructors.
    std::_Exit(status);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer_child: %s\n", e.what());
    return 2;
  }
}
