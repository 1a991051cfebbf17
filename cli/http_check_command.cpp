// `idem http-check URL`: the conformance probe of an endpoint that claims to honour
// `Idempotency-Key` (idem/http/conformance_probe.hpp, docs/http-check.md). Flags only, on
// purpose: it is a one-off check of an outside API, run by hand or by a CI job, not a
// service with a configuration; a probe setting left in a file or the environment would
// silently change what the next check sends.
//
// Exit codes: 0 every required case passed (n/a does not fail), 1 a required case failed,
// 2 nothing was sent (bad options, a plan over --max-requests, an unusable URL).
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "idem/config.hpp"
#include "idem/error.hpp"
#include "idem/http/conformance_probe.hpp"

namespace idem::cli {

namespace {

constexpr int kExitConforms = 0;
constexpr int kExitRequiredCaseFailed = 1;
constexpr int kExitNotRun = 2;

struct Options {
  std::string url;
  std::string method = "POST";
  std::vector<std::string> headers;
  std::string body;
  std::string body_file;
  std::string content_type = "application/json";
  std::string amount = "10.00";
  std::string changed_amount = "11.00";
  std::string change_pointer;
  std::string id_pointer;
  std::string id_header;
  std::string key_header = "Idempotency-Key";
  std::string key_form = "sf-string";
  bool key_required = true;
  std::size_t parallel = 8;
  std::string client_a_header;
  std::string client_b_header;
  std::string trigger_5xx_header;
  std::size_t max_requests = 40;
  std::string timeout = "30s";
  bool dry_run = false;
  bool json = false;
  bool verbose = false;
};

[[noreturn]] void refuse(const std::string& why) {
  throw Error(ErrorCode::InvalidArgument, ErrorSource::Config, why);
}

// "Name: value" as given to -H (curl's syntax).
std::pair<std::string, std::string> parse_header(const std::string& flag, const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos || colon == 0) {
    refuse(fmt::format("{} '{}': expected 'Name: value'", flag, text));
  }
  std::string value = text.substr(colon + 1);
  value.erase(0, value.find_first_not_of(" \t"));
  return {text.substr(0, colon), value};
}

std::optional<std::pair<std::string, std::string>> optional_header(const std::string& flag,
                                                                   const std::string& text) {
  if (text.empty()) return std::nullopt;
  return parse_header(flag, text);
}

http::ProbeOptions to_probe_options(const Options& o) {
  http::ProbeOptions p;
  p.url = o.url;
  p.method = o.method;
  for (const auto& h : o.headers) p.headers.push_back(parse_header("--header", h));
  if (!o.body.empty() && !o.body_file.empty()) refuse("give --body or --body-file, not both");
  if (!o.body.empty()) p.body_template = o.body;
  if (!o.body_file.empty()) {
    std::ifstream in(o.body_file, std::ios::binary);
    if (!in) refuse(fmt::format("--body-file {}: cannot be read", o.body_file));
    p.body_template.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  p.content_type = o.content_type;
  p.amount = o.amount;
  p.changed_amount = o.changed_amount;
  p.change_pointer = o.change_pointer;
  p.id_pointer = o.id_pointer;
  p.id_header = o.id_header;
  p.key_header = o.key_header;
  p.key_form = o.key_form == "bare" ? http::KeyForm::Bare : http::KeyForm::SfString;
  p.key_required = o.key_required;
  p.parallel = o.parallel;
  p.client_a_header = optional_header("--client-a-header", o.client_a_header);
  p.client_b_header = optional_header("--client-b-header", o.client_b_header);
  if (p.client_a_header.has_value() != p.client_b_header.has_value()) {
    refuse("client scoping needs both --client-a-header and --client-b-header");
  }
  p.trigger_5xx_header = optional_header("--trigger-5xx-header", o.trigger_5xx_header);
  p.max_requests = o.max_requests;
  const auto timeout = parse_duration(o.timeout);
  if (!timeout || timeout->count() == 0) {
    refuse(fmt::format("--timeout '{}': expected a duration such as 30s", o.timeout));
  }
  p.timeout = *timeout;
  if (o.verbose) {
    p.on_send = [](const http::PlannedRequest& r) {
      std::cerr << fmt::format("http-check: sending {} [{}]\n", to_string(r.case_id), r.label);
    };
  }
  return p;
}

int run(const Options& o) {
  http::ProbeOptions probe;
  http::ProbePlan plan;
  try {
    probe = to_probe_options(o);
    plan = http::plan_probe(probe);
    if (o.dry_run) {
      std::cout << (o.json ? http::plan_to_json(plan, probe) : http::format_plan(plan, probe))
                << std::flush;
      return kExitConforms;
    }
  } catch (const Error& e) {
    std::cerr << "idem http-check: " << e.what() << "\n";
    return kExitNotRun;
  }
  http::ProbeReport report;
  try {
    report = http::run_probe(probe, plan);
  } catch (const Error& e) {
    std::cerr << "idem http-check: " << e.what() << "\n";
    return kExitNotRun;
  }
  std::cout << (o.json ? http::report_to_json(report) : http::format_report(report)) << std::flush;
  return report.required_cases_passed() ? kExitConforms : kExitRequiredCaseFailed;
}

}  // namespace

void register_http_check(CLI::App& app, ExitCode& exit_code) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "http-check",
      "Probe an endpoint that claims Idempotency-Key support (a sandbox: it creates resources)");
  cmd->add_option("url", o->url, "The endpoint, e.g. https://sandbox.example/v1/payments")
      ->required();
  cmd->add_option("-X,--method", o->method, "Method of every request")->capture_default_str();
  cmd->add_option("-H,--header", o->headers, "'Name: value' sent with every request (e.g. auth)");
  cmd->add_option("--body", o->body,
                  "Body template; placeholders {{amount}}, {{unique}} (a new number per "
                  "logical request), {{uuid}} (default: "
                  "{\"order_id\": {{unique}}, \"amount\": \"{{amount}}\"})");
  cmd->add_option("--body-file", o->body_file, "Read the body template from a file");
  cmd->add_option("--content-type", o->content_type, "Of the body")->capture_default_str();
  cmd->add_option("--amount", o->amount, "{{amount}} of every request")->capture_default_str();
  cmd->add_option("--changed-amount", o->changed_amount,
                  "The amount of the changed-payload request (expected 422)")
      ->capture_default_str();
  cmd->add_option("--change-pointer", o->change_pointer,
                  "JSON pointer of the field the changed-payload request changes (default: "
                  "{{amount}} of the template)");
  cmd->add_option("--id-pointer", o->id_pointer,
                  "JSON pointer of the resource id in a 2xx body, e.g. /payment_id");
  cmd->add_option("--id-header", o->id_header, "Header carrying the resource id, e.g. Location");
  cmd->add_option("--key-header", o->key_header, "The key's header name")->capture_default_str();
  cmd->add_option("--key-form", o->key_form, "How keys are written: sf-string (\"k\") or bare")
      ->check(CLI::IsMember({"sf-string", "bare"}))
      ->capture_default_str();
  cmd->add_flag("--key-required,!--key-optional", o->key_required,
                "Whether the API requires a key (a request without one must get 400); "
                "default: required");
  cmd->add_option("--parallel", o->parallel, "Requests of the concurrency case (2..64)")
      ->capture_default_str();
  cmd->add_option("--client-a-header", o->client_a_header,
                  "'Name: value' of client A (client scoping; with --client-b-header)");
  cmd->add_option("--client-b-header", o->client_b_header, "'Name: value' of client B");
  cmd->add_option("--trigger-5xx-header", o->trigger_5xx_header,
                  "'Name: value' that makes the endpoint answer 5xx (replay after a 5xx)");
  cmd->add_option("--max-requests", o->max_requests, "Refuse to run a plan needing more requests")
      ->capture_default_str();
  cmd->add_option("--timeout", o->timeout, "Per request, e.g. 30s")->capture_default_str();
  cmd->add_flag("--dry-run", o->dry_run, "List the requests a run would send; send nothing");
  cmd->add_flag("--json", o->json, "JSON instead of a table");
  cmd->add_flag("-v,--verbose", o->verbose, "Name each request on stderr as it is sent");
  cmd->callback([o, &exit_code] { exit_code.value = run(*o); });
}

}  // namespace idem::cli
