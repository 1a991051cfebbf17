// KeyedScheduler as a plain class: per-key FIFO, one ticket per key in flight, a global
// in-flight limit, key-level retry times.
#include "consumer/effects/keyed_scheduler.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace keyed_scheduler_test {

// "k<n>". Built by append: GCC 12 -O3 warns (-Wrestrict, a false positive: GCC bug
// 105329) on "k" + std::to_string(n).
std::string key_name(unsigned long n) {
  return std::string("k").append(std::to_string(n));
}

using idem::detail::KeyedScheduler;
using Ticket = KeyedScheduler::Ticket;
using namespace std::chrono_literals;

const KeyedScheduler::TimePoint kT0{};

TEST(KeyedScheduler, StartsOneTicketPerKeyInArrivalOrder) {
  KeyedScheduler s(10);
  s.push("a", 1);
  s.push("a", 2);
  s.push("b", 3);
  EXPECT_EQ(s.take_ready(kT0), (std::vector<Ticket>{1, 3}));
  EXPECT_TRUE(s.take_ready(kT0).empty()) << "a's second ticket waits for the first";
  EXPECT_EQ(s.in_flight(), 2u);
  s.finish("a");
  EXPECT_EQ(s.take_ready(kT0), (std::vector<Ticket>{2}));
  s.finish("b");
  s.finish("a");
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.in_flight(), 0u);
}

TEST(KeyedScheduler, RespectsTheGlobalInFlightLimit) {
  KeyedScheduler s(2);
  for (Ticket t = 1; t <= 5; ++t) s.push(key_name(t), t);
  EXPECT_EQ(s.take_ready(kT0), (std::vector<Ticket>{1, 2}));
  EXPECT_FALSE(s.runnable());
  s.finish("k2");
  EXPECT_TRUE(s.runnable());
  EXPECT_EQ(s.take_ready(kT0), (std::vector<Ticket>{3}));
}

TEST(KeyedScheduler, AReturnedCallFreesItsSlotButNotItsKey) {
  KeyedScheduler s(2);
  s.push("a", 1);
  s.push("a", 2);
  s.push("b", 3);
  s.push("c", 4);
  EXPECT_EQ(s.take_ready(kT0), (std::vector<Ticket>{1, 3}));
  s.call_returned("a");  // its result waits for the apply transaction
  EXPECT_EQ(s.in_flight(), 1u);
  EXPECT_EQ(s.take_ready(kT0), (std::vector<Ticket>{4})) << "the slot went to another key";
  s.finish("b");
  EXPECT_TRUE(s.take_ready(kT0).empty()) << "a's second ticket waits until the first is applied";
  s.finish("a");
  EXPECT_EQ(s.take_ready(kT0), (std::vector<Ticket>{2}));
  // A returned head that must be called again waits for its time and counts again then.
  s.call_returned("a");
  s.retry_at("a", kT0 + 1s);
  EXPECT_EQ(s.in_flight(), 1u);  // c
  EXPECT_TRUE(s.take_ready(kT0).empty());
  EXPECT_EQ(s.take_ready(kT0 + 1s), (std::vector<Ticket>{2}));
  EXPECT_EQ(s.in_flight(), 2u);
}

TEST(KeyedScheduler, AFailedKeyWaitsForItsRetryTimeWhileOthersGoOn) {
  KeyedScheduler s(10);
  s.push("bad", 1);
  s.push("bad", 2);
  s.push("good", 3);
  s.push("good", 4);
  EXPECT_EQ(s.take_ready(kT0), (std::vector<Ticket>{1, 3}));
  s.retry_at("bad", kT0 + 100ms);
  s.finish("good");
  EXPECT_EQ(s.take_ready(kT0 + 10ms), (std::vector<Ticket>{4})) << "the other key is not held back";
  EXPECT_EQ(s.next_retry(), kT0 + 100ms);
  EXPECT_TRUE(s.take_ready(kT0 + 99ms).empty());
  EXPECT_EQ(s.take_ready(kT0 + 100ms), (std::vector<Ticket>{1})) << "the same head is retried";
  s.finish("bad");
  EXPECT_EQ(s.take_ready(kT0 + 100ms), (std::vector<Ticket>{2}));
}

TEST(KeyedScheduler, RemovesQueuedTicketsButKeepsTheOneInFlight) {
  KeyedScheduler s(10);
  s.push("a", 1);
  s.push("a", 2);
  s.push("a", 3);
  s.push("b", 4);
  EXPECT_EQ(s.take_ready(kT0), (std::vector<Ticket>{1, 4}));
  s.remove_queued([](Ticket t) { return t != 3; });  // everything except 3
  EXPECT_EQ(s.size(), 3u) << "in-flight 1 and 4 stay, 2 is gone, 3 stays";
  s.finish("a");
  EXPECT_EQ(s.take_ready(kT0), (std::vector<Ticket>{3}));
}

TEST(KeyedScheduler, RemovingAWaitingHeadLetsTheNextTicketStart) {
  KeyedScheduler s(10);
  s.push("a", 1);
  s.push("a", 2);
  EXPECT_EQ(s.take_ready(kT0), (std::vector<Ticket>{1}));
  s.retry_at("a", kT0 + 1h);
  s.remove_queued([](Ticket t) { return t == 1; });
  EXPECT_EQ(s.take_ready(kT0), (std::vector<Ticket>{2}));
}

TEST(KeyedScheduler, RandomWorkloadKeepsEachKeyInOrderAndUnderTheLimit) {
  std::mt19937_64 rng(42);
  constexpr std::size_t kLimit = 7;
  KeyedScheduler s(kLimit);
  std::map<std::string, std::vector<Ticket>> pushed;
  std::map<std::string, std::vector<Ticket>> started;
  std::map<Ticket, std::string> key_of;
  std::vector<Ticket> flying;
  Ticket next = 1;
  auto now = kT0;
  for (int step = 0; step < 5000; ++step) {
    now += 1ms;
    if (rng() % 2 == 0) {
      const std::string key = key_name(rng() % 13);
      key_of[next] = key;
      pushed[key].push_back(next);
      s.push(key, next++);
    }
    for (const Ticket t : s.take_ready(now)) {
      auto& seen = started[key_of[t]];
      if (seen.empty() || seen.back() != t) seen.push_back(t);  // a retried head starts again
      flying.push_back(t);
    }
    ASSERT_LE(s.in_flight(), kLimit);
    if (!flying.empty() && rng() % 3 != 0) {
      const std::size_t i = rng() % flying.size();
      const Ticket t = flying[i];
      flying.erase(flying.begin() + static_cast<std::ptrdiff_t>(i));
      if (rng() % 5 == 0)
        s.retry_at(key_of[t], now + std::chrono::milliseconds(rng() % 20));
      else
        s.finish(key_of[t]);
    }
  }
  for (const auto& [key, order] : started) {
    const auto& all = pushed[key];
    ASSERT_LE(order.size(), all.size());
    EXPECT_TRUE(std::equal(order.begin(), order.end(), all.begin())) << "key " << key;
  }
}

}  // namespace keyed_scheduler_test
