#include "idem/logging.hpp"

#include <chrono>
#include <cstdio>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/config.hpp"
#include "idem/tracing.hpp"

namespace idem {

std::string_view to_string(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::Debug: return "debug";
    case LogLevel::Info: return "info";
    case LogLevel::Warn: return "warn";
    case LogLevel::Error: return "error";
  }
  return "unknown";
}

namespace {

std::string now_rfc3339() {
  const auto now =
      std::chrono::time_point_cast<std::chrono::milliseconds>(std::chrono::system_clock::now());
  const auto seconds = std::chrono::time_point_cast<std::chrono::seconds>(now);
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03}Z", seconds, (now - seconds).count());
}

// Plain values with spaces, quotes or '=' are quoted so a line stays machine-splittable.
std::string plain_value(std::string_view v) {
  if (!v.empty() && v.find_first_of(" \"=\t\n") == std::string_view::npos) return std::string(v);
  std::string out = "\"";
  for (const char c : v) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c == '\n' ? ' ' : c);
  }
  out.push_back('"');
  return out;
}

}  // namespace

std::vector<LogField> record_fields(const RecordInfo& record,
                                    std::optional<std::string_view> event_id) {
  std::vector<LogField> out = {{"topic", std::string(record.topic)},
                               {"partition", std::to_string(record.partition)},
                               {"offset", std::to_string(record.offset)}};
  if (event_id) {
    out.push_back({"event_id", std::string(*event_id)});
  } else if (const auto id = record.header("event_id")) {
    out.push_back({"event_id", std::string(*id)});
  }
  if (const auto trace = trace_context(record)) out.push_back({"trace_id", trace->trace_id_hex()});
  return out;
}

Logger::Logger(LogSettings settings, Sink sink) : settings_(settings), sink_(std::move(sink)) {
  if (!sink_) {
    sink_ = [](std::string_view line) {
      std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
    };
  }
}

void Logger::log(LogLevel level, std::string_view component, std::string_view message,
                 const std::vector<LogField>& fields) const {
  if (!enabled(level)) return;
  const auto shown = [](const LogField& f) -> std::string_view {
    return is_secret_key(f.key) ? std::string_view("<redacted>") : std::string_view(f.value);
  };
  std::string line;
  if (settings_.format == LogFormat::Json) {
    nlohmann::ordered_json j;
    j["ts"] = now_rfc3339();
    j["level"] = to_string(level);
    j["component"] = component;
    j["msg"] = message;
    for (const auto& f : fields) j[f.key] = shown(f);
    // Replace invalid UTF-8 (e.g. from a payload) instead of throwing.
    line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    line = fmt::format("{} {} {}: {}", now_rfc3339(), to_string(level), component, message);
    for (const auto& f : fields) line += fmt::format(" {}={}", f.key, plain_value(shown(f)));
  }
  sink_(line);
}

std::function<void(std::string_view)> Logger::lines(std::string_view component,
                                                    LogLevel level) const {
  return [this, component = std::string(component), level](std::string_view text) {
    log(level, component, text);
  };
}

}  // namespace idem
