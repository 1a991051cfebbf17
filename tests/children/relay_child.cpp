// A relay process for the relay crash tests: idem::Relay with an observer that kills
// the process (SIGKILL, no cleanup, no flush) at a chosen point of a chosen batch.
//
//   relay_child URL BOOTSTRAP BATCH_SIZE KILL_STEP KILL_BATCH
//
// KILL_STEP is claimed | produced | acked | marked | never; KILL_BATCH counts batches
// reaching that step, from 1 (Acked and Marked fire once per group of batches that are
// settled together). Prints "ready" once its connections are open, then
// publishes until nothing is left ("drained", exit 0) unless it killed itself first.
// Exit status: 0 drained, 3 not drained within 60 s, 2 bad arguments, 1 failure.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "idem/relay.hpp"

namespace {

void say(std::string_view line) {
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

bool parse_step(std::string_view s, idem::RelayStep& step) {
  if (s == "claimed")
    step = idem::RelayStep::Claimed;
  else if (s == "produced")
    step = idem::RelayStep::Produced;
  else if (s == "acked")
    step = idem::RelayStep::Acked;
  else if (s == "marked")
    step = idem::RelayStep::Marked;
  else
    return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s URL BOOTSTRAP BATCH_SIZE KILL_STEP KILL_BATCH\n", argv[0]);
    return 2;
  }
  idem::RelayStep kill_step{};
  const bool kill = std::string_view(argv[4]) != "never";
  if (kill && !parse_step(argv[4], kill_step)) return 2;
  const long kill_batch = std::stol(argv[5]);
  try {
    idem::RelayConfig config;
    config.store_url = argv[1];
    config.producer.bootstrap_servers = argv[2];
    config.producer.kafka = {{"log_level", "2"}};
    config.batch_size = static_cast<std::size_t>(std::stoul(argv[3]));
    config.progress_interval = std::chrono::milliseconds(0);
    config.rebalance_interval = std::chrono::milliseconds(200);
    config.poll_interval = std::chrono::milliseconds(50);
    idem::RelayObserver observer;
    long seen = 0;
    observer.on_step = [&](idem::RelayStep step, std::size_t /*rows*/) {
      if (kill && step == kill_step && ++seen == kill_batch) ::raise(SIGKILL);
    };
    observer.log = [](std::string_view line) {
      std::fprintf(stderr, "relay_child %d: %.*s\n", static_cast<int>(::getpid()),
                   static_cast<int>(line.size()), line.data());
    };
    idem::Relay relay(config, observer);
    say("ready");
    const bool drained = relay.run_until_empty(std::chrono::seconds(60));
    say(drained ? "drained" : "timeout");
    return drained ? 0 : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "relay_child: %s\n", e.what());
    return 1;
  }
}
