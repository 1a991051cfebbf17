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
using detail::Problem;
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

HttpResponse problem_response(Problem problem, std::string_view what) {
  return response(detail::problem_type(problem).status, detail::problem_body(problem, what),
                  detail::kProblemContentType);
}

// A stored or ledger answer: an error status is a problem document (the 402 decline).
HttpResponse stored_response(int status, std::string body) {
  return response(status, std::move(body),
                  status >= 400 ? detail::kProblemContentType : "application/json");
}

// Who is asking, for scoping stored keys; empty (anonymous) without the header.
std::string client_id_of(const HttpRequest& req, std::string_view client_header) {
  if (client_header.empty()) return {};
  const auto it = req.find(beast_view(client_header));
  if (it == req.end()) return {};
  return detail::client_identity(std::string_view(it->value().data(), it->value().size()));
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
  void handle_policy(Reply reply);
  /// Answers a request of the charge route: every answer names the key retention.
  void send_charge_answer(Reply& reply, HttpResponse res, bool break_off = false);
  /// A fault drawn for a charge request, answered before anything is stored; false: none.
  bool answer_with_fault(const ProviderFaults& now_faults, Reply& reply);
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
  std::atomic<std::int64_t> too_many_requests{0};
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
  std::string key_retention_seconds;  // kKeyExpiresAfterHeader's value
};

PaymentProvider::Impl::Impl(std::unique_ptr<Store> store, ProviderConfig c)
    : config(std::move(c)),
      faults(config.faults),
      rng(config.seed),
      server(io, [this](HttpRequest& req, Reply reply) { handle(req, std::move(reply)); }),
      ledger(std::move(store), *config.clock, config.key_retention) {
  if (config.after_claim) hooks = std::make_unique<asio::thread_pool>(1);
  key_retention_seconds = std::to_string(
      std::chrono::duration_cast<std::chrono::seconds>(config.key_retention).count());
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
    if (get && path == kIdempotencyPolicyPath) return handle_policy(std::move(reply));
    if (get && path == "/payments/summary") return handle_summary(std::move(reply));
    if (get && path == "/payments") return handle_list(query, std::move(reply));
    if (post && path == "/admin/faults") return handle_faults(req, std::move(reply));
    if (get && path == "/healthz") return reply.send(response(200, "ok\n", "text/plain"));
    reply.send(problem_response(
        Problem::NotFound,
        fmt::format("no route for {} {}", std::string(req.method_string()), path)));
  } catch (const std::exception& e) {  // before the request was handed on: answer here
    reply.send(problem_response(Problem::Internal, e.what()));
  }
}

void PaymentProvider::Impl::send_charge_answer(Reply& reply, HttpResponse res, bool break_off) {
  res.set(beast_view(kKeyExpiresAfterHeader), key_retention_seconds);
  if (break_off) {
    reply.break_off(std::move(res));
  } else {
    reply.send(std::move(res));
  }
}

// Shares of charge requests answered before anything is stored, so that a client's test
// can meet each answer on demand.
bool PaymentProvider::Impl::answer_with_fault(const ProviderFaults& now_faults, Reply& reply) {
  if (draw(now_faults.unavailable)) {
    ++unavailable;
    HttpResponse res =
        problem_response(Problem::Unavailable, "injected fault: provider unavailable");
    if (now_faults.unavailable_retry_after.count() > 0)
      res.set(beast_http::field::retry_after,
              std::to_string(now_faults.unavailable_retry_after.count()));
    send_charge_answer(reply, std::move(res));
    return true;
  }
  if (draw(now_faults.too_many_requests)) {
    ++too_many_requests;
    HttpResponse res =
        problem_response(Problem::TooManyRequests, "injected fault: too many requests");
    res.set(beast_http::field::retry_after, std::to_string(now_faults.retry_after.count()));
    send_charge_answer(reply, std::move(res));
    return true;
  }
  if (draw(now_faults.in_progress)) {
    ++in_progress_answers;
    send_charge_answer(reply, problem_response(Problem::KeyInFlight,
                                               "injected fault: a request with this "
                                               "Idempotency-Key is still being processed"));
    return true;
  }
  if (draw(now_faults.key_reused)) {
    ++conflicts;
    send_charge_answer(reply, problem_response(Problem::KeyReused,
                                               "injected fault: this Idempotency-Key was "
                                               "used for a different request"));
    return true;
  }
  return false;
}

void PaymentProvider::Impl::handle_charge(HttpRequest& req, Reply reply) {
  if (req.count("Idempotency-Key") == 0) {
    return send_charge_answer(
        reply, problem_response(Problem::KeyMissing, "the Idempotency-Key header is required"));
  }
  std::string why;
  if (req.count("Idempotency-Key") > 1) {
    return send_charge_answer(
        reply, problem_response(Problem::KeyMalformed, "one Idempotency-Key per request"));
  }
  auto key = detail::parse_idempotency_key(header(req, "Idempotency-Key"), why);
  if (!key) return send_charge_answer(reply, problem_response(Problem::KeyMalformed, why));
  const auto charge_request = detail::parse_charge(req.body(), why);
  if (!charge_request) {
    return send_charge_answer(reply, problem_response(Problem::InvalidRequest, why));
  }
  const ProviderFaults now_faults = current_faults();
  if (answer_with_fault(now_faults, reply)) return;

  // Without latency or a hook between claim and charge, both commit in one transaction.
  const bool at_once = now_faults.latency.count() == 0 && !config.after_claim;
  auto flow = std::make_shared<ChargeFlow>(ChargeFlow{
      .attempt = {.key = std::move(*key),
                  .client_id = client_id_of(req, config.client_header),
                  .method = std::string(req.method_string()),
                  .path = "/payments/charge",
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
  ledger.release(flow->attempt);
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
    case LedgerOutcome::Charged: {
      // Committed; with the fault the answer then breaks off: "the provider charged, and
      // the answer was lost" of the design documents.
      const bool lose_answer = draw(flow->faults.reset_after_commit);
      if (lose_answer) ++resets;
      send_charge_answer(reply, stored_response(a.status, std::move(a.body)), lose_answer);
      break;
    }
    case LedgerOutcome::Declined:
      ++declines;
      send_charge_answer(reply, stored_response(a.status, std::move(a.body)));
      break;
    case LedgerOutcome::InFlight:
      ++conflicts;
      send_charge_answer(reply,
                         problem_response(Problem::KeyInFlight,
                                          "a request with this Idempotency-Key is still being "
                                          "processed; retry later with the same key"));
      break;
    case LedgerOutcome::DifferentRequest:
      ++conflicts;
      send_charge_answer(reply, problem_response(Problem::KeyReused,
                                                 "this Idempotency-Key was used for a different "
                                                 "request (another order_id or amount)"));
      break;
    case LedgerOutcome::Replayed: {
      HttpResponse res = stored_response(a.status, std::move(a.body));
      res.set("Idempotent-Replayed", "true");
      ++replays;
      send_charge_answer(reply, std::move(res));
      break;
    }
    case LedgerOutcome::Claimed:  // not an answer; on_claim() goes on instead
    case LedgerOutcome::Failed:
      send_charge_answer(reply, a.status == 503 ? problem_response(Problem::Unavailable, a.error)
                                                : problem_response(Problem::Internal, a.error));
      break;
  }
  end_work();
}

void PaymentProvider::Impl::handle_policy(Reply reply) {
  reply.send(response(200, detail::idempotency_policy_json(config).dump()));
}

void PaymentProvider::Impl::handle_list(std::string_view query, Reply reply) {
  std::optional<std::int64_t> order_id;
  if (const auto text = query_param(query, "order_id")) {
    std::int64_t id = 0;
    const auto [ptr, ec] = std::from_chars(text->data(), text->data() + text->size(), id);
    if (ec != std::errc() || ptr != text->data() + text->size()) {
      return reply.send(problem_response(Problem::InvalidRequest,
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
      for (const Charge& c : detail::ChargeLedger::read_charges(*tx, order_id))
        list.push_back(detail::charge_to_json(c));
      tx->commit();
      res = response(200, list.dump());
    } catch (const std::exception& e) {
      res = problem_response(Problem::Internal, e.what());
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
      ProviderSummary s = detail::ChargeLedger::read_summary(*tx);
      tx->commit();
      s.replays = replays.load();
      s.conflicts = conflicts.load();
      s.resets_after_commit = resets.load();
      s.unavailable = unavailable.load();
      s.too_many_requests = too_many_requests.load();
      s.in_progress = in_progress_answers.load();
      s.declined = declines.load();
      res = response(200, detail::summary_to_json(s).dump());
    } catch (const std::exception& e) {
      res = problem_response(Problem::Internal, e.what());
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
  if (!next) return reply.send(problem_response(Problem::InvalidRequest, why));
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
  detail::validate_client_header(config.client_header);
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
  ProviderSummary s =
      impl_->ledger.read([](Transaction& tx) { return detail::ChargeLedger::read_summary(tx); });
  s.replays = impl_->replays.load();
  s.conflicts = impl_->conflicts.load();
  s.resets_after_commit = impl_->resets.load();
  s.unavailable = impl_->unavailable.load();
  s.too_many_requests = impl_->too_many_requests.load();
  s.in_progress = impl_->in_progress_answers.load();
  s.declined = impl_->declines.load();
  return s;
}

std::vector<Charge> PaymentProvider::charges(std::optional<std::int64_t> order_id) const {
  return impl_->ledger.read(
      [&](Transaction& tx) { return detail::ChargeLedger::read_charges(tx, order_id); });
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
