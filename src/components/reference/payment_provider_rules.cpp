#include "reference/payment_provider_rules.hpp"

#include <algorithm>
#include <cctype>
#include <iterator>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "idem/http/idempotent_client.hpp"
#include "idem/sha256.hpp"

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

// In the order of enum class Problem; Internal (the last) is kInternalProblem.
constexpr ProblemType kProblemTypes[] = {
    {400, "urn:idem:problem:idempotency-key-missing", "Idempotency-Key missing"},
    {400, "urn:idem:problem:idempotency-key-malformed", "Idempotency-Key malformed"},
    {400, "urn:idem:problem:invalid-request", "Invalid request"},
    {409, "urn:idem:problem:idempotency-key-in-flight", "Idempotency-Key in flight"},
    {422, "urn:idem:problem:idempotency-key-reused", "Idempotency-Key reused"},
    {402, "urn:idem:problem:card-declined", "Card declined"},
    {503, "urn:idem:problem:unavailable", "Service unavailable"},
    {429, "urn:idem:problem:too-many-requests", "Too many requests"},
    {404, "urn:idem:problem:not-found", "Not found"},
};
constexpr ProblemType kInternalProblem{500, "urn:idem:problem:internal-error", "Internal error"};
static_assert(std::size(kProblemTypes) == static_cast<std::size_t>(Problem::Internal));

// RFC 8941 section 3.3.3: an sf-string holds printable ASCII (%x20-7E) only.
bool printable_ascii(char c) noexcept {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x20 && u <= 0x7e;
}

bool control_character(char c) noexcept {
  const auto u = static_cast<unsigned char>(c);
  return u < 0x20 || u == 0x7f;
}

std::optional<std::string> malformed(std::string& why, std::string message) {
  why = std::move(message);
  return std::nullopt;
}

// The inside of an sf-string after its opening quote: `"` ends it, `\` escapes `"` or
// `\` and nothing else.
std::optional<std::string> unquote_sf_string(std::string_view rest, std::string& why) {
  std::string key;
  for (std::size_t i = 0; i < rest.size(); ++i) {
    const char c = rest[i];
    if (c == '\\') {
      if (i + 1 == rest.size() || (rest[i + 1] != '"' && rest[i + 1] != '\\'))
        return malformed(why, "a backslash in the quoted key escapes neither '\"' nor '\\'");
      key.push_back(rest[++i]);
    } else if (c == '"') {
      if (i + 1 != rest.size()) return malformed(why, "text follows the closing quote of the key");
      return key;
    } else if (!printable_ascii(c)) {
      return malformed(why, "the quoted key holds a character outside printable ASCII");
    } else {
      key.push_back(c);
    }
  }
  return malformed(why, "the quoted key has no closing quote");
}

}  // namespace

const ProblemType& problem_type(Problem problem) {
  const auto index = static_cast<std::size_t>(problem);
  return index < std::size(kProblemTypes) ? kProblemTypes[index] : kInternalProblem;
}

std::string problem_body(Problem problem, std::string_view detail, const json& extensions) {
  const ProblemType& t = problem_type(problem);
  json body = extensions.is_object() ? extensions : json::object();
  body["type"] = t.type;
  body["title"] = t.title;
  body["status"] = t.status;
  body["detail"] = detail;
  return body.dump();
}

std::optional<std::string> parse_idempotency_key(std::string_view value, std::string& why) {
  // Optional whitespace around a field value is not part of it (RFC 9110 section 5.5).
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  std::optional<std::string> key;
  if (!value.empty() && value.front() == '"') {
    key = unquote_sf_string(value.substr(1), why);
    if (!key) return key;
  } else {
    if (std::any_of(value.begin(), value.end(), control_character))
      return malformed(why, "the key holds a control character");
    key = std::string(value);
  }
  if (key->empty()) return malformed(why, "the key is empty");
  if (key->size() > kMaxIdempotencyKeyLength) {
    return malformed(why, fmt::format("the key is {} characters long; at most {} are allowed",
                                      key->size(), kMaxIdempotencyKeyLength));
  }
  return key;
}

std::string client_identity(std::string_view header_value) {
  if (header_value.empty()) return {};
  std::string hex = idem::sha256_hex(header_value);
  if (hex.empty())
    throw Error(ErrorCode::Internal, ErrorSource::Http, "payment provider: SHA-256 failed");
  return hex;
}

void validate_client_header(std::string_view name) {
  // RFC 9110 section 5.1: a field name is a token.
  const bool token = std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
  if (!token) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                fmt::format("payment provider: client_header '{}' is not a header name", name));
  }
}

json idempotency_policy_json(const ProviderConfig& config) {
  return json{{"expires_after_seconds",
               std::chrono::duration_cast<std::chrono::seconds>(config.key_retention).count()},
              {"expires_after_header", kKeyExpiresAfterHeader},
              {"scope", json::array({"client", "method", "path"})},
              {"client_header", config.client_header},
              {"key_forms", json::array({"sf-string", "bare"})},
              {"max_key_length", kMaxIdempotencyKeyLength}};
}

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
  check_probability(faults.key_reused, "key_reused");
  check_probability(faults.too_many_requests, "too_many_requests");
  if (faults.latency.count() < 0) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "provider fault latency must not be negative");
  }
  if (faults.retry_after.count() < 0 || faults.unavailable_retry_after.count() < 0) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "provider fault Retry-After must not be negative");
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
    else if (name == "key_reused" && number)
      next.key_reused = value.get<double>();
    else if (name == "too_many_requests" && number)
      next.too_many_requests = value.get<double>();
    else if (name == "latency_ms" && value.is_number_integer())
      next.latency = std::chrono::milliseconds(value.get<std::int64_t>());
    else if (name == "retry_after_s" && value.is_number_integer())
      next.retry_after = std::chrono::seconds(value.get<std::int64_t>());
    else if (name == "unavailable_retry_after_s" && value.is_number_integer())
      next.unavailable_retry_after = std::chrono::seconds(value.get<std::int64_t>());
    else {
      why = fmt::format(
          "unknown fault or wrong type: '{}' (expected reset_after_commit, unavailable, "
          "in_progress, decline, key_reused, too_many_requests: numbers; latency_ms, "
          "retry_after_s, unavailable_retry_after_s: integers)",
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
              {"decline", faults.decline},
              {"key_reused", faults.key_reused},
              {"too_many_requests", faults.too_many_requests},
              {"retry_after_s", faults.retry_after.count()},
              {"unavailable_retry_after_s", faults.unavailable_retry_after.count()}};
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
              {"too_many_requests", s.too_many_requests},
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
  return problem_body(
      Problem::CardDeclined,
      fmt::format("the card for order {} was declined; nothing was charged", order_id),
      json{{"order_id", order_id}});
}

}  // namespace idem::http::detail
