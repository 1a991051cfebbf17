#include "support/provider_process.hpp"

#include <signal.h>

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "idem/store.hpp"

namespace idem::test {

namespace {
std::vector<std::string> provider_args(const std::string& db_url,
                                       const std::vector<std::string>& extra_args,
                                       const std::string& listen) {
  std::vector<std::string> args{"provider", "--db", db_url, "--listen", listen};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  return args;
}
}  // namespace

ProviderProcess::ProviderProcess(const std::string& cli_path, const std::string& db_url,
                                 const std::vector<std::string>& extra_args,
                                 const std::string& listen)
    : process_(ChildProcess::spawn(cli_path, provider_args(db_url, extra_args, listen))) {
  const auto line = process_.read_line(std::chrono::seconds(30));
  constexpr std::string_view prefix = "listening ";
  if (!line || line->rfind(prefix, 0) != 0) {
    throw std::runtime_error("idem provider did not report 'listening ...', got: " +
                             line.value_or("<nothing>"));
  }
  url_ = line->substr(prefix.size());
}

int ProviderProcess::stop() {
  process_.kill(SIGTERM);
  return process_.wait(std::chrono::seconds(30));
}

void ProviderProcess::crash() {
  process_.kill(SIGKILL);
  (void)process_.wait(std::chrono::seconds(30));
}

namespace {
JsonAnswer to_answer(const httplib::Result& r) {
  JsonAnswer a;
  if (!r) return a;
  a.status = r->status;
  for (const auto& [name, value] : r->headers) a.headers.emplace_back(name, value);
  a.body = nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (a.body.is_discarded()) a.body = nullptr;
  return a;
}
}  // namespace

std::string JsonAnswer::header(std::string_view name) const {
  const auto same = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) ==
                    std::tolower(static_cast<unsigned char>(y));
           });
  };
  for (const auto& [n, value] : headers) {
    if (same(n, name)) return value;
  }
  return {};
}

JsonAnswer http_get(const std::string& base_url, const std::string& path) {
  httplib::Client client(base_url);
  return to_answer(client.Get(path));
}

JsonAnswer http_post(const std::string& base_url, const std::string& path, const std::string& body,
                     const std::vector<std::pair<std::string, std::string>>& headers) {
  httplib::Client client(base_url);
  httplib::Headers h;
  for (const auto& [name, value] : headers) h.emplace(name, value);
  return to_answer(client.Post(path, h, body, "application/json"));
}

std::vector<ProviderCharge> provider_charges(const std::string& provider_db_url) {
  auto store = open_store(provider_db_url);
  auto tx = store->begin_read();
  const Rows rows = tx->execute(
      "SELECT c.payment_id, c.order_id, c.idempotency_key, k.created_at_ms, c.created_at_ms "
      "FROM provider_charge c JOIN provider_idempotency_key k "
      "ON k.idempotency_key = c.idempotency_key AND k.client_id = c.client_id "
      "AND k.request_method = 'POST' AND k.request_path = '/payments/charge' "
      "ORDER BY c.payment_id");
  std::vector<ProviderCharge> out;
  for (const RowView row : rows)
    out.push_back({std::string(row.text(0)), row.int64(1), std::string(row.text(2)), row.int64(3),
                   row.int64(4)});
  tx->commit();
  return out;
}

}  // namespace idem::test
