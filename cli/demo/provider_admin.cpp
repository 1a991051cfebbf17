#include "demo/provider_admin.hpp"

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

#include <fmt/format.h>

namespace idem::cli::demo {

namespace {

httplib::Client client(const std::string& base_url) {
  httplib::Client c(base_url);
  c.set_connection_timeout(5, 0);
  c.set_read_timeout(10, 0);
  return c;
}

}  // namespace

void set_provider_faults(const std::string& base_url, const ProviderFaults& f) {
  const nlohmann::json body = {{"reset_after_commit", f.reset_after_commit},
                               {"unavailable", f.unavailable},
                               {"latency_ms", f.latency_ms},
                               {"decline", f.decline}};
  auto c = client(base_url);
  const auto res = c.Post("/admin/faults", body.dump(), "application/json");
  if (!res || res->status / 100 != 2) {
    throw std::runtime_error(fmt::format(
        "POST {}/admin/faults: {}", base_url,
        res ? fmt::format("HTTP {} {}", res->status, res->body) : httplib::to_string(res.error())));
  }
}

ProviderSummary provider_summary(const std::string& base_url) {
  auto c = client(base_url);
  const auto res = c.Get("/payments/summary");
  if (!res || res->status != 200) {
    throw std::runtime_error(fmt::format(
        "GET {}/payments/summary: {}", base_url,
        res ? fmt::format("HTTP {} {}", res->status, res->body) : httplib::to_string(res.error())));
  }
  const auto j = nlohmann::json::parse(res->body);
  ProviderSummary s;
  s.charges = j.at("charges").get<std::int64_t>();
  s.orders = j.at("orders").get<std::int64_t>();
  s.orders_charged_more_than_once =
      j.at("orders_charged_more_than_once").get<std::vector<std::int64_t>>();
  s.replays = j.value("replays", std::int64_t{0});
  s.conflicts = j.value("conflicts", std::int64_t{0});
  s.resets_after_commit = j.value("resets_after_commit", std::int64_t{0});
  s.unavailable = j.value("unavailable", std::int64_t{0});
  s.declined = j.value("declined", std::int64_t{0});
  return s;
}

}  // namespace idem::cli::demo
