#include "idem/uuid.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

namespace uuid_test {

using namespace std::chrono_literals;
using Ms = std::chrono::sys_time<std::chrono::milliseconds>;

// A clock the test moves by hand. Thread-safe, as Clock requires.
class FakeClock final : public idem::Clock {
 public:
  explicit FakeClock(std::chrono::system_clock::time_point t) : t_(t.time_since_epoch().count()) {}
  [[nodiscard]] std::chrono::system_clock::time_point now() const override {
    return std::chrono::system_clock::time_point(
        std::chrono::system_clock::duration(t_.load(std::memory_order_relaxed)));
  }
  void set(std::chrono::system_clock::time_point t) {
    t_.store(t.time_since_epoch().count(), std::memory_order_relaxed);
  }

 private:
  std::atomic<std::chrono::system_clock::rep> t_;
};

std::chrono::system_clock::time_point at_ms(std::int64_t ms) {
  return std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
}

// The 42-bit counter as laid out in the UUID (12 bits in rand_a, 30 at the top of rand_b).
std::uint64_t counter_of(const idem::Uuid& u) {
  const auto& b = u.bytes();
  return (std::uint64_t{b[6] & 0x0Fu} << 38) | (std::uint64_t{b[7]} << 30) |
         (std::uint64_t{b[8] & 0x3Fu} << 24) | (std::uint64_t{b[9]} << 16) |
         (std::uint64_t{b[10]} << 8) | std::uint64_t{b[11]};
}

constexpr const char* kRfcExample = "017F22E2-79B0-7CC3-98C4-DC0C0C07398F";  // RFC 9562 A.6

TEST(Uuid, ParsesRfc9562ExampleAsVersion7) {
  const auto u = idem::Uuid::parse(kRfcExample);
  ASSERT_TRUE(u.has_value());
  EXPECT_TRUE(u->is_v7());
  EXPECT_EQ(u->version(), 7);
  EXPECT_FALSE(u->is_nil());
  EXPECT_EQ(u->timestamp().time_since_epoch().count(), 0x017F22E279B0);
  // 2022-02-22T19:22:22Z, as the RFC states.
  const auto expected = std::chrono::sys_days{std::chrono::year{2022} / 2 / 22} + 19h + 22min + 22s;
  EXPECT_EQ(u->timestamp(), expected);
}

TEST(Uuid, FormatsLowerCaseAndRoundTrips) {
  const auto u = idem::Uuid::parse(kRfcExample);
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->to_string(), "017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
  EXPECT_EQ(idem::Uuid::parse(u->to_string()), u);
}

TEST(Uuid, FormatToWritesExactly36Chars) {
  const auto u = idem::Uuid::parse(kRfcExample).value();
  std::string buf(40, '#');
  u.format_to(buf.data() + 2);
  EXPECT_EQ(buf, "##017f22e2-79b0-7cc3-98c4-dc0c0c07398f##");
}

TEST(Uuid, ParseIsCaseInsensitive) {
  const auto lower = idem::Uuid::parse("017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
  const auto mixed = idem::Uuid::parse("017f22E2-79b0-7Cc3-98c4-Dc0c0C07398f");
  ASSERT_TRUE(lower && mixed);
  EXPECT_EQ(*lower, *mixed);
  EXPECT_EQ(*lower, *idem::Uuid::parse(kRfcExample));
}

TEST(Uuid, ParseRejectsEverythingButTheCanonicalForm) {
  const char* bad[] = {
      "",
      "017f22e2-79b0-7cc3-98c4-dc0c0c07398",     // 35 chars
      "017f22e2-79b0-7cc3-98c4-dc0c0c07398f0",   // 37 chars
      "017f22e279b0-7cc3-98c4-dc0c0c07398f0",    // missing dash (still 36 chars)
      "017f22e279b07cc398c4dc0c0c07398f",        // no dashes at all
      "017f22e2-79b0-7cc3-98c4_dc0c0c07398f",    // wrong separator
      "017f22e2-79b0-7cc3-98c4-dc0c0c07398g",    // non-hex
      "017f22e2-79b0-7cc3-98c4-dc0c0c0739 f",    // space inside
      "{017f22e2-79b0-7cc3-98c4-dc0c0c07398f}",  // braces
      "urn:uuid:017f22e2-79b0-7cc3-98c4-dc0c0c07398f",
      "017f22e2-79b0-7cc3-98c4-dc0c0c07398f ",            // trailing space
      " 017f22e2-79b0-7cc3-98c4-dc0c0c07398f",            // leading space
      "017f22e2-79b0-7cc3-98c4-dc0c0c07398\xef\xbc\xa6",  // fullwidth F (non-ASCII)
      "017f22e2-79b0-7cc3-98c4-dc0c0c0739\xc3\xa9",       // 36 bytes, non-ASCII
      "-17f22e2-79b0-7cc3-98c4-dc0c0c07398f",
      "+17f22e2-79b0-7cc3-98c4-dc0c0c07398f",
  };
  for (const char* text : bad) EXPECT_FALSE(idem::Uuid::parse(text).has_value()) << text;
}

TEST(Uuid, ParseRejectsEmbeddedNul) {
  std::string s = "017f22e2-79b0-7cc3-98c4-dc0c0c07398f";
  s[3] = '\0';
  EXPECT_FALSE(idem::Uuid::parse(s).has_value());
}

TEST(Uuid, IsV7RequiresVersion7AndRfcVariant) {
  EXPECT_FALSE(idem::Uuid::parse("017f22e2-79b0-4cc3-98c4-dc0c0c07398f")->is_v7());  // v4
  EXPECT_FALSE(idem::Uuid::parse("017f22e2-79b0-7cc3-18c4-dc0c0c07398f")->is_v7());  // NCS variant
  EXPECT_FALSE(
      idem::Uuid::parse("017f22e2-79b0-7cc3-c8c4-dc0c0c07398f")->is_v7());  // Microsoft variant
  EXPECT_TRUE(idem::Uuid::parse("017f22e2-79b0-7cc3-b8c4-dc0c0c07398f")->is_v7());
}

TEST(Uuid, NilIsAllZeros) {
  EXPECT_TRUE(idem::Uuid{}.is_nil());
  EXPECT_EQ(idem::Uuid{}.to_string(), "00000000-0000-0000-0000-000000000000");
  EXPECT_FALSE(idem::Uuid{}.is_v7());
}

TEST(Uuid, OrdersBytewise) {
  const auto a = *idem::Uuid::parse("00000000-0000-0000-0000-0000000000ff");
  const auto b = *idem::Uuid::parse("00000000-0000-0000-0000-000000000100");
  const auto c = *idem::Uuid::parse("ff000000-0000-0000-0000-000000000000");
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
}

TEST(Uuid, LowerBoundSortsAtOrBelowEveryIdOfThatMillisecond) {
  const Ms ms{std::chrono::milliseconds(0x017F22E279B0)};
  const auto bound = idem::Uuid::lower_bound_for(ms);
  EXPECT_EQ(bound.to_string(), "017f22e2-79b0-0000-0000-000000000000");
  EXPECT_EQ(bound.timestamp(), ms);
  EXPECT_LE(bound, *idem::Uuid::parse(kRfcExample));
  EXPECT_GT(bound, idem::Uuid::lower_bound_for(ms - 1ms));

  FakeClock clock(at_ms(0x017F22E279B0));
  idem::UuidV7Generator gen(clock);
  for (int i = 0; i < 100; ++i) {
    const auto id = gen.next();
    EXPECT_GE(id, bound);
    EXPECT_LT(id, idem::Uuid::lower_bound_for(ms + 1ms));
  }
}

TEST(Uuid, LowerBoundClampsTimesOutside48Bits) {
  EXPECT_TRUE(idem::Uuid::lower_bound_for(Ms{-5ms}).is_nil());
  EXPECT_EQ(
      idem::Uuid::lower_bound_for(Ms{std::chrono::milliseconds(std::int64_t{1} << 50)}).to_string(),
      "ffffffff-ffff-0000-0000-000000000000");
}

TEST(Uuid, HashUsesBothHalves) {
  const std::hash<idem::Uuid> h;
  const auto a = *idem::Uuid::parse("017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
  const auto b = *idem::Uuid::parse("017f22e2-79b0-7cc3-98c4-dc0c0c07398e");  // low half differs
  const auto c = *idem::Uuid::parse("017f22e2-79b1-7cc3-98c4-dc0c0c07398f");  // high half differs
  EXPECT_EQ(h(a), h(*idem::Uuid::parse(a.to_string())));
  EXPECT_NE(h(a), h(b));
  EXPECT_NE(h(a), h(c));

  // Sequential ids (same timestamp, counter + 1) must not collide.
  FakeClock clock(at_ms(1'700'000'000'000));
  idem::UuidV7Generator gen(clock);
  std::unordered_set<std::size_t> hashes;
  for (int i = 0; i < 10'000; ++i) hashes.insert(h(gen.next()));
  EXPECT_EQ(hashes.size(), 10'000u);
}

TEST(UuidV7Generator, StampsTheClockTimeVersionAndVariant) {
  FakeClock clock(at_ms(1'764'455'627'123));
  idem::UuidV7Generator gen(clock);
  const auto id = gen.next();
  EXPECT_TRUE(id.is_v7());
  EXPECT_EQ(id.timestamp().time_since_epoch().count(), 1'764'455'627'123);
}

TEST(UuidV7Generator, UsesTheSystemClockByDefault) {
  const auto before =
      std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now());
  const auto id = idem::new_uuid_v7();
  const auto after =
      std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now());
  EXPECT_TRUE(id.is_v7());
  EXPECT_GE(id.timestamp(), before);
  EXPECT_LE(id.timestamp(), after);
  EXPECT_LT(id, idem::new_uuid_v7());
}

TEST(UuidV7Generator, StaysStrictlyIncreasingWithinOneMillisecond) {
  FakeClock clock(at_ms(1'700'000'000'000));
  idem::UuidV7Generator gen(clock);
  idem::Uuid prev = gen.next();
  const std::uint64_t first_counter = counter_of(prev);
  // Seeded with the top bit clear, so at least 2^41 increments fit.
  EXPECT_LT(first_counter, std::uint64_t{1} << 41);
  for (int i = 1; i < 1'000'000; ++i) {
    const idem::Uuid id = gen.next();
    ASSERT_LT(prev, id) << "at " << i;
    ASSERT_EQ(id.timestamp().time_since_epoch().count(), 1'700'000'000'000) << "at " << i;
    ASSERT_EQ(counter_of(id), counter_of(prev) + 1) << "at " << i;  // counting, not re-randomising
    ASSERT_TRUE(id.is_v7());
    prev = id;
  }
}

TEST(UuidV7Generator, ReseedsTheCounterOnEachNewMillisecond) {
  FakeClock clock(at_ms(1'700'000'000'000));
  idem::UuidV7Generator gen(clock);
  std::set<std::uint64_t> seeds;
  idem::Uuid prev = gen.next();
  for (int ms = 1; ms <= 64; ++ms) {
    clock.set(at_ms(1'700'000'000'000 + ms));
    const auto id = gen.next();
    EXPECT_LT(prev, id);
    EXPECT_EQ(id.timestamp().time_since_epoch().count(), 1'700'000'000'000 + ms);
    EXPECT_LT(counter_of(id), std::uint64_t{1} << 41);
    seeds.insert(counter_of(id));
    prev = id;
  }
  // 41 random bits each: 64 equal seeds (or even a few) would mean no randomness.
  EXPECT_GT(seeds.size(), 60u);
}

TEST(UuidV7Generator, StaysMonotonicWhenClockStepsBack) {
  FakeClock clock(at_ms(1'700'000'010'000));
  idem::UuidV7Generator gen(clock);
  const auto before = gen.next();
  clock.set(at_ms(1'700'000'000'000));  // 10 s back, e.g. an NTP step
  idem::Uuid prev = before;
  for (int i = 0; i < 100'000; ++i) {
    const auto id = gen.next();
    ASSERT_LT(prev, id);
    // The last timestamp is carried forward, never the earlier clock value.
    ASSERT_EQ(id.timestamp(), before.timestamp());
    prev = id;
  }
  clock.set(at_ms(1'700'000'010'001));  // the clock catches up: back on real time
  const auto after = gen.next();
  EXPECT_LT(prev, after);
  EXPECT_EQ(after.timestamp().time_since_epoch().count(), 1'700'000'010'001);
}

// Counter overflow (more than 2^41 ids in one millisecond, since the counter
// is seeded below 2^41) cannot be reached in a unit test: at ~20 ns per id it
// would take about 12 hours, and the generator exposes no hook to preset the
// counter. Its carry rule ("advance the timestamp by 1 ms") shares the
// code path's invariant with the clock-steps-back case above: the timestamp
// never goes below the clock or the previous id's, and ids keep increasing.
// This test checks that invariant across many ids and clock movements.
TEST(UuidV7Generator, NeverStampsBelowTheClockOrThePreviousId) {
  FakeClock clock(at_ms(1'700'000'000'000));
  idem::UuidV7Generator gen(clock);
  idem::Uuid prev = gen.next();
  std::int64_t now = 1'700'000'000'000;
  std::uint64_t lcg = 12345;
  for (int i = 0; i < 200'000; ++i) {
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    // Mostly stay, sometimes move forward, sometimes jump back.
    const int step = static_cast<int>((lcg >> 33) % 100);
    if (step < 5)
      now += 1;
    else if (step < 7)
      now -= 3;
    clock.set(at_ms(now));
    const auto id = gen.next();
    ASSERT_LT(prev, id);
    ASSERT_GE(id.timestamp().time_since_epoch().count(), now);
    ASSERT_GE(id.timestamp(), prev.timestamp());
    prev = id;
  }
}

TEST(UuidV7Generator, ClampsPre1970ClockToZero) {
  FakeClock clock(at_ms(-1'000));
  idem::UuidV7Generator gen(clock);
  const auto a = gen.next();
  const auto b = gen.next();
  EXPECT_EQ(a.timestamp().time_since_epoch().count(), 0);
  EXPECT_LT(a, b);
}

TEST(UuidV7Generator, ConcurrentIdsAreUniqueAndEachThreadSeesThemIncreasing) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 100'000;
  idem::UuidV7Generator gen;  // real clock: many ids share a millisecond
  std::vector<std::vector<idem::Uuid>> per_thread(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&gen, &ids = per_thread[static_cast<std::size_t>(t)]] {
      ids.reserve(kPerThread);
      for (int i = 0; i < kPerThread; ++i) ids.push_back(gen.next());
    });
  }
  for (auto& th : threads) th.join();

  std::vector<idem::Uuid> all;
  all.reserve(std::size_t{kThreads} * kPerThread);
  for (const auto& ids : per_thread) {
    for (std::size_t i = 1; i < ids.size(); ++i) ASSERT_LT(ids[i - 1], ids[i]);
    all.insert(all.end(), ids.begin(), ids.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "duplicate UUID";
  EXPECT_EQ(all.size(), std::size_t{kThreads} * kPerThread);
}

TEST(UuidV7Generator, IdsInGenerationOrderAreSorted) {
  // Generating inside the test's lock makes the vector's order the
  // generator's order, so it must already be sorted.
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20'000;
  idem::UuidV7Generator gen;
  std::mutex m;
  std::vector<idem::Uuid> ids;
  ids.reserve(std::size_t{kThreads} * kPerThread);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        std::lock_guard lock(m);
        ids.push_back(gen.next());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end());
}

TEST(UuidV7Generator, RandomTailDiffersBetweenGenerators) {
  // Two generators on the same frozen clock must still produce different ids:
  // the counter seed and the 32-bit tail come from the kernel CSPRNG.
  FakeClock clock(at_ms(1'700'000'000'000));
  idem::UuidV7Generator a(clock);
  idem::UuidV7Generator b(clock);
  std::set<idem::Uuid> seen;
  for (int i = 0; i < 1000; ++i) {
    seen.insert(a.next());
    seen.insert(b.next());
  }
  EXPECT_EQ(seen.size(), 2000u);
}

TEST(UuidV7Generator, ForkedChildDoesNotRepeatTheParentsIds) {
  // After fork() both processes hold the same counter and buffered random
  // bytes; on a frozen clock they would emit identical ids unless the child
  // discards that state.
  FakeClock clock(at_ms(1'700'000'000'000));
  idem::UuidV7Generator gen(clock);
  (void)gen.next();  // fill the random buffer before forking
  constexpr int kIds = 100;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    for (int i = 0; i < kIds; ++i) {
      const auto id = gen.next();
      if (::write(fds[1], id.bytes().data(), 16) != 16) ::_exit(2);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::set<idem::Uuid> parent_ids;
  for (int i = 0; i < kIds; ++i) parent_ids.insert(gen.next());
  int overlap = 0;
  int received = 0;
  idem::Uuid::Bytes b{};
  std::size_t got = 0;
  while (true) {
    const ssize_t n = ::read(fds[0], b.data() + got, b.size() - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
    if (got == b.size()) {
      overlap += parent_ids.count(idem::Uuid(b)) > 0 ? 1 : 0;
      ++received;
      got = 0;
    }
  }
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(received, kIds);
  EXPECT_EQ(overlap, 0);
}

}  // namespace uuid_test
