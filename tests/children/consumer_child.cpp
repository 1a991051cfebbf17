// A consumer process for the fault tests (tests/fault/consumer_fault_test.cpp): an
// idem::Consumer with the built-in count handler, configured by flags, that can kill
// itself with SIGKILL at a chosen HookPoint (a real process death, not a simulated
// return).
//
//   consumer_child --brokers B --topic T --group G --db URL [--batch N]
//                  [--batch-window-ms MS] [--crash-point none|after_db_commit|after_handler|
//                  before_db_commit|batch_polled|after_offset_commit]
//                  [--crash-probability P] [--seed S] [--kafka key=value]...
//
// stdout protocol (one line each, flushed):
//   "ready"                       the consumer is constructed and about to run()
//   "first-batch"                 the first non-empty batch was polled (it owns partitions)
//   "crash <point> after <n> calls" written just before raise(SIGKILL)
//   "stats delivered=.. processed=.. duplicates=.. dead_lettered=.. retries=.. transactions=.."
//                                 an answer to the stdin line "stats", and once more on exit
//   "stopped"                     after a graceful stop (SIGTERM/SIGINT); exit status 0
// Exit status 2 on a bad argument or a setup error, 3 when run() throws.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
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
  std::vector<std::pair<std::string, std::string>> kafka;
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

Options parse(int argc, char** argv) {
  Options o;
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
      "stats delivered={} processed={} duplicates={} dead_lettered={} retries={} transactions={}",
      s.delivered, s.processed, s.duplicates, s.dead_lettered, s.retries, s.transactions);
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
    // Short backoffs: the DB-outage test waits for the retries to succeed.
    config.retry.initial_backoff = std::chrono::milliseconds(50);
    config.retry.max_backoff = std::chrono::milliseconds(1000);
    config.kafka = opts.kafka;

    auto store = idem::open_store(opts.db);
    idem::migrate_reference_system(*store);

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

    idem::Consumer consumer(config, std::move(store), std::move(hooks));
    consumer.on<idem::OrderConfirmed>(opts.topic, idem::count_handler<idem::OrderConfirmed>());

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
