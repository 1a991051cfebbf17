// The effect path's scheduling against a simple model, on random cases: random keys,
// partitions, copies of one event on two partitions, call latencies (calls complete in a
// random order, turns later) and outcomes (done, dead letter, blocking retry), buffer
// limits, in-flight limits, batch sizes and rebalances, driven through the EffectHarness.
// After every turn:
//  - no event is applied more than once;
//  - no committed position is past a record that is not settled (its event applied, or
//    it dead-lettered);
//  - no two calls of one ordering key are in flight together, and each key's calls start
//    in offset order (from a rebalance on, its records may be called again from the
//    committed position);
// and at the end every record is settled and every event is applied once or all its
// copies are dead-lettered.
//
// It runs for IDEM_EFFECT_MODEL_SECONDS (default 20) and prints how many cases it ran.
// A failing case prints its seed; IDEM_EFFECT_MODEL_SEED=<seed> replays that case alone.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/dev_broker_suite.hpp"
#include "support/effect_harness.hpp"

namespace idem::test {
namespace effect_model_test {

using namespace std::chrono_literals;

class EffectPathModel : public DevBrokerSuite {};

struct Copy {
  TopicPartition tp;
  std::int64_t offset = 0;
  std::size_t event = 0;  // index into the case's events
};

/// One random case, from `seed`; a violation of the model is a test failure.
void run_case(SharedBroker& broker, std::uint64_t seed) {
  SCOPED_TRACE(fmt::format("replay with IDEM_EFFECT_MODEL_SEED={}", seed));
  std::mt19937_64 rng(seed);
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };

  const std::string topic = unique_name("model");
  const int partitions = pick(1, 3);
  HarnessOptions options{.topics = {{topic, partitions}}};
  options.max_in_flight = static_cast<std::size_t>(pick(1, 6));
  options.max_buffered_per_partition = static_cast<std::size_t>(pick(2, 8));
  options.batch_size = static_cast<std::size_t>(pick(1, 8));
  options.fetch_per_partition = static_cast<std::size_t>(pick(1, 8));
  EffectHarness h(broker, options);

  // Events on random partitions and keys; some with a second copy on another partition
  // under a key of its own (a producer that sent it twice).
  std::vector<OrderConfirmed> events;
  std::vector<Copy> copies;
  std::map<std::pair<std::string, std::int64_t>, std::size_t> copy_at;  // (tp, offset)
  const auto tp_name = [](const TopicPartition& tp) {
    return fmt::format("{}/{}", tp.topic, tp.partition);
  };
  const int n = pick(8, 24);
  for (int i = 0; i < n; ++i) {
    events.push_back(h.order(i + 1));
    // A key stays on one partition, as Kafka's partitioner keeps it.
    const int key = pick(1, 4);
    const TopicPartition tp{topic, (key - 1) % partitions};
    const std::int64_t offset = h.append(tp, fmt::format("key-{}", key), to_json(events.back()));
    copy_at[{tp_name(tp), offset}] = copies.size();
    copies.push_back({tp, offset, events.size() - 1});
    if (partitions > 1 && chance(0.15)) {
      const TopicPartition other{topic, (tp.partition + 1) % partitions};
      const std::int64_t again = h.append(other, fmt::format("copy-{}", i), to_json(events.back()));
      copy_at[{tp_name(other), again}] = copies.size();
      copies.push_back({other, again, events.size() - 1});
    }
  }
  std::vector<TopicPartition> tps;
  tps.reserve(static_cast<std::size_t>(partitions));
  for (int p = 0; p < partitions; ++p) tps.push_back({topic, p});

  std::vector<bool> applied(events.size(), false);
  std::set<std::size_t> dead;                     // copies dead-lettered
  std::map<std::string, std::int64_t> last_call;  // ordering key -> offset of its last call
  std::map<std::pair<std::string, std::int64_t>, int> retries;
  const std::regex letter(R"(dead-lettered topic=(\S+) partition=(\d+) offset=(\d+))");
  std::size_t log_read = 0;

  const auto observe = [&] {
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (applied[i]) continue;
      const std::int64_t rows = h.effects_of(events[i].event_id);
      ASSERT_LE(rows, 1) << "event " << i << " applied " << rows << " times";
      applied[i] = rows == 1;
    }
    const auto lines = h.log_lines();
    for (; log_read < lines.size(); ++log_read) {
      std::smatch m;
      if (!std::regex_search(lines[log_read], m, letter)) continue;
      const auto it =
          copy_at.find({fmt::format("{}/{}", m[1].str(), m[2].str()), std::stoll(m[3].str())});
      if (it != copy_at.end()) dead.insert(it->second);
    }
    for (const auto& tp : tps) {
      const std::int64_t committed = h.committed(tp).value_or(0);
      for (std::size_t c = 0; c < copies.size(); ++c) {
        if (!(copies[c].tp == tp) || copies[c].offset >= committed) continue;
        ASSERT_TRUE(applied[copies[c].event] || dead.contains(c))
            << "committed " << committed << " on partition " << tp.partition << " passes offset "
            << copies[c].offset << ", neither applied nor dead-lettered";
      }
    }
    std::set<std::string> calling;
    for (const auto& call : h.pending()) {
      ASSERT_TRUE(calling.insert(call.key).second)
          << "two calls of key " << call.key << " in flight";
    }
  };

  bool finished = false;
  for (int turn = 0; turn < 600 && !finished; ++turn) {
    const std::size_t before = h.pending().size();
    h.turn();
    // Calls started this turn: each key's in offset order.
    for (std::size_t i = before; i < h.pending().size(); ++i) {
      const PendingCall& call = h.pending()[i];
      const auto it = last_call.find(call.key);
      if (it != last_call.end()) {
        ASSERT_LE(it->second, call.offset) << "key " << call.key << " called out of offset order";
      }
      last_call[call.key] = call.offset;
    }
    ASSERT_NO_FATAL_FAILURE(observe());
    // Calls end in a random order, some turns later.
    for (std::size_t i = 0; i < h.pending().size();) {
      if (!chance(0.5)) {
        ++i;
        continue;
      }
      const PendingCall& call = h.pending()[i];
      int& tried = retries[{tp_name(call.tp), call.offset}];
      const int roll = pick(0, 9);
      if (roll == 0 && tried < 2) {
        ++tried;
        h.complete(i, Outcome::Retry, "provider busy");
      } else if (roll == 1) {
        h.complete(i, Outcome::DeadLetter, "declined");
      } else {
        h.complete(i, Outcome::Done);
      }
    }
    if (chance(0.03)) {
      h.reassign(tps);  // a rebalance: commit, drop, assign again at the committed positions
      last_call.clear();
    }
    h.advance(std::chrono::milliseconds(pick(0, 250)));
    finished = h.pending().empty();
    for (const auto& tp : tps)
      finished = finished && h.committed(tp).value_or(0) == h.log().end(tp);
  }
  if (!finished) {
    std::string state;
    for (const auto& tp : tps) {
      state += fmt::format(" partition {}: committed {} of {};", tp.partition,
                           h.committed(tp).value_or(-1), h.log().end(tp));
    }
    const auto lines = h.log_lines();
    for (std::size_t i = lines.size() > 8 ? lines.size() - 8 : 0; i < lines.size(); ++i)
      state += "\n  " + lines[i];
    FAIL() << "the case did not finish in 600 turns (" << h.pending().size()
           << " calls pending):" << state;
  }
  ASSERT_NO_FATAL_FAILURE(observe());
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (applied[i]) continue;
    for (std::size_t c = 0; c < copies.size(); ++c) {
      if (copies[c].event == i) {
        EXPECT_TRUE(dead.contains(c))
            << "event " << i << " neither applied nor dead-lettered (offset " << copies[c].offset
            << " of partition " << copies[c].tp.partition << ")";
      }
    }
  }
}

TEST_F(EffectPathModel, RandomSchedulesKeepEveryRecordSettledOnceInKeyOrder) {
  if (const char* replay = std::getenv("IDEM_EFFECT_MODEL_SEED")) {
    run_case(*broker_, std::stoull(replay));
    return;
  }
  const char* seconds = std::getenv("IDEM_EFFECT_MODEL_SECONDS");
  const auto budget = std::chrono::seconds(seconds != nullptr ? std::stoll(seconds) : 20);
  const std::uint64_t base = std::random_device{}();
  const auto start = std::chrono::steady_clock::now();
  int cases = 0;
  while (cases == 0 || std::chrono::steady_clock::now() - start < budget) {
    run_case(*broker_, base + static_cast<std::uint64_t>(cases));
    ++cases;
    if (HasFailure()) break;
  }
  RecordProperty("cases", cases);
  std::cout << "effect path model: " << cases << " random cases, seeds " << base << " to "
            << base + static_cast<std::uint64_t>(cases) - 1 << "\n";
}

}  // namespace effect_model_test
}  // namespace idem::test
