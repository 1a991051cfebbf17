// The reference system's configuration keys (the payment provider's and billing's) and
// the warning that spans them and the core's dedup retention.
#include <algorithm>

#include <fmt/format.h>

#include "idem/config.hpp"
#include "idem/error.hpp"
#include "idem/reference/billing.hpp"
#include "idem/reference/payment_provider.hpp"
#include "reference/payment_provider_rules.hpp"

namespace idem {

namespace http {

void declare_provider_keys(SectionKeys<ProviderSettings>& keys) {
  const auto faults = [](auto member) {
    return [member](ProviderSettings & p) -> auto& {
      return std::invoke(member, p.provider.faults);
    };
  };
  keys.text(
          "provider.client_header",
          [](ProviderSettings & p) -> auto& { return p.provider.client_header; },
          "request header naming the client: stored Idempotency-Keys are scoped by it (empty: "
          "every request is the anonymous client)")
      .check([](ProviderSettings& p, SectionProblems& problems) {
        try {
          detail::validate_client_header(p.provider.client_header);
        } catch (const Error& e) {
          problems.fail("provider.client_header", e.what());
        }
      })
      .number("provider.decline", faults(&ProviderFaults::decline),
              "share of orders declined with 402 card-declined (by hash of order_id and seed)", 0,
              1)
      .duration(
          "provider.key_retention",
          [](ProviderSettings & p) -> auto& { return p.provider.key_retention; },
          "how long an Idempotency-Key is remembered; covers the 7 d dedup retention plus a day", 0,
          3650 * kConfigDay)
      .number("provider.in_progress", faults(&ProviderFaults::in_progress),
              "share of charge requests answered 409 (a request with this key in progress)", 0, 1)
      .number("provider.key_reused", faults(&ProviderFaults::key_reused),
              "share of charge requests answered 422 idempotency-key-reused, nothing stored", 0, 1)
      .duration("provider.latency", faults(&ProviderFaults::latency), "added to every new charge",
                0, 600 * kConfigSecond)
      .listen("provider.listen", &ProviderSettings::listen,
              "host:port to listen on (port 0: any free port)")
      .number("provider.reset_after_commit", faults(&ProviderFaults::reset_after_commit),
              "share of new charges committed and then answered with a dropped connection", 0, 1)
      .duration("provider.retry_after", faults(&ProviderFaults::retry_after),
                "Retry-After of the too_many_requests fault's 429 answers (whole seconds)", 0,
                3600 * kConfigSecond)
      .integer(
          "provider.seed", [](ProviderSettings & p) -> auto& { return p.provider.seed; },
          "seed of the fault draws and the decline hash", 0, 9.0e15)
      .number("provider.too_many_requests", faults(&ProviderFaults::too_many_requests),
              "share of charge requests answered 429 with Retry-After, nothing stored", 0, 1)
      .number("provider.unavailable", faults(&ProviderFaults::unavailable),
              "share of charge requests answered 503", 0, 1)
      .duration("provider.unavailable_retry_after",
                faults(&ProviderFaults::unavailable_retry_after),
                "Retry-After of the unavailable fault's 503 answers (whole seconds; 0: none)", 0,
                3600 * kConfigSecond);
}

}  // namespace http

void declare_billing_keys(SectionKeys<BillingSettings>& keys) {
  keys.duration("billing.provider_key_retention", &BillingSettings::provider_key_retention,
                "how long the payment provider billing calls remembers an Idempotency-Key, as "
                "its operator states it (empty: unknown); config check warns when it is "
                "shorter than dedup.retention",
                kConfigHour, 3650 * kConfigDay)
      .text("consumer.provider_url", &BillingSettings::provider_url,
            "billing handler: the payment provider's base URL")
      .check([](BillingSettings& b, SectionProblems& problems) {
        if (!b.provider_url.empty() && !b.provider_url.starts_with("http://") &&
            !b.provider_url.starts_with("https://")) {
          problems.fail("consumer.provider_url",
                        fmt::format("expected an http:// or https:// URL, got {}",
                                    problems.shown("consumer.provider_url")));
        }
      });
}

namespace {

std::string shown(const Config& config, std::string_view key) {
  const ConfigEntry* e = config.entry(key);
  if (e == nullptr) return std::string(key);
  return fmt::format("{} = {} ({})", key, e->value, e->origin.describe());
}

bool set_by_user(const Config& config, std::string_view key) {
  const ConfigEntry* e = config.entry(key);
  return e != nullptr && e->origin.layer != ConfigLayer::Default;
}

bool configures_the_reference_provider(const Config& config) {
  return std::any_of(config.entries.begin(), config.entries.end(), [](const ConfigEntry& e) {
    return e.key.starts_with("provider.") && e.origin.layer != ConfigLayer::Default;
  });
}

}  // namespace

void warn_provider_key_retention(const Config& config, bool runs_billing,
                                 std::vector<std::string>& warnings) {
  std::string_view key;
  std::chrono::milliseconds kept{0};
  const BillingSettings& billing = config.get<BillingSettings>();
  if (billing.provider_key_retention) {
    key = "billing.provider_key_retention";
    kept = *billing.provider_key_retention;
  } else if (configures_the_reference_provider(config)) {
    key = "provider.key_retention";
    kept = config.get<http::ProviderSettings>().provider.key_retention;
  } else {
    // Unknown. With the default dedup retention the reference provider's default covers
    // it; a changed one is worth a word to whoever runs billing against some provider.
    if (runs_billing && set_by_user(config, "dedup.retention")) {
      warnings.push_back(fmt::format(
          "billing: the provider's Idempotency-Key retention is unknown; with {} it must keep "
          "keys at least that long, or a late redelivery is charged twice (IDEM-4): state what "
          "it keeps in billing.provider_key_retention to have it checked",
          shown(config, "dedup.retention")));
    }
    return;
  }
  const std::chrono::milliseconds dedup = config.dedup.horizon.retention;
  if (kept >= dedup) return;
  warnings.push_back(fmt::format(
      "billing: {} is shorter than {}: an event redelivered after the provider forgot its key, "
      "whose first transaction never committed, is charged twice (IDEM-4); make the provider "
      "keep keys at least as long as the dedup retention, plus a margin (the reference "
      "provider's default is 8d)",
      shown(config, key), shown(config, "dedup.retention")));
}

}  // namespace idem
