// Planning a conformance probe: every request of every case is built before the first is
// sent, so a dry run lists exactly what a run sends and the request bound is checked once.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "http/curl_support.hpp"
#include "idem/error.hpp"
#include "idem/http/conformance_probe.hpp"
#include "idem/http/response_policy.hpp"
#include "idem/uuid.hpp"

namespace idem::http {

std::string format_sf_string(std::string_view key) {
  std::string out;
  out.reserve(key.size() + 2);
  out.push_back('"');
  for (const char c : key) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

std::string format_key(std::string_view key, KeyForm form) {
  return form == KeyForm::SfString ? format_sf_string(key) : std::string(key);
}

std::string_view to_string(CaseId id) noexcept {
  switch (id) {
    case CaseId::FirstRequest: return "first_request";
    case CaseId::Replay: return "replay";
    case CaseId::ChangedPayload: return "changed_payload";
    case CaseId::InFlight: return "in_flight";
    case CaseId::MissingKey: return "missing_key";
    case CaseId::MalformedKey: return "malformed_key";
    case CaseId::KeyForms: return "key_forms";
    case CaseId::ReplayAfter5xx: return "replay_after_5xx";
    case CaseId::Concurrency: return "concurrency";
    case CaseId::ClientScoping: return "client_scoping";
    case CaseId::ProblemDetails: return "problem_details";
  }
  return "unknown";
}

std::string_view describe(CaseId id) noexcept {
  switch (id) {
    case CaseId::FirstRequest: return "a new key: processed, 2xx";
    case CaseId::Replay: return "same key and body again: same status and body";
    case CaseId::ChangedPayload: return "same key, changed amount: 422";
    case CaseId::InFlight: return "same key while the first is in flight: 409";
    case CaseId::MissingKey: return "no key where one is required: 400";
    case CaseId::MalformedKey: return "control character, broken sf-string: 4xx";
    case CaseId::KeyForms: return "\"k\" then k: both accepted, one resource";
    case CaseId::ReplayAfter5xx: return "same key after a 5xx: processed or 5xx replayed";
    case CaseId::Concurrency: return "parallel requests, one new key: one resource";
    case CaseId::ClientScoping: return "client B, client A's key and body: not A's answer";
    case CaseId::ProblemDetails: return "error answers are application/problem+json";
  }
  return "";
}

std::string_view to_string(CaseResult result) noexcept {
  switch (result) {
    case CaseResult::Pass: return "pass";
    case CaseResult::Fail: return "fail";
    case CaseResult::NotApplicable: return "n/a";
  }
  return "unknown";
}

std::size_t ProbePlan::request_count() const noexcept {
  std::size_t n = 0;
  for (const auto& c : cases) n += c.requests.size();
  return n;
}

bool ProbeReport::required_cases_passed() const noexcept {
  return std::none_of(cases.begin(), cases.end(), [](const CaseReport& c) {
    return c.required && c.result == CaseResult::Fail;
  });
}

namespace {

[[noreturn]] void refuse(const std::string& why) {
  throw Error(ErrorCode::InvalidArgument, ErrorSource::Config, "http-check: " + why);
}

// Values of one logical request: its key and what its body's placeholders become.
struct LogicalRequest {
  std::string key;
  std::uint64_t unique = 0;
  std::string uuid;
};

class Planner {
 public:
  explicit Planner(const ProbeOptions& options) : options_(options) {
    unique_ = options.unique_base;
    if (unique_ == 0) {
      // Nine digits and a sequence: new on every run (the endpoint may keep its ids
      // forever), and exact as a JSON number in any parser (below 2^53).
      std::random_device seed;
      std::uniform_int_distribution<std::uint64_t> draw(100'000'000, 999'999'999);
      unique_ = draw(seed) * 1000;
    }
    check_options();
  }

  LogicalRequest next_logical() {
    return {new_uuid_v7().to_string(), unique_++, new_uuid_v7().to_string()};
  }

  // The body of `logical` with `amount`; refuses unknown placeholders.
  [[nodiscard]] std::string render(const LogicalRequest& logical, std::string_view amount) const {
    const std::string& tpl = options_.body_template;
    std::string out;
    std::size_t at = 0;
    while (true) {
      const std::size_t open = tpl.find("{{", at);
      if (open == std::string::npos) break;
      const std::size_t close = tpl.find("}}", open + 2);
      if (close == std::string::npos) refuse("the body template has '{{' without '}}'");
      out.append(tpl, at, open - at);
      const std::string_view name = std::string_view(tpl).substr(open + 2, close - open - 2);
      if (name == "amount") {
        out.append(amount);
      } else if (name == "unique") {
        out.append(std::to_string(logical.unique));
      } else if (name == "uuid") {
        out.append(logical.uuid);
      } else {
        refuse(
            fmt::format("unknown placeholder {{{{{}}}}} in the body template (known: "
                        "{{{{amount}}}}, {{{{unique}}}}, {{{{uuid}}}})",
                        name));
      }
      at = close + 2;
    }
    out.append(tpl, at);
    return out;
  }

  // The changed-payload body: the same logical request with another amount.
  [[nodiscard]] std::string render_changed(const LogicalRequest& logical) const {
    if (options_.change_pointer.empty()) {
      if (options_.body_template.find("{{amount}}") == std::string::npos) {
        refuse(
            "the changed-payload case needs {{amount}} in the body template or a "
            "--change-pointer");
      }
      return render(logical, options_.changed_amount);
    }
    auto body = nlohmann::ordered_json::parse(render(logical, options_.amount), nullptr, false);
    if (body.is_discarded()) refuse("--change-pointer needs a JSON body");
    nlohmann::ordered_json::json_pointer pointer;
    try {
      pointer = nlohmann::ordered_json::json_pointer(options_.change_pointer);
    } catch (const nlohmann::json::exception& e) {
      refuse(fmt::format("--change-pointer {}: {}", options_.change_pointer, e.what()));
    }
    if (!body.contains(pointer)) {
      refuse(fmt::format("--change-pointer {} is not in the body", options_.change_pointer));
    }
    auto& field = body[pointer];
    const auto as_number = nlohmann::ordered_json::parse(options_.changed_amount, nullptr, false);
    if (field.is_number() && as_number.is_number()) {
      field = as_number;
    } else {
      field = options_.changed_amount;
    }
    return body.dump();
  }

  // A request of `id` carrying `key_value` in the key header (none when nullopt), with the
  // options' headers, `client` replacing a same-named one, and `extra` last.
  PlannedRequest request(CaseId id, std::string label, const std::optional<std::string>& key_value,
                         std::string body,
                         const std::optional<std::pair<std::string, std::string>>& client = {},
                         const std::optional<std::pair<std::string, std::string>>& extra = {}) {
    PlannedRequest r{.case_id = id,
                     .label = std::move(label),
                     .method = options_.method,
                     .url = options_.url,
                     .headers = {},
                     .body = std::move(body)};
    if (!r.body.empty()) r.headers.emplace_back("Content-Type", options_.content_type);
    for (const auto& h : options_.headers) {
      if (client && equals_ignoring_case(h.first, client->first)) continue;
      r.headers.push_back(h);
    }
    if (client) r.headers.push_back(*client);
    if (key_value) r.headers.emplace_back(options_.key_header, *key_value);
    if (extra) r.headers.push_back(*extra);
    return r;
  }

  [[nodiscard]] std::string key_of(const LogicalRequest& logical) const {
    return format_key(logical.key, options_.key_form);
  }

 private:
  void check_options() const {
    if (options_.url.empty()) refuse("the URL is empty");
    if (options_.method.empty()) refuse("the method is empty");
    if (options_.parallel < 2 || options_.parallel > 64) {
      refuse(fmt::format("--parallel {} is outside 2..64", options_.parallel));
    }
    if (options_.amount == options_.changed_amount) {
      refuse("--amount and --changed-amount are equal: the changed payload would not change");
    }
    if (!options_.id_pointer.empty() && options_.id_pointer.front() != '/') {
      refuse(fmt::format("--id-pointer {} is not a JSON pointer (it starts with /)",
                         options_.id_pointer));
    }
    const auto check = [](const std::pair<std::string, std::string>& h) {
      detail::validate_header_name(h.first);
      detail::validate_header_value(h.first, h.second);
    };
    try {
      detail::validate_header_name(options_.key_header);
      detail::validate_header_value("Content-Type", options_.content_type);
      for (const auto& h : options_.headers) check(h);
      for (const auto* h :
           {&options_.client_a_header, &options_.client_b_header, &options_.trigger_5xx_header}) {
        if (*h) check(**h);
      }
    } catch (const Error& e) {
      refuse(e.what());
    }
  }

  const ProbeOptions& options_;
  std::uint64_t unique_ = 0;
};

}  // namespace

ProbePlan plan_probe(const ProbeOptions& options) {
  Planner planner(options);
  ProbePlan plan;
  const auto add = [&plan](CaseId id, bool required, std::vector<PlannedRequest> requests,
                           std::string not_applicable = {}) {
    plan.cases.push_back({id, required, std::move(requests), std::move(not_applicable)});
  };
  const std::string& amount = options.amount;

  const LogicalRequest first = planner.next_logical();
  const std::string first_body = planner.render(first, amount);
  add(CaseId::FirstRequest, true,
      {planner.request(CaseId::FirstRequest, "first", planner.key_of(first), first_body)});
  add(CaseId::Replay, true,
      {planner.request(CaseId::Replay, "replay", planner.key_of(first), first_body)});
  add(CaseId::ChangedPayload, true,
      {planner.request(CaseId::ChangedPayload, "changed amount", planner.key_of(first),
                       planner.render_changed(first))});

  const LogicalRequest in_flight = planner.next_logical();
  const std::string in_flight_body = planner.render(in_flight, amount);
  add(CaseId::InFlight, true,
      {planner.request(CaseId::InFlight, "first", planner.key_of(in_flight), in_flight_body),
       planner.request(CaseId::InFlight, "second, while the first is in flight",
                       planner.key_of(in_flight), in_flight_body)});

  if (options.key_required) {
    const LogicalRequest no_key = planner.next_logical();
    add(CaseId::MissingKey, true,
        {planner.request(CaseId::MissingKey, "no key", std::nullopt,
                         planner.render(no_key, amount))});
  } else {
    add(CaseId::MissingKey, false, {}, "the API does not require a key (--key-optional)");
  }

  // A control character inside the key, and an sf-string whose closing quote is missing.
  // Neither contains CR or LF: the request itself must stay well-formed HTTP.
  const LogicalRequest control = planner.next_logical();
  const LogicalRequest unterminated = planner.next_logical();
  add(CaseId::MalformedKey, true,
      {planner.request(
           CaseId::MalformedKey, "control character in the key",
           format_key(control.key.substr(0, 8) + '\x01' + control.key.substr(8), options.key_form),
           planner.render(control, amount)),
       planner.request(CaseId::MalformedKey, "unterminated sf-string", '"' + unterminated.key,
                       planner.render(unterminated, amount))});

  const LogicalRequest forms = planner.next_logical();
  const std::string forms_body = planner.render(forms, amount);
  add(CaseId::KeyForms, true,
      {planner.request(CaseId::KeyForms, "sf-string form", format_sf_string(forms.key), forms_body),
       planner.request(CaseId::KeyForms, "bare form", forms.key, forms_body)});

  if (options.trigger_5xx_header) {
    const LogicalRequest failing = planner.next_logical();
    const std::string failing_body = planner.render(failing, amount);
    add(CaseId::ReplayAfter5xx, false,
        {planner.request(CaseId::ReplayAfter5xx, "with the 5xx trigger", planner.key_of(failing),
                         failing_body, std::nullopt, options.trigger_5xx_header),
         planner.request(CaseId::ReplayAfter5xx, "retry without the trigger",
                         planner.key_of(failing), failing_body)});
  } else {
    add(CaseId::ReplayAfter5xx, false, {}, "no way to trigger a 5xx given (--trigger-5xx-header)");
  }

  const LogicalRequest parallel = planner.next_logical();
  const std::string parallel_body = planner.render(parallel, amount);
  std::vector<PlannedRequest> parallel_requests;
  for (std::size_t i = 0; i < options.parallel; ++i) {
    parallel_requests.push_back(planner.request(
        CaseId::Concurrency, fmt::format("parallel {} of {}", i + 1, options.parallel),
        planner.key_of(parallel), parallel_body));
  }
  add(CaseId::Concurrency, true, std::move(parallel_requests));

  if (options.client_a_header && options.client_b_header) {
    const LogicalRequest scoped = planner.next_logical();
    const std::string scoped_body = planner.render(scoped, amount);
    add(CaseId::ClientScoping, true,
        {planner.request(CaseId::ClientScoping, "client A", planner.key_of(scoped), scoped_body,
                         options.client_a_header),
         planner.request(CaseId::ClientScoping, "client B", planner.key_of(scoped), scoped_body,
                         options.client_b_header)});
  } else {
    add(CaseId::ClientScoping, true, {},
        "needs two clients' credentials (--client-a-header, --client-b-header)");
  }

  add(CaseId::ProblemDetails, false, {});
  return plan;
}

}  // namespace idem::http
