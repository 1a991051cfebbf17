#pragma once
/// \file
/// W3C Trace Context (`traceparent`, https://www.w3.org/TR/trace-context/) for idem's
/// path: created when an outbox event is enqueued (or taken from the caller, who puts a
/// `traceparent` into OutboxMessage::headers), carried as a Kafka header by the relay,
/// read by the handler from RecordInfo, written into log lines and forwarded on the
/// outgoing HTTP call (a child span of the record's context).

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "idem/consumer.hpp"

namespace idem {

/// The header (Kafka and HTTP) that carries the context.
inline constexpr std::string_view kTraceparentHeader = "traceparent";

/// A parsed `traceparent`: version 00, 16-byte trace id, 8-byte parent (span) id, flags.
struct TraceContext {
  std::array<std::uint8_t, 16> trace_id{};
  std::array<std::uint8_t, 8> span_id{};
  std::uint8_t flags = 0x01;  ///< bit 0: sampled

  /// A new trace: random trace and span ids (never all zero), sampled. Thread-safe.
  [[nodiscard]] static TraceContext new_root();
  /// The same trace with a new span id: what a service puts on a call it makes.
  [[nodiscard]] TraceContext child() const;

  /// `00-<trace id>-<span id>-<flags>`, lower-case hex.
  [[nodiscard]] std::string traceparent() const;
  /// The 32-hex-digit trace id, for log lines.
  [[nodiscard]] std::string trace_id_hex() const;

  friend bool operator==(const TraceContext&, const TraceContext&) = default;
};

/// Parses a `traceparent` value. nullopt unless it is version 00 in the exact format,
/// lower-case hex, with a trace id and a span id that are not all zero (the spec's
/// rules: an invalid value starts a new trace instead).
[[nodiscard]] std::optional<TraceContext> parse_traceparent(std::string_view value) noexcept;

/// The trace context a record carries in its `traceparent` header, if valid.
[[nodiscard]] std::optional<TraceContext> trace_context(const RecordInfo& record) noexcept;

}  // namespace idem
