// W3C traceparent: formatting and parsing are a few lines of hex, written here because
// Debian 12 has no packaged trace-context library (opentelemetry-cpp is not packaged).
#include "idem/tracing.hpp"

#include <algorithm>
#include <random>

namespace idem {

namespace {

constexpr char kHex[] = "0123456789abcdef";

template <std::size_t N>
void append_hex(std::string& out, const std::array<std::uint8_t, N>& bytes) {
  for (const std::uint8_t b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0x0f]);
  }
}

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // upper case is invalid in version 00
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
      for (std::size_t j = i; j < std::min(N, i + 8); ++j, r >>= 8) bytes[j] = static_cast<std::uint8_t>(r);
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
  std::string out = "00-";
  out.reserve(55);
  append_hex(out, trace_id);
  out.push_back('-');
  append_hex(out, span_id);
  out.push_back('-');
  out.push_back(kHex[flags >> 4]);
  out.push_back(kHex[flags & 0x0f]);
  return out;
}

std::string TraceContext::trace_id_hex() const {
  std::string out;
  append_hex(out, trace_id);
  return out;
}

std::optional<TraceContext> parse_traceparent(std::string_view v) noexcept {
  // 00-<32>-<16>-<2>: 55 characters.
  if (v.size() != 55 || v.substr(0, 3) != "00-" || v[35] != '-' || v[52] != '-') return std::nullopt;
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
