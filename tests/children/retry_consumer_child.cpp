// A consumer process with non-blocking retry topics on, for tests/fault/retry_headers_test.cpp:
// an idem::Consumer whose handler records every event with the count handler, except the
// order ids given with --always-retry, for which it asks for a retry (Outcome::Retry)
// every time. A crash of the consumer is a real process death the parent sees.
//
//   retry_consumer_child --brokers B --topic T --group G --db URL
//                        --retry-delays-ms MS[,MS...] [--always-retry ORDER_ID]...
//                        [--kafka key=value]...
//
// stdout protocol (one line each, flushed):
//   "ready"      the consumer is constructed and about to run()
//   "stats delivered=.. processed=.. dead_lettered=.. retry_topic_sends=.. retries=.."
//                an answer to the stdin line "stats", and once more on exit
//   "stopped"    after a graceful stop (SIGTERM/SIGINT); exit status 0
// The consumer's log lines go to stderr. Exit status 2 on a bad argument or a setup error,
// 3 when run() throws.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <iostream>
#include <mutex>
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
  std::vector<std::chrono::milliseconds> retry_delays;
  std::vector<std::int64_t> always_retry;
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
  std::fprintf(stderr, "retry_consumer_child: %s\n", message.c_str());
  std::exit(2);
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
      else if (flag == "--retry-delays-ms")
        o.retry_delays = parse_delays(value);
      else if (flag == "--always-retry")
        o.always_retry.push_back(std::stoll(value));
      else if (flag == "--kafka") {
        const auto eq = value.find('=');
        if (eq == std::string::npos || eq == 0) usage("--kafka expects key=value");
        o.kafka.emplace_back(value.substr(0, eq), value.substr(eq + 1));
      } else {
        usage(fmt::format("unknown flag {}", flag));
      }
    } catch (const std::logic_error&) {  // stoll & co.
      usage(fmt::format("bad value for {}: '{}'", flag, value));
    }
  }
  if (o.brokers.empty() || o.topic.empty() || o.group.empty() || o.db.empty() ||
      o.retry_delays.empty())
    usage("--brokers, --topic, --group, --db and --retry-delays-ms are required");
  return o;
}

std::string stats_line(const idem::ConsumerStats& s) {
  return fmt::format(
      "stats delivered={} processed={} dead_lettered={} retry_topic_sends={} retries={}",
      s.delivered, s.processed, s.dead_lettered, s.retry_topic_sends, s.retries);
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
    config.batch_window = std::chrono::milliseconds(20);
    config.retry.initial_backoff = std::chrono::milliseconds(50);
    config.retry.max_backoff = std::chrono::milliseconds(1000);
    config.retry_topics.delays = opts.retry_delays;
    config.kafka = opts.kafka;

    auto store = idem::open_store(opts.db);
    idem::migrate_reference_system(*store);

    idem::Consumer consumer(config, std::move(store));  // its log lines go to stderr
    const auto count = idem::count_handler<idem::OrderConfirmed>();
    consumer.on<idem::OrderConfirmed>(
        opts.topic,
        [&](const idem::OrderConfirmed& e, const idem::RecordInfo& r, idem::Transaction& tx) {
          const auto& retry = opts.always_retry;
          if (std::find(retry.begin(), retry.end(), e.order_id) != retry.end())
            return idem::Outcome::Retry;
          return count(e, r, tx);
        });

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
      std::fprintf(stderr, "retry_consumer_child: run: %s\n", e.what());
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
    std::fprintf(stderr, "retry_consumer_child: %s\n", e.what());
    return 2;
  }
}
