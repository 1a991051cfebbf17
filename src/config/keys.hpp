#pragma once
// The table of configuration keys: name, type, default, range, environment aliases.
// Declared once here so the loader, `idem config check` and docs/operations.md agree.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace idem::detail {

enum class KeyType { String, Integer, Number, Boolean, List, Choice };

struct KeySpec {
  std::string_view name;
  KeyType type;
  std::string_view default_value;  ///< as text; empty = no default
  std::string_view help;
  double min = 0;                  ///< Integer/Number: inclusive bounds
  double max = 0;
  std::vector<std::string_view> choices = {};  ///< Choice: the allowed values
  /// Conventional environment variables read for this key (after IDEM_<KEY>, which wins).
  std::vector<std::string_view> conventional_env = {};
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
