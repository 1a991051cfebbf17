// The payment provider: requests arrive on one event loop (payment_provider_server),
// keys and charges are written by group commit on one store thread
// (payment_provider_ledger), and a request's life between the two is here. A request
// waiting for its latency or its commit is a timer or a queued job, not a thread, so
// thousands wait at once on two threads.
#include "idem/reference/payment_provider.hpp"

#include <atomic>
#include <charconv>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_set>

#include <fmt/format.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <nlohmann/json.hpp>

#include "idem/error.hpp"
#include "idem/http/idempotent_client.hpp"
#include "idem/timestamp.hpp"
#include "reference/payment_provider_ledger.hpp"
#include "reference/payment_provider_rules.hpp"
#include "reference/payment_provider_server.hpp"

namespace idem::http {

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;
using detail::HttpRequest;
using detail::HttpResponse;
using detail::LedgerAnswer;
using detail::LedgerOutcome;
using detail::Reply;

namespace {

// Boost 1.74's Beast takes boost::string_view (std::string_view only with a macro that
// would have to be set for every user of Beast in a program alike).
boost::beast::string_view beast_view(std::string_view s) {
  return {s.data(), s.size()};
}

HttpResponse response(int status, std::string body,
                      std::string_view content_type = "application/json") {
  HttpResponse res{static_cast<beast_http::status>(status), 11};
  res.set(beast_http::field::content_type, beast_view(content_type));
  res.body() = std::move(body);
  return res;
}

HttpResponse error_response(int status, std::string_view error, std::string_view message) {
  return response(status, detail::error_body(error, message));
}

std::string header(const HttpRequest& req, std::string_view name) {
  const auto it = req.find(beast_view(name));
  return it == req.end() ? std::string() : std::string(it->value());
}

// The value of `name` in a query string "a=1&b=2" (no percent-decoding: the provider's
// only parameter is an integer); nullopt when absent.
std::optional<std::string_view> query_param(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const auto eq = pair.find('=');
    if (pair.substr(0, eq) == name) return eq == std::string_view::npos ? "" : pair.substr(eq + 1);
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

std::string ms_to_rfc3339(std::int64_t ms) {
  return format_rfc3339(Timestamp(std::chrono::milliseconds(ms)));
}

ProviderSummary read_summary(Transaction& tx) {
  ProviderSummary r;
  const Rows totals = tx.execute("SELECT count(*), count(DISTINCT order_id) FROM provider_charge");
  r.charges = totals[0].int64(0);
  r.orders = totals[0].int64(1);
  for (const RowView row : tx.execute("SELECT order_id FROM provider_charge GROUP BY order_id "
                                      "HAVING count(*) > 1 ORDER BY order_id")) {
    r.orders_charged_more_than_once.push_back(row.int64(0));
  }
  return r;
}

std::vector<Charge> read_charges(Transaction& tx, std::optional<std::int64_t> order_id) {
  constexpr std::string_view kColumns =
      "SELECT payment_id, order_id, amount, idempotency_key, traceparent, created_at_ms "
      "FROM provider_charge ";
  const Rows rows =
      order_id
          ? tx.execute(std::string(kColumns) + "WHERE order_id = $1 ORDER BY payment_id", *order_id)
          : tx.execute(std::string(kColumns) + "ORDER BY payment_id");
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
}

}  // namespace

/// One charge request between its arrival and its answer.
struct ChargeFlow {
  detail::ChargeAttempt attempt;
  Reply reply;
  ProviderFaults faults;  // as they were when the request arrived
  std::optional<asio::steady_timer> latency;
  // The charge waits for both: the latency, which runs from the request's arrival, and
  // the key's claim (committed during that wait), so a charge costs its latency plus one
  // durable commit, not two.
  bool latency_over = false;
  bool claimed = false;
};

struct PaymentProvider::Impl {
  Impl(std::unique_ptr<Store> store, ProviderConfig c);

  // All of these run on the event loop's thread.
  void handle(HttpRequest& req, Reply reply);
  void handle_charge(HttpRequest& req, Reply reply);
  void handle_list(std::string_view query, Reply reply);
  void handle_summary(Reply reply);
  void handle_faults(const HttpRequest& req, Reply reply);
  void on_claim(const std::shared_ptr<ChargeFlow>& flow, LedgerAnswer answer);
  void start_latency(const std::shared_ptr<ChargeFlow>& flow);
  void claim_ready(const std::shared_ptr<ChargeFlow>& flow);
  void charge_or_give_up(const std::shared_ptr<ChargeFlow>& flow);
  void give_up(const std::shared_ptr<ChargeFlow>& flow);
  void charge(const std::shared_ptr<ChargeFlow>& flow);
  void answer(const std::shared_ptr<ChargeFlow>& flow, LedgerAnswer answer);
  void begin_work();
  void end_work();
  void begin_shutdown();

  /// `fn(LedgerAnswer)` later on the event loop: a ledger completion.
  template <class Fn>
  detail::LedgerCompletion on_loop(Fn fn) {
    return [this, fn = std::move(fn)](LedgerAnswer a) mutable {
      asio::post(io, [fn = std::move(fn), a = std::move(a)]() mutable { fn(std::move(a)); });
    };
  }
  [[nodiscard]] ProviderFaults current_faults() const;
  bool draw(double p);

  ProviderConfig config;
  mutable std::mutex faults_mutex;
  ProviderFaults faults;
  std::mt19937_64 rng;

  std::atomic<std::int64_t> replays{0};
  std::atomic<std::int64_t> conflicts{0};
  std::atomic<std::int64_t> resets{0};
  std::atomic<std::int64_t> unavailable{0};
  std::atomic<std::int64_t> in_progress_answers{0};  // 409s of the in_progress fault
  std::atomic<std::int64_t> declines{0};
  std::atomic<std::int64_t> in_progress{0};  // requests waiting for the ledger or a timer
  std::atomic<std::int64_t> peak_in_progress{0};

  // Declared before the ledger and the hook pool, destroyed after them: their
  // completions post here until they are gone.
  asio::io_context io{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> keep_running;
  detail::HttpServer server;
  detail::ChargeLedger ledger;
  std::unique_ptr<asio::thread_pool> hooks;  // after_claim runs here: it may block
  std::unordered_set<ChargeFlow*> waiting_latency;
  bool stopping = false;
  bool stopped = false;
  bool started = false;
  std::thread loop_thread;
  std::string url;
};

PaymentProvider::Impl::Impl(std::unique_ptr<Store> store, ProviderConfig c)
    : config(std::move(c)),
      faults(config.faults),
      rng(config.seed),
      server(io, [this](HttpRequest& req, Reply reply) { handle(req, std::move(reply)); }),
      ledger(std::move(store), *config.clock, config.key_retention) {
  if (config.after_claim) hooks = std::make_unique<asio::thread_pool>(1);
}

ProviderFaults PaymentProvider::Impl::current_faults() const {
  std::lock_guard lock(faults_mutex);
  return faults;
}

bool PaymentProvider::Impl::draw(double p) {
  if (p <= 0.0) return false;
  std::lock_guard lock(faults_mutex);
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng) < p;
}

void PaymentProvider::Impl::begin_work() {
  const std::int64_t now = ++in_progress;
  std::int64_t peak = peak_in_progress.load();
  while (now > peak && !peak_in_progress.compare_exchange_weak(peak, now)) {
  }
}

void PaymentProvider::Impl::end_work() {
  if (--in_progress == 0 && stopping && !stopped) {
    stopped = true;
    // server.close() closed the idle connections; the others close after their
    // answer is written. The loop returns once they all did.
    keep_running.reset();
  }
}

void PaymentProvider::Impl::begin_shutdown() {
  stopping = true;
  server.close();
  // A request held by its latency is released (nothing was charged) and answered 503.
  for (ChargeFlow* flow : waiting_latency) flow->latency->cancel();
  begin_work();  // so that the last end_work(), maybe this one, finishes the shutdown
  end_work();
}

void PaymentProvider::Impl::handle(HttpRequest& req, Reply reply) {
  const std::string_view target(req.target().data(), req.target().size());
  const auto question = target.find('?');
  const std::string_view path = target.substr(0, question);
  const std::string_view query =
      question == std::string_view::npos ? "" : target.substr(question + 1);
  const bool get = req.method() == beast_http::verb::get;
  const bool post = req.method() == beast_http::verb::post;
  try {
    if (post && path == "/payments/charge") return handle_charge(req, std::move(reply));
    if (get && path == "/payments/summary") return handle_summary(std::move(reply));
    if (get && path == "/payments") return handle_list(query, std::move(reply));
    if (post && path == "/admin/faults") return handle_faults(req, std::move(reply));
    if (get && path == "/healthz") return reply.send(response(200, "ok\n", "text/plain"));
    reply.send(error_response(404, "not_found", fmt::format("no route for {}", path)));
  } catch (const std::exception& e) {  // before the request was handed on: answer here
    reply.send(error_response(500, "internal_error", e.what()));
  }
}

void PaymentProvider::Impl::handle_charge(HttpRequest& req, Reply reply) {
  if (req.find("Idempotency-Key") == req.end()) {
    return reply.send(
        error_response(400, "missing_idempotency_key", "Idempotency-Key header is required"));
  }
  std::string key = header(req, "Idempotency-Key");
  try {
    validate_idempotency_key(key);
  } catch (const Error& e) {
    return reply.send(error_response(400, "invalid_idempotency_key", e.what()));
  }
  std::string why;
  const auto charge_request = detail::parse_charge(req.body(), why);
  if (!charge_request) return reply.send(error_response(400, "invalid_request", why));
  const ProviderFaults now_faults = current_faults();
  if (draw(now_faults.unavailable)) {
    ++unavailable;
    return reply.send(error_response(503, "unavailable", "injected fault: provider unavailable"));
  }
  if (draw(now_faults.in_progress)) {
    ++in_progress_answers;
    return reply.send(error_response(409, "request_in_progress",
                                     "injected fault: a request with this key is in progress"));
  }

  // Without latency or a hook between claim and charge, both commit in one transaction.
  const bool at_once = now_faults.latency.count() == 0 && !config.after_claim;
  auto flow = std::make_shared<ChargeFlow>(ChargeFlow{
      .attempt = {.key = std::move(key),
                  .fingerprint = charge_request->fingerprint(),
                  .order_id = charge_request->order_id,
                  .amount = charge_request->amount.to_string(),
                  .traceparent = header(req, "traceparent"),
                  .charge_at_claim = at_once,
                  .declined = at_once && detail::is_declined(charge_request->order_id,
                                                             now_faults.decline, config.seed)},
      .reply = std::move(reply),
      .faults = now_faults,
      .latency = std::nullopt});
  begin_work();
  if (!at_once) start_latency(flow);
  ledger.claim(flow->attempt,
               on_loop([this, flow](LedgerAnswer a) { on_claim(flow, std::move(a)); }));
}

void PaymentProvider::Impl::on_claim(const std::shared_ptr<ChargeFlow>& flow, LedgerAnswer a) {
  if (a.outcome != LedgerOutcome::Claimed) {
    if (flow->latency) flow->latency->cancel();  // answered now: nothing to wait for
    return answer(flow, std::move(a));
  }
  if (!hooks) return claim_ready(flow);
  asio::post(*hooks, [this, flow] {
    config.after_claim(flow->attempt.key);
    asio::post(io, [this, flow] { claim_ready(flow); });
  });
}

void PaymentProvider::Impl::start_latency(const std::shared_ptr<ChargeFlow>& flow) {
  if (flow->faults.latency.count() == 0) {
    flow->latency_over = true;
    return;
  }
  flow->latency.emplace(io, flow->faults.latency);
  waiting_latency.insert(flow.get());
  // Cancelled only by a stop (charge_or_give_up sees `stopping`) or by an answer that
  // needs no charge (never claimed): the error code adds nothing.
  flow->latency->async_wait([this, flow](boost::system::error_code) {
    waiting_latency.erase(flow.get());
    flow->latency_over = true;
    if (flow->claimed) charge_or_give_up(flow);
  });
}

void PaymentProvider::Impl::claim_ready(const std::shared_ptr<ChargeFlow>& flow) {
  flow->claimed = true;
  if (flow->latency_over) charge_or_give_up(flow);
}

void PaymentProvider::Impl::charge_or_give_up(const std::shared_ptr<ChargeFlow>& flow) {
  if (stopping) return give_up(flow);
  charge(flow);
}

// The provider stops while `flow` holds a claimed key and nothing was charged: the key
// is released, so the client's retry (to this or another provider) charges once.
void PaymentProvider::Impl::give_up(const std::shared_ptr<ChargeFlow>& flow) {
  ledger.release(flow->attempt.key);
  answer(flow, {LedgerOutcome::Failed, 503, {}, "the payment provider is stopping"});
}

void PaymentProvider::Impl::charge(const std::shared_ptr<ChargeFlow>& flow) {
  flow->attempt.declined =
      detail::is_declined(flow->attempt.order_id, current_faults().decline, config.seed);
  ledger.charge(flow->attempt,
                on_loop([this, flow](LedgerAnswer a) { answer(flow, std::move(a)); }));
}

void PaymentProvider::Impl::answer(const std::shared_ptr<ChargeFlow>& flow, LedgerAnswer a) {
  Reply& reply = flow->reply;
  switch (a.outcome) {
    case LedgerOutcome::Charged:
      if (draw(flow->faults.reset_after_commit)) {
        // Committed, and now the answer breaks off: "the provider charged, and the
        // answer was lost" of the design documents.
        ++resets;
        reply.break_off(response(a.status, std::move(a.body)));
      } else {
        reply.send(response(a.status, std::move(a.body)));
      }
      break;
    case LedgerOutcome::Declined:
      ++declines;
      reply.send(response(a.status, std::move(a.body)));
      break;
    case LedgerOutcome::InFlight:
      ++conflicts;
      reply.send(error_response(409, "request_in_progress",
                                "a request with this Idempotency-Key is still being processed"));
      break;
    case LedgerOutcome::DifferentRequest:
      ++conflicts;
      reply.send(error_response(422, "idempotency_key_reused",
                                "this Idempotency-Key was used for a different request"));
      break;
    case LedgerOutcome::Replayed: {
      HttpResponse res = response(a.status, std::move(a.body));
      res.set("Idempotent-Replayed", "true");
      ++replays;
      reply.send(std::move(res));
      break;
    }
    case LedgerOutcome::Claimed:  // not an answer; on_claim() goes on instead
    case LedgerOutcome::Failed:
      reply.send(a.status == 503 ? error_response(503, "unavailable", a.error)
                                 : error_response(500, "internal_error", a.error));
      break;
  }
  end_work();
}

void PaymentProvider::Impl::handle_list(std::string_view query, Reply reply) {
  std::optional<std::int64_t> order_id;
  if (const auto text = query_param(query, "order_id")) {
    std::int64_t id = 0;
    const auto [ptr, ec] = std::from_chars(text->data(), text->data() + text->size(), id);
    if (ec != std::errc() || ptr != text->data() + text->size()) {
      return reply.send(error_response(400, "invalid_request",
                                       fmt::format("order_id '{}' is not an integer", *text)));
    }
    order_id = id;
  }
  begin_work();
  ledger.read_async([this, order_id, reply = std::move(reply)](Store& store) mutable {
    HttpResponse res;
    try {
      auto tx = store.begin_read();
      nlohmann::json list = nlohmann::json::array();
      for (const Charge& c : read_charges(*tx, order_id)) list.push_back(detail::charge_to_json(c));
      tx->commit();
      res = response(200, list.dump());
    } catch (const std::exception& e) {
      res = error_response(500, "internal_error", e.what());
    }
    asio::post(io, [this, reply = std::move(reply), res = std::move(res)]() mutable {
      reply.send(std::move(res));
      end_work();
    });
  });
}

void PaymentProvider::Impl::handle_summary(Reply reply) {
  begin_work();
  ledger.read_async([this, reply = std::move(reply)](Store& store) mutable {
    HttpResponse res;
    try {
      auto tx = store.begin_read();
      ProviderSummary s = read_summary(*tx);
      tx->commit();
      s.replays = replays.load();
      s.conflicts = conflicts.load();
      s.resets_after_commit = resets.load();
      s.unavailable = unavailable.load();
      s.in_progress = in_progress_answers.load();
      s.declined = declines.load();
      res = response(200, detail::summary_to_json(s).dump());
    } catch (const std::exception& e) {
      res = error_response(500, "internal_error", e.what());
    }
    asio::post(io, [this, reply = std::move(reply), res = std::move(res)]() mutable {
      reply.send(std::move(res));
      end_work();
    });
  });
}

void PaymentProvider::Impl::handle_faults(const HttpRequest& req, Reply reply) {
  std::string why;
  std::lock_guard lock(faults_mutex);
  const auto next = detail::apply_fault_changes(faults, req.body(), why);
  if (!next) return reply.send(error_response(400, "invalid_request", why));
  faults = *next;
  reply.send(response(200, detail::faults_to_json(faults).dump()));
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
  detail::validate_faults(config.faults);
  impl_ = std::make_unique<Impl>(std::move(store), std::move(config));
}

PaymentProvider::~PaymentProvider() {
  stop();
}

int PaymentProvider::start(const std::string& host, int port) {
  if (impl_->started) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Http, "payment provider: already started");
  }
  const int bound = impl_->server.listen(host, port);
  impl_->started = true;
  impl_->url = fmt::format("http://{}:{}", host, bound);
  impl_->keep_running.emplace(impl_->io.get_executor());
  impl_->loop_thread = std::thread([this] { impl_->io.run(); });
  return bound;
}

void PaymentProvider::stop() {
  if (!impl_ || !impl_->loop_thread.joinable()) return;
  asio::post(impl_->io, [this] { impl_->begin_shutdown(); });
  impl_->loop_thread.join();
}

std::string PaymentProvider::base_url() const {
  return impl_->url;
}

void PaymentProvider::set_faults(const ProviderFaults& faults) {
  detail::validate_faults(faults);
  std::lock_guard lock(impl_->faults_mutex);
  impl_->faults = faults;
}

ProviderFaults PaymentProvider::faults() const {
  return impl_->current_faults();
}

ProviderSummary PaymentProvider::summary() const {
  ProviderSummary s = impl_->ledger.read([](Transaction& tx) { return read_summary(tx); });
  s.replays = impl_->replays.load();
  s.conflicts = impl_->conflicts.load();
  s.resets_after_commit = impl_->resets.load();
  s.unavailable = impl_->unavailable.load();
  s.in_progress = impl_->in_progress_answers.load();
  s.declined = impl_->declines.load();
  return s;
}

std::vector<Charge> PaymentProvider::charges(std::optional<std::int64_t> order_id) const {
  return impl_->ledger.read([&](Transaction& tx) { return read_charges(tx, order_id); });
}

ProviderStats PaymentProvider::stats() const {
  const detail::LedgerStats ledger = impl_->ledger.stats();
  return ProviderStats{.transactions = ledger.transactions,
                       .charges_committed = ledger.charges,
                       .largest_batch = ledger.largest_batch,
                       .queued = ledger.queued,
                       .requests_in_progress = impl_->in_progress.load(),
                       .peak_requests_in_progress = impl_->peak_in_progress.load()};
}

}  // namespace idem::http
