// W3C traceparent: formatting and parsing are a few lines of hex, written here because
// Debian 12 has no packaged trace-context library (opentelemetry-cpp is not packaged).
#include "idem/tracing.hpp"

#include <algorithm>
#include <random>

namespace idem {

namespace {

constexpr char kHex[] = "0123456789abcdef";

// Writes 2*N hex digits at `out` (the caller sized the string): no per-character
// capacity checks, since every consumed record goes through here when tracing is on.
template <std::size_t N>
char* write_hex(char* out, const std::array<std::uint8_t, N>& bytes) noexcept {
  for (const std::uint8_t b : bytes) {
    *out++ = kHex[b >> 4];
    *out++ = kHex[b & 0x0f];
  }
  return out;
}

// -1 for anything but 0-9 a-f (upper case is invalid in version 00).
constexpr std::array<std::int8_t, 256> kHexValue = [] {
  std::array<std::int8_t, 256> t{};
  t.fill(-1);
  for (int c = '0'; c <= '9'; ++c)
    t[static_cast<std::size_t>(c)] = static_cast<std::int8_t>(c - '0');
  for (int c = 'a'; c <= 'f'; ++c)
    t[static_cast<std::size_t>(c)] = static_cast<std::int8_t>(c - 'a' + 10);
  return t;
}();

int hex_value(char c) noexcept {
  return kHexValue[static_cast<unsigned char>(c)];
}

template <std::size_t N>
bool parse_hex(std::string_view text, std::array<std::uint8_t, N>& out) noexcept {
  if (text.size() != 2 * N) return false;
  for (std::size_t i = 0; i < N; ++i) {
    const int hi = hex_value(text[2 * i]);
    const int lo = hex_value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return true;
}

template <std::size_t N>
bool all_zero(const std::array<std::uint8_t, N>& bytes) noexcept {
  return std::all_of(bytes.begin(), bytes.end(), [](std::uint8_t b) { return b == 0; });
}

template <std::size_t N>
void fill_random(std::array<std::uint8_t, N>& bytes) {
  // One engine per thread, seeded from the OS: ids must not repeat across processes.
  thread_local std::mt19937_64 engine{[] {
    std::random_device rd;
    std::seed_seq seed{rd(), rd(), rd(), rd()};
    return std::mt19937_64(seed);
  }()};
  do {
    for (std::size_t i = 0; i < N; i += 8) {
      std::uint64_t r = engine();
      for (std::size_t j = i; j < std::min(N, i + 8); ++j, r >>= 8)
        bytes[j] = static_cast<std::uint8_t>(r);
    }
  } while (all_zero(bytes));
}

}  // namespace

TraceContext TraceContext::new_root() {
  TraceContext c;
  fill_random(c.trace_id);
  fill_random(c.span_id);
  return c;
}

TraceContext TraceContext::child() const {
  TraceContext c = *this;
  fill_random(c.span_id);
  return c;
}

std::string TraceContext::traceparent() const {
  std::string out(55, '-');
  char* p = out.data();
  *p++ = '0';
  *p++ = '0';
  p = write_hex(p + 1, trace_id);
  p = write_hex(p + 1, span_id);
  p[1] = kHex[flags >> 4];
  p[2] = kHex[flags & 0x0f];
  return out;
}

std::string TraceContext::trace_id_hex() const {
  std::string out(32, '0');
  write_hex(out.data(), trace_id);
  return out;
}

std::optional<TraceContext> parse_traceparent(std::string_view v) noexcept {
  // 00-<32>-<16>-<2>: 55 characters.
  if (v.size() != 55 || v.substr(0, 3) != "00-" || v[35] != '-' || v[52] != '-')
    return std::nullopt;
  TraceContext c;
  std::array<std::uint8_t, 1> flags{};
  if (!parse_hex(v.substr(3, 32), c.trace_id) || !parse_hex(v.substr(36, 16), c.span_id) ||
      !parse_hex(v.substr(53, 2), flags) || all_zero(c.trace_id) || all_zero(c.span_id)) {
    return std::nullopt;
  }
  c.flags = flags[0];
  return c;
}

std::optional<TraceContext> trace_context(const RecordInfo& record) noexcept {
  const auto value = record.header(kTraceparentHeader);
  return value ? parse_traceparent(*value) : std::nullopt;
}

}  // namespace idem
