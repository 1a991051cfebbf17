#include "config/config_warnings.hpp"

#include <algorithm>
#include <optional>
#include <string_view>

#include <fmt/format.h>

namespace idem::detail {

namespace {

const ConfigEntry* entry(const Config& config, std::string_view key) {
  const auto it = std::find_if(config.entries.begin(), config.entries.end(),
                               [&](const ConfigEntry& e) { return e.key == key; });
  return it == config.entries.end() ? nullptr : &*it;
}

std::string shown(const Config& config, std::string_view key) {
  const ConfigEntry* e = entry(config, key);
  if (e == nullptr) return std::string(key);
  return fmt::format("{} = {} ({})", key, e->value, e->origin.describe());
}

bool set_by_user(const Config& config, std::string_view key) {
  const ConfigEntry* e = entry(config, key);
  return e != nullptr && e->origin.layer != ConfigLayer::Default;
}

bool configures_the_reference_provider(const Config& config) {
  return std::any_of(config.entries.begin(), config.entries.end(), [](const ConfigEntry& e) {
    return e.key.starts_with("provider.") && e.origin.layer != ConfigLayer::Default;
  });
}

/// IDEM-4: the provider deduplicates a charge only while it remembers the key, so it must
/// remember it for as long as the consumer may still execute a redelivery. What the
/// provider keeps is known when the configuration states it for an outside provider
/// (billing.provider_key_retention) or when the same configuration runs the reference
/// provider (some provider.* key set in it); otherwise nothing is claimed.
void check_provider_key_retention(const Config& config, std::vector<std::string>& out) {
  std::string_view key;
  std::chrono::milliseconds kept{0};
  if (config.billing.provider_key_retention) {
    key = "billing.provider_key_retention";
    kept = *config.billing.provider_key_retention;
  } else if (configures_the_reference_provider(config)) {
    key = "provider.key_retention";
    kept = config.provider.key_retention;
  } else {
    // Unknown. With the default dedup retention the reference provider's default covers
    // it; a changed one is worth a word to whoever runs billing against some provider.
    if (config.consumer.handler == HandlerKind::Billing && set_by_user(config, "dedup.retention")) {
      out.push_back(fmt::format(
          "billing: the provider's Idempotency-Key retention is unknown; with {} it must keep "
          "keys at least that long, or a late redelivery is charged twice (IDEM-4): state what "
          "it keeps in billing.provider_key_retention to have it checked",
          shown(config, "dedup.retention")));
    }
    return;
  }
  const std::chrono::milliseconds dedup = config.dedup.horizon.retention;
  if (kept >= dedup) return;
  out.push_back(fmt::format(
      "billing: {} is shorter than {}: an event redelivered after the provider forgot its key, "
      "whose first transaction never committed, is charged twice (IDEM-4); make the provider "
      "keep keys at least as long as the dedup retention, plus a margin (the reference "
      "provider's default is 8d)",
      shown(config, key), shown(config, "dedup.retention")));
}

}  // namespace

std::vector<std::string> config_warnings(const Config& config) {
  std::vector<std::string> out;
  check_provider_key_retention(config, out);
  return out;
}

}  // namespace idem::detail
