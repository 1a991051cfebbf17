#include "support/nonconforming_servers.hpp"

#include <sys/socket.h>

#include <chrono>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/loopback_http.hpp"

namespace idem::test {

std::optional<std::string> parse_key_field(std::string_view value) {
  if (value.empty()) return std::nullopt;
  std::string key;
  if (value.front() != '"') {
    for (const char c : value) {
      if (c <= 0x20 || c >= 0x7f || c == '"' || c == '\\') return std::nullopt;
    }
    return std::string(value);
  }
  if (value.size() < 2 || value.back() != '"') return std::nullopt;
  const std::string_view inner = value.substr(1, value.size() - 2);
  for (std::size_t i = 0; i < inner.size(); ++i) {
    const char c = inner[i];
    if (c < 0x20 || c >= 0x7f) return std::nullopt;
    if (c == '"') return std::nullopt;
    if (c == '\\') {
      if (i + 1 == inner.size() || (inner[i + 1] != '"' && inner[i + 1] != '\\')) {
        return std::nullopt;
      }
      ++i;
      key.push_back(inner[i]);
      continue;
    }
    key.push_back(c);
  }
  if (key.empty()) return std::nullopt;
  return key;
}

namespace {

void problem(httplib::Response& res, int status, std::string_view type, std::string_view title) {
  res.status = status;
  res.set_content(nlohmann::json{{"type", fmt::format("urn:test:problem:{}", type)},
                                 {"title", std::string(title)}}
                      .dump(),
                  "application/problem+json");
}

}  // namespace

PaymentEndpoint::PaymentEndpoint(EndpointBehaviour behaviour) : behaviour_(behaviour) {
  server_.Post("/payments",
               [this](const httplib::Request& req, httplib::Response& res) { serve(req, res); });
  server_.set_tcp_nodelay(true);
  // Enough threads for the probe's parallel case and a held request together.
  port_ = start_on_loopback(server_, thread_,
                            []() -> httplib::TaskQueue* { return new httplib::ThreadPool(80); });
}

PaymentEndpoint::~PaymentEndpoint() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  server_.stop();
  thread_.join();
}

std::string PaymentEndpoint::url() const {
  return fmt::format("http://127.0.0.1:{}/payments", port_);
}

void PaymentEndpoint::hold_until_duplicate_arrives(const std::string& key_header_value) {
  std::lock_guard lock(mutex_);
  held_.insert(key_header_value);
}

std::size_t PaymentEndpoint::payments_created() const {
  std::lock_guard lock(mutex_);
  return created_;
}

void PaymentEndpoint::create(const std::string& body, httplib::Response& res) {
  // Called with mutex_ held.
  ++created_;
  res.status = 201;
  nlohmann::json request = nlohmann::json::parse(body, nullptr, false);
  if (request.is_discarded()) request = body;
  res.set_content(
      nlohmann::json{{"payment_id", fmt::format("pay_{}", created_)}, {"request", request}}.dump(),
      "application/json");
}

void PaymentEndpoint::serve(const httplib::Request& req, httplib::Response& res) {
  if (req.get_header_value("X-Fail") == "503") {
    return problem(res, 503, "unavailable", "the sandbox's failure switch is on");
  }
  std::unique_lock lock(mutex_);
  if (!req.has_header("Idempotency-Key")) {
    return problem(res, 400, "idempotency-key-missing", "Idempotency-Key is required");
  }
  const std::string raw = req.get_header_value("Idempotency-Key");
  const auto key = parse_key_field(raw);
  if (!key) return problem(res, 400, "idempotency-key-malformed", "Idempotency-Key is malformed");
  if (!behaviour_.deduplicates) return create(req.body, res);

  const std::string client =
      behaviour_.scopes_keys_by_client ? req.get_header_value("Authorization") : std::string();
  const auto scoped = std::make_pair(client, *key);
  if (auto found = keys_.find(scoped); found != keys_.end()) {
    duplicate_arrived_.insert(raw);
    changed_.notify_all();
    const StoredAnswer& stored = found->second;
    if (behaviour_.compares_payload && stored.body_fingerprint != req.body) {
      return problem(res, 422, "idempotency-key-reused", "this key was used with another request");
    }
    if (stored.in_flight && !behaviour_.queues_requests_in_flight) {
      return problem(res, 409, "idempotency-key-in-flight",
                     "a request with this key is being processed");
    }
    changed_.wait(lock, [&] { return stopping_ || !keys_.at(scoped).in_flight; });
    res.status = stored.status;
    res.set_header("Idempotent-Replayed", "true");
    res.set_content(stored.body, "application/json");
    return;
  }
  keys_[scoped] = StoredAnswer{.in_flight = true, .body_fingerprint = req.body};
  if (held_.contains(raw)) {
    held_.erase(raw);
    changed_.wait_for(lock, std::chrono::minutes(1),
                      [&] { return stopping_ || duplicate_arrived_.contains(raw); });
  }
  create(req.body, res);
  StoredAnswer& stored = keys_[scoped];
  stored.in_flight = false;
  stored.status = res.status;
  stored.body = res.body;
  changed_.notify_all();
}

}  // namespace idem::test
