#pragma once
/// \file
/// Structured log lines: one line per notable event (never per message at info), plain
/// (`2026-11-30T02:10:00.123Z warn consumer: message key=value ...`) or JSON (one object
/// per line), filtered by level. Values of secret keys (config.hpp's is_secret_key) are
/// written as `<redacted>`. No global logger: create one and pass it (or its sinks) on.

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idem/consumer.hpp"

namespace idem {

enum class LogLevel { Debug, Info, Warn, Error };
enum class LogFormat { Plain, Json };

[[nodiscard]] std::string_view to_string(LogLevel level) noexcept;

/// `log.*`
struct LogSettings {
  LogLevel level = LogLevel::Info;
  LogFormat format = LogFormat::Plain;
};

/// One key/value of a log line.
struct LogField {
  std::string key;
  std::string value;
};

/// The fields that locate a record: topic, partition, offset, event_id (when known) and
/// trace_id (from its traceparent header, when valid).
[[nodiscard]] std::vector<LogField> record_fields(const RecordInfo& record,
                                                  std::optional<std::string_view> event_id = {});

class Logger {
 public:
  using Sink = std::function<void(std::string_view line)>;

  /// Writes to `sink` (default: stderr, one write per line). Thread-safe if `sink` is.
  explicit Logger(LogSettings settings, Sink sink = {});

  [[nodiscard]] bool enabled(LogLevel level) const noexcept { return level >= settings_.level; }

  /// One line, if `level` is enabled.
  void log(LogLevel level, std::string_view component, std::string_view message,
           const std::vector<LogField>& fields = {}) const;

  /// A line sink for ConsumerHooks::log and RelayObserver::log (which pass free text,
  /// librdkafka's lines included): each line becomes a `level` entry of `component`.
  [[nodiscard]] std::function<void(std::string_view)> lines(std::string_view component,
                                                            LogLevel level = LogLevel::Warn) const;

 private:
  LogSettings settings_;
  Sink sink_;
};

}  // namespace idem
