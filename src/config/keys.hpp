#pragma once
// The table of configuration keys: name, type, default, range, environment aliases.
// Declared once here so the loader, `idem config check` and docs/operations.md agree.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace idem::detail {

// Duration: parse_duration() text, bounds in milliseconds. List: comma-separated (a TOML
// array in the file); with `choices`, every element must be one of them.
enum class KeyType { String, Integer, Number, Boolean, List, Choice, Duration, DurationList };

struct KeySpec {
  std::string_view name;
  KeyType type;
  std::string_view default_value;  ///< as text; empty = no default
  std::string_view help;
  double min = 0;  ///< Integer/Number/Duration(ms): inclusive bounds
  double max = 0;
  std::vector<std::string_view> choices = {};  ///< Choice: the allowed values
  /// Conventional environment variables read for this key (after IDEM_<KEY>, which wins).
  std::vector<std::string_view> conventional_env = {};
  /// Duration: what a bare number means (`ms` for the `_ms` keys); empty = a unit is required.
  std::string_view unit_of_bare_number = {};
};

/// Every key except the pass-through `kafka.*` ones, sorted by name.
[[nodiscard]] std::span<const KeySpec> key_specs();

/// The spec of `name`, or nullptr.
[[nodiscard]] const KeySpec* find_key(std::string_view name) noexcept;

/// Prefix of the librdkafka pass-through keys.
inline constexpr std::string_view kKafkaPrefix = "kafka.";

/// `IDEM_` + name in upper case with dots as underscores.
[[nodiscard]] std::string env_name_of(std::string_view key);

}  // namespace idem::detail
