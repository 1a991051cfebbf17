#include "idem/reference/payment_provider.hpp"

#include <httplib.h>

#include <atomic>
#include <charconv>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/amount.hpp"
#include "idem/config.hpp"
#include "idem/error.hpp"
#include "idem/http/idempotent_client.hpp"
#include "idem/timestamp.hpp"
#include "idem/uuid.hpp"

namespace idem::http {

namespace {

using json = nlohmann::json;

// Portable between SQLite and PostgreSQL, so `--db` may name either.
constexpr std::string_view kCreateKeys =
    "CREATE TABLE IF NOT EXISTS provider_idempotency_key ("
    " idempotency_key text PRIMARY KEY,"
    " fingerprint text NOT NULL,"           // what the request asked for
    " state text NOT NULL,"                 // 'in_flight' or 'done'
    " response_status bigint,"              // the stored first answer, once done
    " response_body text,"
    " created_at_ms bigint NOT NULL)";
constexpr std::string_view kCreateCharges =
    "CREATE TABLE IF NOT EXISTS provider_charge ("
    " payment_id text PRIMARY KEY,"         // pay_<UUIDv7>: sorts by creation
    " order_id bigint NOT NULL,"
    " amount text NOT NULL,"
    " idempotency_key text NOT NULL,"
    " traceparent text,"
    " created_at_ms bigint NOT NULL)";
constexpr std::string_view kCreateChargesIndex =
    "CREATE INDEX IF NOT EXISTS provider_charge_order_id_idx ON provider_charge (order_id)";

constexpr int kCharged = 200;
constexpr int kDeclined = 402;

std::int64_t to_ms(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

std::string ms_to_rfc3339(std::int64_t ms) {
  return format_rfc3339(Timestamp(std::chrono::milliseconds(ms)));
}

void check_probability(double p, std::string_view name) {
  if (!(p >= 0.0 && p <= 1.0)) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                fmt::format("provider fault {} must be a probability in [0, 1], got {}", name, p));
  }
}

void validate_faults(const ProviderFaults& f) {
  check_probability(f.reset_after_commit, "reset_after_commit");
  check_probability(f.unavailable, "unavailable");
  check_probability(f.decline, "decline");
  if (f.latency.count() < 0) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "provider fault latency must not be negative");
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

void reply_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void reply_error(httplib::Response& res, int status, std::string_view error, std::string_view message) {
  reply_json(res, status, json{{"error", error}, {"message", message}});
}

struct ChargeRequest {
  std::int64_t order_id = 0;
  Amount amount;
  // Canonical form of what was asked: "12.3" and "12.30" are the same request.
  [[nodiscard]] std::string fingerprint() const {
    return fmt::format("order_id={};amount={}", order_id, amount.to_string());
  }
};

// nullopt and a message when the body is not {"order_id": positive int, "amount": "decimal"}.
std::optional<ChargeRequest> parse_charge(const std::string& body, std::string& why) {
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

json charge_to_json(const Charge& c) {
  return json{{"payment_id", c.payment_id},     {"order_id", c.order_id},
              {"amount", c.amount},             {"idempotency_key", c.idempotency_key},
              {"traceparent", c.traceparent},   {"created_at", c.created_at}};
}

}  // namespace

std::chrono::milliseconds parse_duration(std::string_view text) {
  // idem's one duration syntax (idem/config.hpp); this keeps the throwing form.
  if (const auto d = idem::parse_duration(text)) return *d;
  throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
              fmt::format("'{}' is not a duration: expected a non-negative number and a unit "
                          "(ms, s, m, h, d), e.g. 24h",
                          text));
}

struct PaymentProvider::Impl {
  Impl(std::unique_ptr<Store> s, ProviderConfig c)
      : store(std::move(s)), config(std::move(c)), faults(config.faults), rng(config.seed) {}

  void handle_charge(const httplib::Request& req, httplib::Response& res);
  void handle_faults(const httplib::Request& req, httplib::Response& res);
  bool declined(std::int64_t order_id) const;
  bool draw(double p);
  // Runs `fn(tx)` in a committed transaction on the single store connection.
  template <class Fn>
  auto in_transaction(Fn&& fn) const;

  std::unique_ptr<Store> store;
  ProviderConfig config;
  mutable std::mutex db_mutex;  // the store is one connection; requests run on many threads

  mutable std::mutex faults_mutex;
  ProviderFaults faults;
  std::mt19937_64 rng;

  std::atomic<std::int64_t> replays{0};
  std::atomic<std::int64_t> conflicts{0};
  std::atomic<std::int64_t> resets{0};
  std::atomic<std::int64_t> unavailable{0};
  std::atomic<std::int64_t> declines{0};

  httplib::Server server;
  std::thread server_thread;
  std::string url;
};

template <class Fn>
auto PaymentProvider::Impl::in_transaction(Fn&& fn) const {
  std::lock_guard lock(db_mutex);
  auto tx = store->begin();
  if constexpr (std::is_void_v<decltype(fn(*tx))>) {
    fn(*tx);
    tx->commit();
  } else {
    auto result = fn(*tx);
    tx->commit();
    return result;
  }
}

bool PaymentProvider::Impl::draw(double p) {
  if (p <= 0.0) return false;
  std::lock_guard lock(faults_mutex);
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng) < p;
}

bool PaymentProvider::Impl::declined(std::int64_t order_id) const {
  double p = 0.0;
  {
    std::lock_guard lock(faults_mutex);
    p = faults.decline;
  }
  if (p <= 0.0) return false;
  const std::uint64_t h = mix(static_cast<std::uint64_t>(order_id) ^ mix(config.seed));
  return static_cast<double>(h >> 11) * 0x1.0p-53 < p;
}

void PaymentProvider::Impl::handle_charge(const httplib::Request& req, httplib::Response& res) {
  if (!req.has_header("Idempotency-Key")) {
    reply_error(res, 400, "missing_idempotency_key", "Idempotency-Key header is required");
    return;
  }
  const std::string key = req.get_header_value("Idempotency-Key");
  try {
    validate_idempotency_key(key);
  } catch (const Error& e) {
    reply_error(res, 400, "invalid_idempotency_key", e.what());
    return;
  }
  std::string why;
  const auto charge = parse_charge(req.body, why);
  if (!charge) {
    reply_error(res, 400, "invalid_request", why);
    return;
  }
  ProviderFaults now_faults;
  {
    std::lock_guard lock(faults_mutex);
    now_faults = faults;
  }
  if (draw(now_faults.unavailable)) {
    ++unavailable;
    reply_error(res, 503, "unavailable", "injected fault: provider unavailable");
    return;
  }

  // Claim the key, or find out what it already stands for.
  const std::string fingerprint = charge->fingerprint();
  const std::int64_t now_ms = to_ms(config.clock->now());
  const std::int64_t expired_before = now_ms - config.key_retention.count();
  struct Existing {
    bool claimed = false;
    std::string fingerprint, state, body;
    int status = 0;
  };
  const Existing existing = in_transaction([&](Transaction& tx) {
    tx.execute("DELETE FROM provider_idempotency_key WHERE idempotency_key = $1 AND "
               "state = 'done' AND created_at_ms < $2",
               key, expired_before);
    Existing e;
    e.claimed = tx.execute("INSERT INTO provider_idempotency_key"
                           "(idempotency_key, fingerprint, state, created_at_ms) "
                           "VALUES ($1, $2, 'in_flight', $3) ON CONFLICT (idempotency_key) DO NOTHING",
                           key, fingerprint, now_ms)
                    .affected() == 1;
    if (!e.claimed) {
      const Rows rows = tx.execute("SELECT fingerprint, state, response_status, response_body "
                                   "FROM provider_idempotency_key WHERE idempotency_key = $1",
                                   key);
      const RowView row = rows[0];
      e.fingerprint = row.text(0);
      e.state = row.text(1);
      if (!row.is_null(2)) e.status = static_cast<int>(row.int64(2));
      if (!row.is_null(3)) e.body = row.text(3);
    }
    return e;
  });
  if (!existing.claimed) {
    if (existing.fingerprint != fingerprint) {
      ++conflicts;
      reply_error(res, 422, "idempotency_key_reused",
                  "this Idempotency-Key was used for a different request");
    } else if (existing.state != "done") {
      ++conflicts;
      reply_error(res, 409, "request_in_progress",
                  "a request with this Idempotency-Key is still being processed");
    } else {
      ++replays;
      res.status = existing.status;
      res.set_header("Idempotent-Replayed", "true");
      res.set_content(existing.body, "application/json");
    }
    return;
  }

  // The key is ours. If anything below fails before the answer is stored, release it:
  // nothing was charged, and a retry must be able to claim it again.
  bool answered = false;
  struct ReleaseClaim {
    Impl& impl;
    const std::string& key;
    bool& answered;
    ~ReleaseClaim() {
      if (answered) return;
      try {
        impl.in_transaction([&](Transaction& tx) {
          tx.execute("DELETE FROM provider_idempotency_key WHERE idempotency_key = $1 "
                     "AND state = 'in_flight'", key);
        });
      } catch (...) {  // the store is gone: a restart forgets in-flight claims anyway
      }
    }
  } release{*this, key, answered};

  if (config.after_claim) config.after_claim(key);
  if (now_faults.latency.count() > 0) std::this_thread::sleep_for(now_faults.latency);

  const bool decline = declined(charge->order_id);
  int status = kCharged;
  json body;
  if (decline) {
    status = kDeclined;
    body = json{{"error", "card_declined"}, {"order_id", charge->order_id}};
  } else {
    const std::string payment_id = "pay_" + new_uuid_v7().to_string();
    body = json{{"payment_id", payment_id},
                {"order_id", charge->order_id},
                {"amount", charge->amount.to_string()},
                {"status", "charged"}};
  }
  const std::string body_text = body.dump();
  if (decline) {
    // A decline charges nothing, so it is not stored: the claim is released (by
    // ReleaseClaim) and the same key may charge once the customer fixed the cause.
    // That is what replaying a declined event from the DLQ relies on.
    ++declines;
    res.status = status;
    res.set_content(body_text, "application/json");
    return;
  }
  in_transaction([&](Transaction& tx) {
    {
      const std::string traceparent = req.get_header_value("traceparent");
      tx.execute("INSERT INTO provider_charge(payment_id, order_id, amount, idempotency_key, "
                 "traceparent, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6)",
                 body["payment_id"].get<std::string>(), charge->order_id,
                 charge->amount.to_string(), key,
                 traceparent.empty() ? Param(nullptr) : Param(traceparent),
                 to_ms(config.clock->now()));
    }
    tx.execute("UPDATE provider_idempotency_key SET state = 'done', response_status = $2, "
               "response_body = $3 WHERE idempotency_key = $1",
               key, status, body_text);
  });
  answered = true;

  if (draw(now_faults.reset_after_commit)) {
    // Committed, and now the answer breaks off: the status line and headers go out,
    // then the connection closes before the promised body. cpp-httplib offers no way
    // to close a socket without writing a response; a content provider that fails
    // makes it close the connection, which the client sees as a transport error.
    ++resets;
    res.status = status;
    res.set_content_provider(
        body_text.size(), "application/json",
        [](std::size_t, std::size_t, httplib::DataSink&) { return false; });
    return;
  }
  res.status = status;
  res.set_content(body_text, "application/json");
}

void PaymentProvider::Impl::handle_faults(const httplib::Request& req, httplib::Response& res) {
  const json doc = json::parse(req.body, nullptr, false);
  if (!doc.is_object()) {
    reply_error(res, 400, "invalid_request", "the body must be a JSON object");
    return;
  }
  ProviderFaults next;
  {
    std::lock_guard lock(faults_mutex);
    next = faults;
  }
  for (const auto& [name, value] : doc.items()) {
    const bool number = value.is_number();
    if (name == "reset_after_commit" && number) next.reset_after_commit = value.get<double>();
    else if (name == "unavailable" && number) next.unavailable = value.get<double>();
    else if (name == "decline" && number) next.decline = value.get<double>();
    else if (name == "latency_ms" && value.is_number_integer())
      next.latency = std::chrono::milliseconds(value.get<std::int64_t>());
    else {
      reply_error(res, 400, "invalid_request",
                  fmt::format("unknown fault or wrong type: '{}' (expected reset_after_commit, "
                              "unavailable, decline: numbers; latency_ms: integer)",
                              name));
      return;
    }
  }
  try {
    validate_faults(next);
  } catch (const Error& e) {
    reply_error(res, 400, "invalid_request", e.what());
    return;
  }
  {
    std::lock_guard lock(faults_mutex);
    faults = next;
  }
  reply_json(res, 200,
             json{{"reset_after_commit", next.reset_after_commit},
                  {"unavailable", next.unavailable},
                  {"latency_ms", next.latency.count()},
                  {"decline", next.decline}});
}

PaymentProvider::PaymentProvider(std::unique_ptr<Store> store, ProviderConfig config) {
  if (!store) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config, "payment provider: no store");
  }
  if (config.key_retention.count() <= 0) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "payment provider: key_retention must be positive");
  }
  if (config.clock == nullptr) config.clock = &SystemClock::instance();
  validate_faults(config.faults);
  impl_ = std::make_unique<Impl>(std::move(store), std::move(config));
  impl_->in_transaction([](Transaction& tx) {
    tx.execute(kCreateKeys);
    tx.execute(kCreateCharges);
    tx.execute(kCreateChargesIndex);
    tx.execute("DELETE FROM provider_idempotency_key WHERE state = 'in_flight'");
  });

  Impl& impl = *impl_;
  impl.server.Post("/payments/charge", [&impl](const httplib::Request& req, httplib::Response& res) {
    impl.handle_charge(req, res);
  });
  impl.server.Get("/payments/summary", [this](const httplib::Request&, httplib::Response& res) {
    const ProviderSummary s = summary();
    reply_json(res, 200,
               json{{"charges", s.charges},
                    {"orders", s.orders},
                    {"orders_charged_more_than_once", s.orders_charged_more_than_once},
                    {"replays", s.replays},
                    {"conflicts", s.conflicts},
                    {"resets_after_commit", s.resets_after_commit},
                    {"unavailable", s.unavailable},
                    {"declined", s.declined}});
  });
  impl.server.Get("/payments", [this](const httplib::Request& req, httplib::Response& res) {
    std::optional<std::int64_t> order_id;
    if (req.has_param("order_id")) {
      const std::string text = req.get_param_value("order_id");
      std::int64_t id = 0;
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
      if (ec != std::errc() || ptr != text.data() + text.size()) {
        reply_error(res, 400, "invalid_request", fmt::format("order_id '{}' is not an integer", text));
        return;
      }
      order_id = id;
    }
    json list = json::array();
    for (const Charge& c : charges(order_id)) list.push_back(charge_to_json(c));
    reply_json(res, 200, list);
  });
  impl.server.Post("/admin/faults", [&impl](const httplib::Request& req, httplib::Response& res) {
    impl.handle_faults(req, res);
  });
  impl.server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  // Idle keep-alive connections hold a server thread each and delay stop() by up to
  // this long; clients reconnect (and retry, with the same key) if one was closed.
  impl.server.set_keep_alive_timeout(1);
  // An answer leaves in two writes (headers, body); without TCP_NODELAY the second
  // waits for the client's delayed ACK, about 40 ms per charge on keep-alive.
  impl.server.set_tcp_nodelay(true);
  impl.server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        reply_error(res, 500, "internal_error", what);
      });
}

PaymentProvider::~PaymentProvider() { stop(); }

int PaymentProvider::start(const std::string& host, int port) {
  if (impl_->server_thread.joinable()) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Http, "payment provider: already started");
  }
  const int bound = port == 0 ? impl_->server.bind_to_any_port(host)
                              : (impl_->server.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    throw Error(ErrorCode::Connection, ErrorSource::Http,
                fmt::format("payment provider: cannot listen on {}:{}", host, port));
  }
  impl_->url = fmt::format("http://{}:{}", host, bound);
  impl_->server_thread = std::thread([this] { impl_->server.listen_after_bind(); });
  // cpp-httplib 0.11 ignores a stop() that comes before its accept loop runs, and has no
  // readiness callback: wait for is_running() so that a stop() right after start() holds.
  // Connections are accepted (queued by the kernel) already, so nobody waits on this.
  while (!impl_->server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return bound;
}

void PaymentProvider::stop() {
  if (!impl_ || !impl_->server_thread.joinable()) return;
  impl_->server.stop();
  impl_->server_thread.join();
}

std::string PaymentProvider::base_url() const { return impl_->url; }

void PaymentProvider::set_faults(const ProviderFaults& faults) {
  validate_faults(faults);
  std::lock_guard lock(impl_->faults_mutex);
  impl_->faults = faults;
}

ProviderFaults PaymentProvider::faults() const {
  std::lock_guard lock(impl_->faults_mutex);
  return impl_->faults;
}

ProviderSummary PaymentProvider::summary() const {
  ProviderSummary s = impl_->in_transaction([](Transaction& tx) {
    ProviderSummary r;
    const Rows totals =
        tx.execute("SELECT count(*), count(DISTINCT order_id) FROM provider_charge");
    r.charges = totals[0].int64(0);
    r.orders = totals[0].int64(1);
    for (const RowView row : tx.execute("SELECT order_id FROM provider_charge GROUP BY order_id "
                                        "HAVING count(*) > 1 ORDER BY order_id")) {
      r.orders_charged_more_than_once.push_back(row.int64(0));
    }
    return r;
  });
  s.replays = impl_->replays.load();
  s.conflicts = impl_->conflicts.load();
  s.resets_after_commit = impl_->resets.load();
  s.unavailable = impl_->unavailable.load();
  s.declined = impl_->declines.load();
  return s;
}

std::vector<Charge> PaymentProvider::charges(std::optional<std::int64_t> order_id) const {
  return impl_->in_transaction([&](Transaction& tx) {
    constexpr std::string_view columns =
        "SELECT payment_id, order_id, amount, idempotency_key, traceparent, created_at_ms "
        "FROM provider_charge ";
    const Rows rows =
        order_id ? tx.execute(std::string(columns) + "WHERE order_id = $1 ORDER BY payment_id",
                              *order_id)
                 : tx.execute(std::string(columns) + "ORDER BY payment_id");
    std::vector<Charge> out;
    out.reserve(rows.size());
    for (const RowView row : rows) {
      out.push_back(Charge{.payment_id = std::string(row.text(0)),
                           .order_id = row.int64(1),
                           .amount = std::string(row.text(2)),
                           .idempotency_key = std::string(row.text(3)),
                           .traceparent = row.is_null(4) ? std::string() : std::string(row.text(4)),
                           .created_at = ms_to_rfc3339(row.int64(5))});
    }
    return out;
  });
}

}  // namespace idem::http
