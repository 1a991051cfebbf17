// The loader's value parsers (config_keys.hpp): every key of every section is read by
// one of these, so a type is written and reported the same way wherever it is declared.
#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "idem/config.hpp"

namespace idem::detail {

namespace {

std::string quoted(const KeySpec& spec, std::string_view text) {
  return is_secret_key(spec.name) ? "<redacted>" : fmt::format("'{}'", text);
}

std::string choices_text(const KeySpec& spec) {
  std::string allowed;
  for (const auto& c : spec.choices) allowed += (allowed.empty() ? "" : ", ") + c;
  return allowed;
}

}  // namespace

std::optional<std::string> parse_integer(const KeySpec& spec, std::string_view text,
                                         std::int64_t& out) {
  std::int64_t n = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, n);
  if (ec != std::errc() || ptr != end || static_cast<double>(n) < spec.min ||
      static_cast<double>(n) > spec.max) {
    return fmt::format("expected an integer from {} to {}, got {}", spec.min, spec.max,
                       quoted(spec, text));
  }
  out = n;
  return std::nullopt;
}

std::optional<std::string> parse_number(const KeySpec& spec, std::string_view text, double& out) {
  double d = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, d);
  if (ec != std::errc() || ptr != end || !std::isfinite(d) || d < spec.min || d > spec.max) {
    return fmt::format("expected a number from {} to {}, got {}", spec.min, spec.max,
                       quoted(spec, text));
  }
  out = d;
  return std::nullopt;
}

std::optional<std::string> parse_boolean(std::string_view text, bool& out) {
  if (text == "true" || text == "1" || text == "yes") {
    out = true;
  } else if (text == "false" || text == "0" || text == "no") {
    out = false;
  } else {
    return fmt::format("expected true or false, got '{}'", text);
  }
  return std::nullopt;
}

std::optional<std::string> parse_listen(std::string_view text) {
  if (text.empty() || is_host_port(text)) return std::nullopt;  // empty: not served
  return fmt::format("expected host:port (port 0 to 65535), got '{}'", text);
}

std::optional<std::string> parse_duration_value(const KeySpec& spec, std::string_view text,
                                                std::chrono::milliseconds& out) {
  const auto d = parse_duration(text, spec.unit_of_bare_number);
  if (!d || static_cast<double>(d->count()) < spec.min ||
      static_cast<double>(d->count()) > spec.max) {
    const auto bound = [](double ms) {
      return format_duration(std::chrono::milliseconds(static_cast<std::int64_t>(ms)));
    };
    return fmt::format(
        "expected a duration from {} to {} (a number and ms, s, m, h or d{}), got {}",
        bound(spec.min), bound(spec.max),
        spec.unit_of_bare_number.empty()
            ? std::string()
            : fmt::format("; a bare number is {}", spec.unit_of_bare_number),
        quoted(spec, text));
  }
  out = *d;
  return std::nullopt;
}

std::optional<std::string> parse_list(const KeySpec& spec, std::string_view text,
                                      std::vector<std::string>& out) {
  out.clear();
  std::size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    const auto comma = std::min(text.find(',', start), text.size());
    std::string item(text.substr(start, comma - start));
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item.empty()) return "empty list element";
    if (!spec.choices.empty() &&
        std::find(spec.choices.begin(), spec.choices.end(), item) == spec.choices.end()) {
      return fmt::format("'{}' is not one of {}", item, choices_text(spec));
    }
    out.push_back(std::move(item));
    start = comma + 1;
  }
  return std::nullopt;
}

std::optional<std::string> parse_choice(const KeySpec& spec, std::string_view text,
                                        std::size_t& index) {
  const auto it = std::find(spec.choices.begin(), spec.choices.end(), text);
  if (it == spec.choices.end()) {
    return fmt::format("expected one of {}, got {}", choices_text(spec), quoted(spec, text));
  }
  index = static_cast<std::size_t>(it - spec.choices.begin());
  return std::nullopt;
}

std::string duration_text(std::chrono::milliseconds d, std::string_view unit_of_bare_number) {
  if (unit_of_bare_number.empty()) return format_duration(d);
  const std::string bare_unit(unit_of_bare_number);
  const auto unit = parse_duration("1" + bare_unit);
  return unit && unit->count() > 0 ? std::to_string(d.count() / unit->count()) : format_duration(d);
}

std::string number_text(double d) {
  return fmt::format("{}", d);
}

}  // namespace idem::detail
