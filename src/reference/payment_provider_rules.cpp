#include "reference/payment_provider_rules.hpp"

#include <fmt/format.h>

#include "idem/error.hpp"

namespace idem::http::detail {

namespace {

using json = nlohmann::json;

void check_probability(double p, std::string_view name) {
  if (!(p >= 0.0 && p <= 1.0)) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                fmt::format("provider fault {} must be a probability in [0, 1], got {}", name, p));
  }
}

// SplitMix64: a fixed, well-mixed hash, so the declined orders of a seed are the same
// in every process (std::hash makes no such promise).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::string ChargeRequest::fingerprint() const {
  return fmt::format("order_id={};amount={}", order_id, amount.to_string());
}

std::optional<ChargeRequest> parse_charge(std::string_view body, std::string& why) {
  const json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) {
    why = "the body must be a JSON object";
    return std::nullopt;
  }
  ChargeRequest req;
  const auto id = doc.find("order_id");
  if (id == doc.end() || !id->is_number_integer() || id->get<std::int64_t>() <= 0) {
    why = "order_id must be a positive integer";
    return std::nullopt;
  }
  req.order_id = id->get<std::int64_t>();
  const auto amount = doc.find("amount");
  if (amount == doc.end() || !amount->is_string()) {
    why = "amount must be a decimal string such as \"12.30\"";
    return std::nullopt;
  }
  const auto parsed = Amount::parse(amount->get<std::string>());
  if (!parsed) {
    why = fmt::format("amount '{}' is not an exact decimal with at most 2 places",
                      amount->get<std::string>());
    return std::nullopt;
  }
  req.amount = *parsed;
  return req;
}

void validate_faults(const ProviderFaults& faults) {
  check_probability(faults.reset_after_commit, "reset_after_commit");
  check_probability(faults.unavailable, "unavailable");
  check_probability(faults.in_progress, "in_progress");
  check_probability(faults.decline, "decline");
  if (faults.latency.count() < 0) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "provider fault latency must not be negative");
  }
}

bool is_declined(std::int64_t order_id, double decline_share, std::uint64_t seed) {
  if (decline_share <= 0.0) return false;
  const std::uint64_t h = mix(static_cast<std::uint64_t>(order_id) ^ mix(seed));
  return static_cast<double>(h >> 11) * 0x1.0p-53 < decline_share;
}

std::optional<ProviderFaults> apply_fault_changes(const ProviderFaults& faults,
                                                  std::string_view body, std::string& why) {
  const json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) {
    why = "the body must be a JSON object";
    return std::nullopt;
  }
  ProviderFaults next = faults;
  for (const auto& [name, value] : doc.items()) {
    const bool number = value.is_number();
    if (name == "reset_after_commit" && number)
      next.reset_after_commit = value.get<double>();
    else if (name == "unavailable" && number)
      next.unavailable = value.get<double>();
    else if (name == "in_progress" && number)
      next.in_progress = value.get<double>();
    else if (name == "decline" && number)
      next.decline = value.get<double>();
    else if (name == "latency_ms" && value.is_number_integer())
      next.latency = std::chrono::milliseconds(value.get<std::int64_t>());
    else {
      why = fmt::format(
          "unknown fault or wrong type: '{}' (expected reset_after_commit, "
          "unavailable, in_progress, decline: numbers; latency_ms: integer)",
          name);
      return std::nullopt;
    }
  }
  try {
    validate_faults(next);
  } catch (const Error& e) {
    why = e.what();
    return std::nullopt;
  }
  return next;
}

json faults_to_json(const ProviderFaults& faults) {
  return json{{"reset_after_commit", faults.reset_after_commit},
              {"unavailable", faults.unavailable},
              {"in_progress", faults.in_progress},
              {"latency_ms", faults.latency.count()},
              {"decline", faults.decline}};
}

json charge_to_json(const Charge& c) {
  return json{{"payment_id", c.payment_id},   {"order_id", c.order_id},
              {"amount", c.amount},           {"idempotency_key", c.idempotency_key},
              {"traceparent", c.traceparent}, {"created_at", c.created_at}};
}

json summary_to_json(const ProviderSummary& s) {
  return json{{"charges", s.charges},
              {"orders", s.orders},
              {"orders_charged_more_than_once", s.orders_charged_more_than_once},
              {"replays", s.replays},
              {"conflicts", s.conflicts},
              {"resets_after_commit", s.resets_after_commit},
              {"unavailable", s.unavailable},
              {"in_progress", s.in_progress},
              {"declined", s.declined}};
}

std::string charged_body(std::string_view payment_id, std::int64_t order_id,
                         std::string_view amount) {
  return json{
      {"payment_id", payment_id}, {"order_id", order_id}, {"amount", amount}, {"status", "charged"}}
      .dump();
}

std::string declined_body(std::int64_t order_id) {
  return json{{"error", "card_declined"}, {"order_id", order_id}}.dump();
}

std::string error_body(std::string_view error, std::string_view message) {
  return json{{"error", error}, {"message", message}}.dump();
}

}  // namespace idem::http::detail
