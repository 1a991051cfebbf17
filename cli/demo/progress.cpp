// The demo's progress lines and waits (progress.hpp).
#include "demo/progress.hpp"

#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "idem/devtools/kafka_admin.hpp"
#include "idem/error.hpp"

namespace idem::cli::demo {

using namespace std::chrono_literals;

Progress::Progress(const RunScope& scope, Store& store, const std::int64_t& confirmed,
                   int timeout_s)
    : scope_(scope),
      store_(store),
      confirmed_(confirmed),
      timeout_s_(timeout_s),
      started_(Clock::now()),
      deadline_(started_ + std::chrono::seconds(timeout_s)) {}

double Progress::elapsed_s() const {
  return std::chrono::duration<double>(Clock::now() - started_).count();
}

void Progress::step(std::string_view what) const {
  const double t = elapsed_s();
  std::cout << fmt::format("[{:5.1f}s] {}\n", t, what) << std::flush;
}

Counts Progress::counts() {
  try {
    last_counts_ = read_counts(store_, scope_);
  } catch (const Error& e) {
    if (!e.transient()) throw;
  }
  return last_counts_;
}

void Progress::progress_line(std::string_view phase) {
  const Counts c = counts();
  const double t = elapsed_s();
  std::cout << fmt::format(
                   "[{:5.1f}s]   {:<14} confirmed {}/{}  published {}  billed {}  analytics {}\n",
                   t, phase, confirmed_, scope_.orders, c.events - c.unpublished, c.billing,
                   c.analytics)
            << std::flush;
}

void Progress::wait_or_throw(std::string_view phase, const std::function<bool()>& done,
                             const std::function<void()>& tick) {
  auto next_print = Clock::now() + 1s;
  while (!done()) {
    if (Clock::now() >= deadline_) {
      progress_line(phase);
      print_offsets();
      throw std::runtime_error(
          fmt::format("phase '{}' did not finish before --timeout {} s", phase, timeout_s_));
    }
    if (tick) tick();
    std::this_thread::sleep_for(100ms);  // polling interval of the condition, not a synchronisation
    if (Clock::now() >= next_print) {
      next_print = Clock::now() + 1s;
      progress_line(phase);
    }
  }
}

/// Committed offsets of both groups against the end offsets, for a stuck phase.
void Progress::print_offsets() const {
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
bool Progress::caught_up(std::string_view group) const {
  try {
    const auto end = end_offsets(scope_.brokers, scope_.topic, scope_.partitions, 5s);
    const auto committed =
        committed_offsets(scope_.brokers, std::string(group), scope_.topic, scope_.partitions, 5s);
    for (std::size_t p = 0; p < end.size(); ++p) {
      if (end[p] > 0 && committed[p] != end[p]) return false;
    }
    return true;
  } catch (const Error&) {
    return false;  // the coordinator is busy with a rebalance: ask again later
  }
}

bool Progress::drained() {
  Counts c;
  try {
    c = read_counts(store_, scope_);
  } catch (const Error& e) {
    if (!e.transient()) throw;
    return false;  // busy: ask again later
  }
  if (c.unpublished != 0 || c.events != confirmed_) return false;
  return caught_up(kBilling) && caught_up(kAnalytics);
}

}  // namespace idem::cli::demo
