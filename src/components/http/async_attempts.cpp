// One attempt of an AsyncClient call: its connection slot, the transfer, what its end
// means (done, permanent, another attempt after a backoff) and the endpoint's circuit
// breaker, which may hold the call until the endpoint is back.
#include <curl/curl.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <utility>

#include <fmt/format.h>

#include "http/async_client_impl.hpp"
#include "idem/uuid.hpp"

namespace idem::http {

namespace {

// Errors that are the caller's bug, not the network's: retrying cannot help. start()
// rejects most of them up front; these catch what only the transfer finds out.
bool unusable_url(CURLcode code) {
  return code == CURLE_URL_MALFORMAT || code == CURLE_UNSUPPORTED_PROTOCOL;
}

}  // namespace

bool AsyncClient::Impl::prepare_transfer(Call& call) {
  call.easy.reset(curl_easy_init());
  if (!call.easy) return false;
  CURL* easy = call.easy.get();
  curl_easy_setopt(easy, CURLOPT_CURLU, call.url.get());
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  const Request& r = call.request;
  if (!r.body.empty() || r.method == "POST") {
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, r.body.data());
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
  } else {
    curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
  }
  if (r.method != "POST" && r.method != "GET")
    curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, r.method.c_str());
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(config.connect_timeout.count()));
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(config.total_timeout.count()));
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM (threads)
  // Small requests and answers: no Nagle delay; pooled connections probed while idle.
  curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &detail::append_body);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &call.response);
  curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &detail::append_header_line);
  curl_easy_setopt(easy, CURLOPT_HEADERDATA, &call.response_headers);
  return true;
}

void AsyncClient::Impl::start_attempt(std::unique_ptr<Call> call) {
  if (call->slots == nullptr)
    call->slots = &hosts.try_emplace(call->host, config.breaker).first->second;
  if (call->slots->breaker.open()) {
    call->slots->held.push_back(std::move(call));
    return;
  }
  take_slot(std::move(call));
}

void AsyncClient::Impl::take_slot(std::unique_ptr<Call> call) {
  HostSlots& slots = *call->slots;
  if (slots.active >= config.max_host_connections) {
    slots.queued.push_back(std::move(call));
    return;
  }
  ++slots.active;
  send_attempt(std::move(call));
}

void AsyncClient::Impl::release_slot(HostSlots& slots) {
  --slots.active;
  if (slots.breaker.open()) {
    // Nothing but probes goes out while the breaker is open: the queue waits with it.
    std::move(slots.queued.begin(), slots.queued.end(), std::back_inserter(slots.held));
    slots.queued.clear();
    return;
  }
  if (slots.queued.empty()) return;
  auto next = std::move(slots.queued.front());
  slots.queued.pop_front();
  ++slots.active;
  send_attempt(std::move(next));
}

void AsyncClient::Impl::start_due_probes(Clock::time_point now) {
  for (auto& [host, slots] : hosts) {
    if (!slots.breaker.probe_due(now)) continue;
    auto& from = slots.held.empty() ? slots.queued : slots.held;
    if (from.empty()) continue;
    auto probe = std::move(from.front());
    from.pop_front();
    probe->probe = true;
    slots.breaker.probe_started();
    // Beside the connection limit: one connection more at most, and never queued behind
    // the attempts that are finding out the endpoint is down.
    ++slots.active;
    send_attempt(std::move(probe));
  }
}

bool AsyncClient::Impl::through_breaker(std::unique_ptr<Call>& call) {
  HostSlots& slots = *call->slots;
  const bool was_probe = std::exchange(call->probe, false);
  const CallResult& result = call->result;
  if (!detail::endpoint_down(result.http_status)) {
    if (slots.breaker.answered()) {
      notify_breaker(call->host, false, fmt::format("it answered HTTP {}", result.http_status));
      release_held(slots);
    }
    return true;
  }
  if (slots.breaker.failed(Clock::now(), result.classification.retry_after, was_probe))
    notify_breaker(call->host, true, result.error);
  if (!slots.breaker.open()) return true;
  // The call waits for its endpoint; a failed probe stays the first in line.
  if (was_probe) {
    slots.held.push_front(std::move(call));
  } else {
    slots.held.push_back(std::move(call));
  }
  return false;
}

void AsyncClient::Impl::release_held(HostSlots& slots) {
  auto held = std::move(slots.held);
  slots.held.clear();
  for (auto& call : held) {
    call->attempts_forgiven = call->result.attempts;
    take_slot(std::move(call));
  }
}

void AsyncClient::Impl::send_attempt(std::unique_ptr<Call> call) {
  Call& c = *call;
  if (!c.easy && !prepare_transfer(c)) {
    c.result.error = "curl_easy_init failed";
    HostSlots& slots = *c.slots;
    complete(std::move(call), CallStatus::RetriesExhausted);
    release_slot(slots);
    return;
  }
  ++c.result.attempts;
  if (!c.headers || !config.send_idempotency_key) {
    detail::HeaderList headers;
    if (!c.request.body.empty())
      detail::append_header(headers, "Content-Type", c.request.content_type);
    detail::append_header(
        headers, c.request.idempotency_header,
        config.send_idempotency_key ? c.request.idempotency_key : new_uuid_v7().to_string());
    // A body of any size goes at once: no "Expect: 100-continue" round trip.
    detail::append_header(headers, "Expect", "");
    for (const auto& [name, value] : c.request.extra_headers)
      detail::append_header(headers, name, value);
    c.headers = std::move(headers);
    curl_easy_setopt(c.easy.get(), CURLOPT_HTTPHEADER, c.headers.get());
  }
  c.response.clear();
  c.response_headers.clear();
  CURL* easy = c.easy.get();
  const auto entry = transferring.emplace(easy, std::move(call)).first;
  if (const CURLMcode code = curl_multi_add_handle(multi.get(), easy); code != CURLM_OK) {
    auto failed = std::move(entry->second);
    transferring.erase(entry);
    failed->result.http_status = 0;
    failed->result.body.clear();
    failed->result.error = fmt::format("curl_multi_add_handle: {}", curl_multi_strerror(code));
    HostSlots& slots = *failed->slots;
    complete(std::move(failed), CallStatus::RetriesExhausted);
    release_slot(slots);
  }
}

void AsyncClient::Impl::finish_transfers() {
  int queued = 0;
  while (const CURLMsg* message = curl_multi_info_read(multi.get(), &queued)) {
    if (message->msg != CURLMSG_DONE) continue;
    // The message dies with curl_multi_remove_handle: copy what we need first.
    CURL* easy = message->easy_handle;
    const CURLcode code = message->data.result;
    curl_multi_remove_handle(multi.get(), easy);
    auto node = transferring.extract(easy);
    if (node.empty()) continue;
    HostSlots& slots = *node.mapped()->slots;
    attempt_ended(std::move(node.mapped()), code);
    release_slot(slots);
  }
}

void AsyncClient::Impl::attempt_ended(std::unique_ptr<Call> call, CURLcode code) {
  CallResult& result = call->result;
  if (code != CURLE_OK) {
    // Refused, reset, timed out, or the answer broke off: the provider may or may not
    // have done the work, which is exactly what the key makes safe to retry.
    result.http_status = 0;
    result.body.clear();
    result.headers.clear();
    result.error = fmt::format("{} (curl {})", curl_easy_strerror(code), static_cast<int>(code));
    result.classification = config.policy.classify_no_answer(result.error);
    if (unusable_url(code)) {
      result.classification.verdict = Verdict::DeadLetter;
      complete(std::move(call), CallStatus::Permanent);
      return;
    }
    if (!through_breaker(call)) return;
  } else {
    long status = 0;
    curl_easy_getinfo(call->easy.get(), CURLINFO_RESPONSE_CODE, &status);
    result.http_status = status;
    result.body = std::move(call->response);
    result.headers = std::move(call->response_headers);
    result.classification = config.policy.classify(status, result.headers, result.body);
    result.error = fmt::format("HTTP {}", status);
    if (!through_breaker(call)) return;
    if (result.classification.verdict == Verdict::Done) {
      result.error.clear();
      complete(std::move(call), CallStatus::Success);
      return;
    }
    if (result.classification.verdict != Verdict::Retry) {
      complete(std::move(call), CallStatus::Permanent);
      return;
    }
  }
  const int counted = result.attempts - call->attempts_forgiven;
  if (counted >= config.max_attempts) {
    complete(std::move(call), CallStatus::RetriesExhausted);
    return;
  }
  const milliseconds wait = std::max(backoff.delay(static_cast<std::uint32_t>(counted)),
                                     result.classification.retry_after);
  notify_retry(result.attempts, wait, result.error);
  waiting.emplace(Clock::now() + wait, std::move(call));
}

void AsyncClient::Impl::notify_breaker(const std::string& host, bool open,
                                       std::string_view why) const noexcept {
  if (!config.on_breaker) return;
  try {
    config.on_breaker(host, open, why);
  } catch (...) {
    // As notify_retry: an observer's failure must not end the loop.
  }
}

}  // namespace idem::http
