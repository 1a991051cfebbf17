// What a conformance probe shows: the plan (a dry run) and the report, as text for a
// person and as JSON for a script.
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "http/conformance_cases.hpp"
#include "idem/http/conformance_probe.hpp"

namespace idem::http {

namespace {

using nlohmann::ordered_json;

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Credentials are not printed: a dry run's listing or a report is often pasted into a
// ticket. The idempotency key is shown, since it is the point of the listing.
bool is_secret(std::string_view name, const ProbeOptions& options) {
  const std::string n = lower(name);
  if (n == lower(options.key_header)) return false;
  return n == "authorization" || n == "proxy-authorization" || n == "cookie" ||
         n.find("key") != std::string::npos || n.find("token") != std::string::npos ||
         n.find("secret") != std::string::npos;
}

// Control characters as \xNN, so the malformed key shows what is sent.
std::string escaped(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out;
}

std::string shown_value(const std::pair<std::string, std::string>& header,
                        const ProbeOptions& options) {
  return is_secret(header.first, options) ? std::string("<redacted>") : escaped(header.second);
}

std::string requirement(const CaseReport& c) {
  return c.required ? "yes" : "no";
}

}  // namespace

std::string format_report(const ProbeReport& report) {
  std::size_t width = 4;
  for (const auto& c : report.cases) width = std::max(width, to_string(c.id).size());
  std::string out = fmt::format("idem http-check {}\n\n", report.url);
  out += fmt::format("{:<{}}  required  result  observed\n", "case", width);
  for (const auto& c : report.cases) {
    out += fmt::format("{:<{}}  {:<8}  {:<6}  {}\n", to_string(c.id), width, requirement(c),
                       to_string(c.result), escaped(c.reason));
  }
  out += "\n";
  if (report.created.empty()) {
    out += "resources created: none\n";
  } else {
    out += fmt::format("resources created ({}), to clean up:\n", report.created.size());
    for (const auto& r : report.created) {
      out +=
          fmt::format("  {}  ({}, {})\n",
                      report.resources_identified ? escaped(r.id) : "answer body " + escaped(r.id),
                      to_string(r.case_id), r.label);
    }
    if (!report.resources_identified) {
      out += "  (no --id-pointer or --id-header: resources are told apart by their bodies)\n";
    }
  }
  std::size_t passed = 0;
  std::size_t failed = 0;
  std::size_t not_applicable = 0;
  for (const auto& c : report.cases) {
    if (!c.required) continue;
    if (c.result == CaseResult::Pass) ++passed;
    if (c.result == CaseResult::Fail) ++failed;
    if (c.result == CaseResult::NotApplicable) ++not_applicable;
  }
  out += fmt::format("\n{} requests sent; required cases: {} passed, {} failed, {} n/a: {}\n",
                     report.requests_sent, passed, failed, not_applicable,
                     report.required_cases_passed() ? "CONFORMS" : "DOES NOT CONFORM");
  return out;
}

std::string report_to_json(const ProbeReport& report) {
  ordered_json out;
  out["url"] = report.url;
  out["conforms"] = report.required_cases_passed();
  out["requests_sent"] = report.requests_sent;
  ordered_json cases = ordered_json::array();
  for (const auto& c : report.cases) {
    ordered_json answers = ordered_json::array();
    for (const auto& a : c.answers) {
      ordered_json answer{{"label", a.label}, {"status", a.status}};
      if (!a.error.empty()) answer["error"] = a.error;
      if (!a.resource_id.empty()) answer["resource_id"] = a.resource_id;
      answer["summary"] = detail::summarize(a);
      answers.push_back(std::move(answer));
    }
    cases.push_back({{"case", std::string(to_string(c.id))},
                     {"required", c.required},
                     {"result", std::string(to_string(c.result))},
                     {"reason", c.reason},
                     {"answers", std::move(answers)}});
  }
  out["cases"] = std::move(cases);
  ordered_json created = ordered_json::array();
  for (const auto& r : report.created) {
    created.push_back({{report.resources_identified ? "id" : "body", r.id},
                       {"case", std::string(to_string(r.case_id))},
                       {"request", r.label}});
  }
  out["resources_created"] = std::move(created);
  // Invalid UTF-8 from a server's body is replaced rather than failing the whole report.
  return out.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

std::string format_plan(const ProbePlan& plan, const ProbeOptions& options) {
  std::string out = fmt::format(
      "idem http-check: dry run, {} requests (--max-requests {}); nothing is sent.\n"
      "Keys and {{{{unique}}}} values are drawn again on a real run.\n",
      plan.request_count(), options.max_requests);
  if (plan.request_count() > options.max_requests) {
    out += "A real run would refuse this plan: it needs more requests than --max-requests.\n";
  }
  for (const auto& c : plan.cases) {
    out += fmt::format("\n{} ({}): {}\n", to_string(c.id), c.required ? "required" : "not required",
                       describe(c.id));
    if (!c.not_applicable.empty()) out += fmt::format("  n/a: {}\n", c.not_applicable);
    for (const auto& r : c.requests) {
      out += fmt::format("  [{}] {} {}\n", r.label, r.method, r.url);
      for (const auto& h : r.headers) {
        out += fmt::format("      {}: {}\n", h.first, shown_value(h, options));
      }
      if (!r.body.empty()) out += fmt::format("      {}\n", escaped(r.body));
    }
  }
  return out;
}

std::string plan_to_json(const ProbePlan& plan, const ProbeOptions& options) {
  ordered_json cases = ordered_json::array();
  for (const auto& c : plan.cases) {
    ordered_json requests = ordered_json::array();
    for (const auto& r : c.requests) {
      ordered_json headers = ordered_json::array();
      for (const auto& h : r.headers) {
        // A malformed key's control character stays as it is sent (JSON escapes it).
        headers.push_back({h.first, is_secret(h.first, options) ? "<redacted>" : h.second});
      }
      requests.push_back({{"label", r.label},
                          {"method", r.method},
                          {"url", r.url},
                          {"headers", std::move(headers)},
                          {"body", r.body}});
    }
    ordered_json entry{{"case", std::string(to_string(c.id))}, {"required", c.required}};
    if (!c.not_applicable.empty()) entry["not_applicable"] = c.not_applicable;
    entry["requests"] = std::move(requests);
    cases.push_back(std::move(entry));
  }
  ordered_json out{{"dry_run", true},
                   {"requests", plan.request_count()},
                   {"max_requests", options.max_requests},
                   {"cases", std::move(cases)}};
  return out.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace idem::http
