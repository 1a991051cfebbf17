#include "idem/uuid.hpp"

#include <pthread.h>
#include <sys/random.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <system_error>

namespace idem {
namespace detail {
namespace {

// Lookup tables built at compile time: formatting and parsing are on the hot
// path of every event (serialise, dedup key, log line), so they avoid both
// branches per nibble and any allocation.
struct HexTables {
  char pair[256][2]{};         // byte -> two lower-case hex digits
  std::uint8_t nibble[256]{};  // char -> 0..15, or kBad
};
constexpr std::uint8_t kBad = 0xFF;

constexpr HexTables make_hex_tables() {
  HexTables t;
  constexpr char digits[] = "0123456789abcdef";
  for (int b = 0; b < 256; ++b) {
    t.pair[b][0] = digits[b >> 4];
    t.pair[b][1] = digits[b & 0xF];
  }
  for (int c = 0; c < 256; ++c) t.nibble[c] = kBad;
  for (int c = 0; c < 10; ++c) t.nibble['0' + c] = static_cast<std::uint8_t>(c);
  for (int c = 0; c < 6; ++c) {
    t.nibble['a' + c] = static_cast<std::uint8_t>(10 + c);
    t.nibble['A' + c] = static_cast<std::uint8_t>(10 + c);
  }
  return t;
}
constexpr HexTables kHex = make_hex_tables();

// Byte index -> text offset in the 8-4-4-4-12 form (dashes sit at 8, 13, 18, 23).
constexpr std::array<std::uint8_t, 16> kTextOffset = {0,  2,  4,  6,  9,  11, 14, 16,
                                                      19, 21, 24, 26, 28, 30, 32, 34};

constexpr std::int64_t kMaxTimestampMs = (std::int64_t{1} << 48) - 1;
constexpr std::uint64_t kCounterBits = 42;
constexpr std::uint64_t kCounterMax = (std::uint64_t{1} << kCounterBits) - 1;

std::uint64_t load_be64(const std::uint8_t* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

// splitmix64's finaliser: a cheap bijective mixer with full avalanche.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Bumped in every child after fork(). A child inherits the generator's
// buffered random bytes and its (timestamp, counter) state, so without this a
// parent and a child generating in the same millisecond would emit identical
// UUIDs. Checking a relaxed atomic per UUID costs next to nothing.
std::atomic<std::uint32_t> g_fork_epoch{0};

void on_fork_child() noexcept {
  g_fork_epoch.fetch_add(1, std::memory_order_relaxed);
}

void register_fork_handler_once() {
  static const bool registered = [] {
    ::pthread_atfork(nullptr, nullptr, &on_fork_child);
    return true;
  }();
  (void)registered;
}

}  // namespace
}  // namespace detail

// ---------------------------------------------------------------------------
// Uuid

std::optional<Uuid> Uuid::parse(std::string_view text) noexcept {
  // Only the canonical form: exactly 36 chars, dashes at fixed places. Braces,
  // "urn:uuid:" and dash-less forms are rejected so that one UUID has exactly
  // one accepted spelling (up to hex case) at the boundary.
  if (text.size() != 36 || text[8] != '-' || text[13] != '-' || text[18] != '-' ||
      text[23] != '-') {
    return std::nullopt;
  }
  Bytes bytes{};
  std::uint8_t bad = 0;
  for (std::size_t i = 0; i < 16; ++i) {
    const std::size_t at = detail::kTextOffset[i];
    const std::uint8_t hi = detail::kHex.nibble[static_cast<unsigned char>(text[at])];
    const std::uint8_t lo = detail::kHex.nibble[static_cast<unsigned char>(text[at + 1])];
    bad |= static_cast<std::uint8_t>(hi | lo);  // kBad has bit 4+ set; valid nibbles don't
    bytes[i] = static_cast<std::uint8_t>((hi << 4) | (lo & 0x0F));
  }
  if (bad & 0xF0) return std::nullopt;
  return Uuid(bytes);
}

void Uuid::format_to(char* out) const noexcept {
  for (std::size_t i = 0; i < 16; ++i) {
    std::memcpy(out + detail::kTextOffset[i], detail::kHex.pair[bytes_[i]], 2);
  }
  out[8] = out[13] = out[18] = out[23] = '-';
}

std::string Uuid::to_string() const {
  std::string s(36, '\0');  // fits no SSO buffer, so one allocation either way
  format_to(s.data());
  return s;
}

bool Uuid::is_v7() const noexcept {
  return (bytes_[6] >> 4) == 7 && (bytes_[8] >> 6) == 0b10;
}

bool Uuid::is_nil() const noexcept {
  return std::all_of(bytes_.begin(), bytes_.end(), [](std::uint8_t b) { return b == 0; });
}

std::chrono::sys_time<std::chrono::milliseconds> Uuid::timestamp() const noexcept {
  std::uint64_t ms = 0;
  for (std::size_t i = 0; i < 6; ++i) ms = (ms << 8) | bytes_[i];
  return std::chrono::sys_time<std::chrono::milliseconds>(
      std::chrono::milliseconds(static_cast<std::int64_t>(ms)));
}

Uuid Uuid::lower_bound_for(std::chrono::sys_time<std::chrono::milliseconds> ms) noexcept {
  // A 48-bit field cannot hold times before 1970 or after year 10889; clamp so
  // that the bound is still a correct (if loose) bound instead of wrapping.
  const std::int64_t v =
      std::clamp<std::int64_t>(ms.time_since_epoch().count(), 0, detail::kMaxTimestampMs);
  Bytes bytes{};
  for (std::size_t i = 0; i < 6; ++i) {
    bytes[i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(v) >> (8 * (5 - i)));
  }
  return Uuid(bytes);
}

// ---------------------------------------------------------------------------
// UuidV7Generator

struct UuidV7Generator::State {
  // Random bits come from getrandom(2), the kernel CSPRNG. RFC 9562 section
  // 6.9 asks for unguessable UUIDs, and an event_id is visible to anyone who
  // sees the topic, so a seeded PRNG such as mt19937 (whose state can be
  // recovered from its output) is not good enough. One getrandom call per
  // UUID would cost a syscall each; buffering 256 bytes amortises that over
  // ~60 UUIDs (4 bytes each, plus 6 when a new millisecond reseeds the
  // counter) while the bytes stay just as unpredictable.
  std::array<std::uint8_t, 256> pool{};
  std::size_t pool_used = pool.size();  // empty: first use refills
  std::uint32_t fork_epoch = detail::g_fork_epoch.load(std::memory_order_relaxed);

  std::int64_t last_ms = -1;  // timestamp of the last UUID (may run ahead of the clock)
  std::uint64_t counter = 0;  // 42-bit counter of the last UUID

  void refill() {
    std::size_t filled = 0;
    while (filled < pool.size()) {
      // Flags 0: the urandom source, which blocks only until the kernel's
      // pool is first initialised (early boot), never afterwards. Requests
      // of up to 256 bytes are then not interrupted, but loop anyway: EINTR
      // and short reads are both allowed by the man page.
      const ssize_t n = ::getrandom(pool.data() + filled, pool.size() - filled, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw std::system_error(errno, std::generic_category(), "getrandom");
      }
      filled += static_cast<std::size_t>(n);
    }
    pool_used = 0;
  }

  void take(std::uint8_t* out, std::size_t n) {
    if (pool.size() - pool_used < n) refill();
    std::memcpy(out, pool.data() + pool_used, n);
    // Wipe what was handed out, so a later memory disclosure cannot reveal
    // the random bits of UUIDs already issued (cheap: a few bytes).
    std::memset(pool.data() + pool_used, 0, n);
    pool_used += n;
  }

  std::uint64_t random_counter_seed() {
    std::uint8_t b[6];
    take(b, sizeof b);
    std::uint64_t v = 0;
    for (std::uint8_t x : b) v = (v << 8) | x;
    // 41 random bits: the top counter bit stays clear so at least 2^41
    // increments fit in the millisecond before the counter overflows
    // (RFC 9562 section 6.2, "counter rollover guards").
    return v & (detail::kCounterMax >> 1);
  }

  void after_fork_check() {
    const std::uint32_t epoch = detail::g_fork_epoch.load(std::memory_order_relaxed);
    if (epoch != fork_epoch) {
      fork_epoch = epoch;
      pool_used = pool.size();  // drop bytes the parent also holds
      // Force a fresh random counter: the parent continues from the same
      // (last_ms, counter), and with fresh random seeds the two processes'
      // sequences diverge. Keeping last_ms keeps this process monotonic.
      counter = detail::kCounterMax;  // the next increment "overflows" and reseeds
    }
  }
};

UuidV7Generator::UuidV7Generator(const Clock& clock)
    : clock_(clock), state_(std::make_unique<State>()) {
  detail::register_fork_handler_once();
}

UuidV7Generator::~UuidV7Generator() = default;

Uuid UuidV7Generator::next() {
  // Read the clock outside the lock: the critical section stays short, and a
  // thread that read an older time than the last UUID is handled by the
  // carry-forward below exactly like a clock that stepped back.
  const auto now = clock_.now();
  const std::int64_t now_ms = std::clamp<std::int64_t>(
      std::chrono::floor<std::chrono::milliseconds>(now.time_since_epoch()).count(), 0,
      detail::kMaxTimestampMs);

  std::int64_t ms = 0;
  std::uint64_t counter = 0;
  std::uint8_t tail[4];
  {
    std::lock_guard lock(mutex_);
    State& s = *state_;
    s.after_fork_check();
    if (now_ms > s.last_ms) {
      s.last_ms = now_ms;
      s.counter = s.random_counter_seed();
    } else if (s.counter < detail::kCounterMax) {
      // Same millisecond, or the clock went back (NTP step, VM migration):
      // stay on the last timestamp and count up, so ids keep increasing.
      ++s.counter;
    } else {
      // Counter exhausted: borrow the next millisecond. The clock catches up
      // later; until then the ids run slightly ahead of it, which is the
      // RFC's recommended trade-off against breaking monotonicity.
      s.last_ms = std::min(s.last_ms + 1, detail::kMaxTimestampMs);
      s.counter = s.random_counter_seed();
    }
    ms = s.last_ms;
    counter = s.counter;
    s.take(tail, sizeof tail);
  }

  const auto ums = static_cast<std::uint64_t>(ms);
  Uuid::Bytes b{};
  for (std::size_t i = 0; i < 6; ++i) b[i] = static_cast<std::uint8_t>(ums >> (8 * (5 - i)));
  // rand_a: version 7 and the counter's top 12 bits (41..30).
  b[6] = static_cast<std::uint8_t>(0x70 | ((counter >> 38) & 0x0F));
  b[7] = static_cast<std::uint8_t>(counter >> 30);
  // rand_b: variant 0b10, the counter's low 30 bits, then 32 random bits.
  b[8] = static_cast<std::uint8_t>(0x80 | ((counter >> 24) & 0x3F));
  b[9] = static_cast<std::uint8_t>(counter >> 16);
  b[10] = static_cast<std::uint8_t>(counter >> 8);
  b[11] = static_cast<std::uint8_t>(counter);
  std::memcpy(&b[12], tail, 4);
  return Uuid(b);
}

Uuid new_uuid_v7() {
  // Deliberately never destroyed: a UUID may be requested from another
  // static's destructor or a thread still running at exit, and a destroyed
  // function-local static would then be used after its lifetime.
  static UuidV7Generator& generator = *new UuidV7Generator(SystemClock::instance());
  return generator.next();
}

}  // namespace idem

std::size_t std::hash<idem::Uuid>::operator()(const idem::Uuid& u) const noexcept {
  // The high half of a UUIDv7 is mostly timestamp (nearly equal across ids
  // born together), the low half mostly random; mixing both through a
  // bijective finaliser makes every output bit depend on every input bit.
  const std::uint64_t hi = idem::detail::load_be64(u.bytes().data());
  const std::uint64_t lo = idem::detail::load_be64(u.bytes().data() + 8);
  return static_cast<std::size_t>(idem::detail::mix64(hi ^ idem::detail::mix64(lo)));
}
