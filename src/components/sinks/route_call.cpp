#include "sinks/route_call.hpp"

#include <algorithm>
#include <exception>
#include <span>

#include <fmt/format.h>

#include "sinks/param_values.hpp"

namespace idem::sinks::detail {

namespace {

// The answer's values of `response:` parameters, or why one required is missing. A number
// is read from its digits as the answer wrote them (a fee of 0.00005 stays 0.00005, where
// the DOM's double would write 5e-05), as a json parameter is taken as it came. Runs on
// the HTTP client's loop thread: one document for that thread, reused.
Validated<CallAnswer> read_answer(const Route& route, const SinkEvent& event, Backend backend,
                                  const std::string& body) {
  CallAnswer answer;
  if (event.from_answer.empty()) return answer;
  thread_local JsonDocument document;
  const Validated<JsonValue> root = document.parse(body);
  for (const auto& [position, index] : event.from_answer) {
    const ParamSpec& spec = route.params[index];
    // The field's name outlives ctx, which only views it.
    const std::string field = "response:" + spec.source.name;
    const ValueContext ctx{spec, backend, field};
    const auto found = root.ok() ? root.value().at(spec.source.name) : std::nullopt;
    Validated<Param> value = found ? json_param(*found, ctx) : absent_param(ctx, false);
    if (!value.ok()) return value.error();
    answer.values.emplace_back(position, std::move(value).value());
  }
  return answer;
}

}  // namespace

RouteCalls::RouteCalls(const Route& route, Backend backend, const SinkObservers& observers)
    : route_(route),
      backend_(backend),
      observers_(observers),
      pause_([this](bool paused, std::string_view why) {
        if (observers_.log) {
          observers_.log(paused ? fmt::format("route {} paused: {}; its calls wait and retry "
                                              "until one succeeds",
                                              route_.name, why)
                                : fmt::format("route {} resumed: {}", route_.name, why));
        }
        if (observers_.on_pause) observers_.on_pause(route_.name, paused);
      }) {
  const auto collect = [this](const Template& t) {
    for (const std::string& value : t.secrets) {
      secrets_.push_back(value);
      // A secret read from a file may end with a newline that a message drops.
      const std::size_t end = value.find_last_not_of(" \t\r\n");
      if (end != std::string::npos && end + 1 < value.size())
        secrets_.push_back(value.substr(0, end + 1));
    }
  };
  if (route_.http) {
    endpoint_ = url_endpoint(route_.http->url).value_or(std::string());
    collect(route_.http->url);
    for (const auto& [name, value] : route_.http->headers) collect(value);
  }
  // Longest first: a secret that contains another is replaced whole.
  std::sort(secrets_.begin(), secrets_.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  std::erase_if(secrets_, [](const std::string& v) { return v.empty(); });
}

std::string RouteCalls::redacted(std::string text) const {
  static constexpr std::string_view kRedacted = "<redacted>";
  for (const std::string& secret : secrets_) {
    for (std::size_t at = text.find(secret); at != std::string::npos;
         at = text.find(secret, at + kRedacted.size())) {
      text.replace(at, secret.size(), kRedacted);
    }
  }
  return text;
}

std::chrono::steady_clock::time_point RouteCalls::next_slot() {
  const double rate = route_.http->rate_limit;
  if (rate <= 0) return {};
  const auto now = std::chrono::steady_clock::now();
  if (next_slot_ < now) next_slot_ = now;
  const auto at = next_slot_;
  next_slot_ += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(1.0 / rate));
  return at;
}

void RouteCalls::start(http::AsyncClient& client, const SinkEvent& event,
                       const CallCompletion<CallAnswer>& done) {
  http::Request request = *event.request;
  request.not_before = next_slot();
  const http::RoutePause::Start then = pause_.at_start();
  const auto started = std::chrono::steady_clock::now();
  try {
    // The callback runs on the client's loop thread and only completes `done` (never
    // blocks). `event` outlives the call: the consumer keeps it until the call completed.
    client.start(std::move(request),
                 [this, &event, then, started, done](const http::CallResult& r) {
                   if (observers_.on_call)
                     observers_.on_call(route_.name, std::chrono::steady_clock::now() - started);
                   finish(r, event, then, done);
                 });
  } catch (const std::exception& e) {
    // Values from the event are checked where they are inserted (EventReader::render), so
    // a request the client refuses is refused for what the route wrote (a header, the
    // URL), and every event would be alike: the route pauses, and nothing is
    // dead-lettered. Its calls retry with the consumer's backoff until the configuration
    // is fixed; `idem consume` refuses such a route at start, so this is a last resort.
    const std::string reason = redacted(fmt::format("the call could not be sent: {}", e.what()));
    pause_.pause(reason);
    done.retry(fmt::format("route {} paused: {}", route_.name, reason));
  }
}

void RouteCalls::finish(const http::CallResult& result, const SinkEvent& event,
                        http::RoutePause::Start then, const CallCompletion<CallAnswer>& done) {
  const http::Classification& c = result.classification;
  // Reasons go to dead letters, logs and /readyz: never with a value of ${VAR} in them.
  const auto why = [&] { return redacted(c.reason.empty() ? result.error : c.reason); };
  switch (result.status) {
    case http::CallStatus::Success: {
      pause_.succeeded();
      Validated<CallAnswer> answer = read_answer(route_, event, backend_, result.body);
      if (!answer.ok())
        return done.dead_letter(
            redacted(fmt::format("the answer (HTTP {}) lacks what routes.{} records: {}",
                                 result.http_status, route_.name, answer.error().message)));
      return done.done(std::move(answer).value());
    }
    case http::CallStatus::Permanent:
      if (c.verdict == http::Verdict::RouteMisconfigured) {
        // Every call failing alike is the route's fault (credentials, URL): pause, do not
        // dead-letter the stream. A call failing while others succeed is this request's.
        if (auto retry = pause_.retry_after_refusal(then, why(), "route " + route_.name))
          return done.retry(std::move(*retry));
      }
      return done.dead_letter(why());
    case http::CallStatus::RetriesExhausted: return done.retry(why());
  }
}

void RouteCalls::endpoint_changed(std::string_view endpoint, bool open, std::string_view why) {
  if (endpoint_.empty() || endpoint != endpoint_) return;
  if (open) {
    // The calls are held by the breaker, not ended: no record of the route moves on to a
    // retry topic or the DLQ for the outage, and the backlog waits in Kafka.
    pause_.pause(redacted(fmt::format("its endpoint {} is down ({})", endpoint, why)));
  } else {
    pause_.resume(redacted(fmt::format("its endpoint {} answered ({})", endpoint, why)));
  }
}

std::string RouteCalls::paused_reason() const {
  return pause_.paused_reason();
}

Outcome apply_statements(const SinkEvent& event, const CallAnswer* answer, Transaction& tx) {
  if (event.route == nullptr) return Outcome::Done;
  std::vector<Param> patched;
  std::span<const Param> values(event.values);
  if (answer != nullptr && !answer->values.empty()) {
    patched = event.values;
    for (const auto& [position, value] : answer->values) patched[position] = value;
    values = patched;
  }
  std::size_t next = 0;
  for (const SqlStatement& st : event.route->config->sql) {
    tx.execute_deferred_params(st.sql, values.subspan(next, st.params.size()));
    next += st.params.size();
  }
  return Outcome::Done;
}

}  // namespace idem::sinks::detail
