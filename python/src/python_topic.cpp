// One topic of Python handlers (python_topic.hpp).
#include "python_topic.hpp"

#include <pybind11/stl.h>

#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "handler_tx.hpp"
#include "idem/error.hpp"
#include "idem/tracing.hpp"

namespace py = pybind11;

namespace idem::python {
namespace {

// What the dispatchers of a topic (idem/_app.py) answer for one event when the handler
// did not simply return: a pair (one of these, text).
enum class Answer {
  Retry = 1,       // idem.Retry: the text is the reason
  DeadLetter = 2,  // idem.DeadLetter, or a decode step that failed: the reason
  Exception = 3,   // any other exception: "TypeName: message"
  StoreError = 4,  // an idem.StoreError: the transaction's own error, if it raised one
  Stop = 5,        // KeyboardInterrupt or SystemExit: stop the consumer, commit nothing
};

py::bytes id_bytes(const Uuid& id) {
  return {reinterpret_cast<const char*>(id.bytes().data()), id.bytes().size()};
}

py::object key_of(const RecordInfo& record) {
  if (record.key.data() == nullptr) return py::none();
  return py::bytes(record.key.data(), record.key.size());
}

py::tuple headers_of(const RecordInfo& record) {
  py::tuple all(record.headers.size());
  for (std::size_t i = 0; i < record.headers.size(); ++i) {
    const RecordHeader& h = record.headers[i];
    all[i] = py::make_tuple(py::str(h.name.data(), h.name.size()),
                            py::bytes(h.value.data(), h.value.size()));
  }
  return all;
}

py::object response_of(const HttpAnswer* answer) {
  if (answer == nullptr) return py::none();
  py::list headers;
  for (const auto& [name, value] : answer->headers) headers.append(py::make_tuple(name, value));
  return py::make_tuple(answer->status, headers, py::bytes(answer->body));
}

}  // namespace

EventFormat event_format(const std::string& name) {
  if (name == "json") return EventFormat::Json;
  if (name == "cloudevents") return EventFormat::CloudEvents;
  if (name == "auto") return EventFormat::Auto;
  throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
              fmt::format("format {:?}: expected json, cloudevents or auto", name));
}

PythonTopic::PythonTopic(std::string name, EventReaderOptions options,
                         const std::vector<std::optional<std::string>>& types, py::object dispatch,
                         py::object request, py::object enter, py::object leave)
    : name_(std::move(name)),
      reader_(std::move(options)),
      dispatch_(std::move(dispatch)),
      request_(std::move(request)),
      enter_(std::move(enter)),
      leave_(std::move(leave)),
      topic_text_(name_) {
  for (std::size_t i = 0; i < types.size(); ++i) {
    if (types[i]) {
      by_type_.emplace(*types[i], i);
    } else {
      every_other_type_ = i;
    }
  }
}

PythonTopic::~PythonTopic() = default;

void PythonTopic::use_client(http::AsyncClient& client, http::RoutePause::Observer on_pause) {
  client_ = &client;
  pause_ = std::make_unique<http::RoutePause>(std::move(on_pause));
}

Validated<PythonEvent> PythonTopic::parse(const RecordInfo& record, const ParseLimits& limits) {
  Validated<EventView> read = reader_.read(record, limits);
  if (!read.ok()) return read.error();
  const EventView& view = read.value();
  std::size_t handler = 0;
  if (const auto it = by_type_.find(view.type()); it != by_type_.end()) {
    handler = it->second;
  } else if (every_other_type_) {
    handler = *every_other_type_;
  } else {
    return ValidationError{
        "type", ValidationReason::UnknownEventType,
        fmt::format("no handler for event type {:?} on topic {}", view.type(), name_)};
  }
  return PythonEvent{view.id(), std::string(view.type()), std::string(view.data_text()), handler};
}

Outcome PythonTopic::invoke(const PythonEvent& event, const RecordInfo& record, Transaction& tx,
                            const HttpAnswer* answer) {
  // The engine calls this inside scope(), which took the GIL for the pass; a path of the
  // engine that did not would crash the interpreter, so it is refused instead.
  if (PyGILState_Check() == 0)
    throw std::logic_error("idem: a Python handler called outside its HandlerScope");
  py::object outcome;
  std::exception_ptr store_error;
  {
    py::object tx_object = py::cast(HandlerTx(tx, backend_));
    auto& handler_tx = tx_object.cast<HandlerTx&>();
    try {
      outcome = dispatch_(event.handler, id_bytes(event.id), event.type, event.data, topic_text_,
                          record.partition, record.offset, key_of(record), headers_of(record),
                          tx_object, response_of(answer));
    } catch (py::error_already_set& e) {
      handler_tx.close();
      // The dispatcher catches every exception of a handler; this is its own failure.
      throw std::runtime_error(fmt::format("idem's Python dispatcher failed: {}", e.what()));
    }
    handler_tx.close();
    store_error = handler_tx.last_error();
  }
  if (outcome.is_none()) return Outcome::Done;
  const auto [code, text] = outcome.cast<std::pair<int, std::string>>();
  switch (static_cast<Answer>(code)) {
    case Answer::Retry: record.dead_letter_reason(text); return Outcome::Retry;
    case Answer::DeadLetter: record.dead_letter_reason(text); return Outcome::DeadLetter;
    case Answer::StoreError:
      if (store_error) std::rethrow_exception(store_error);
      break;
    case Answer::Stop: throw StopConsumer{text};
    case Answer::Exception: break;
  }
  throw std::runtime_error(text);
}

void PythonTopic::start_call(const PythonEvent& event, const RecordInfo& record,
                             const CallCompletion<HttpAnswer>& done) {
  http::Request request;
  {
    const py::gil_scoped_acquire gil;
    py::tuple made;
    try {
      made = request_(event.handler, id_bytes(event.id), event.type, event.data, topic_text_,
                      record.partition, record.offset, key_of(record), headers_of(record));
    } catch (py::error_already_set& e) {
      return done.dead_letter(fmt::format("idem's Python dispatcher failed: {}", e.what()));
    }
    const int code = made[0].cast<int>();
    if (code != 0) {
      std::string reason = made[1].cast<std::string>();
      if (static_cast<Answer>(code) == Answer::Retry) return done.retry(std::move(reason));
      return done.dead_letter(std::move(reason));
    }
    request.method = made[1].cast<std::string>();
    request.url = made[2].cast<std::string>();
    request.body = made[3].cast<std::string>();
    request.content_type = made[4].cast<std::string>();
    request.extra_headers = made[5].cast<std::vector<std::pair<std::string, std::string>>>();
  }
  // The key is the event's id on every attempt, in every process: the provider performs
  // the effect once however often the call is repeated (a crash, a rebalance, a retry).
  request.idempotency_key = event.id.to_string();
  // The call is a child span of the record's trace (as the compiled billing's is).
  if (const auto trace = trace_context(record))
    request.extra_headers.emplace_back(std::string(kTraceparentHeader),
                                       trace->child().traceparent());
  const http::RoutePause::Start then = pause_->at_start();
  try {
    client_->start(std::move(request),
                   [this, then, done](const http::CallResult& r) { finish(r, then, done); });
  } catch (const std::exception& e) {
    // The handler's code builds every request alike (its URL, its headers), so a request
    // the client refuses is the code's or the configuration's fault, not this event's:
    // the topic pauses and the call retries with the consumer's backoff, and nothing of
    // the stream is dead-lettered for it.
    const std::string reason = fmt::format("the call could not be sent: {}", e.what());
    pause_->pause(reason);
    done.retry(fmt::format("topic {} paused: {}", name_, reason));
  }
}

void PythonTopic::finish(const http::CallResult& result, http::RoutePause::Start then,
                         const CallCompletion<HttpAnswer>& done) {
  const http::Classification& c = result.classification;
  const std::string why = c.reason.empty() ? result.error : c.reason;
  switch (result.status) {
    case http::CallStatus::Success:
      pause_->succeeded();
      return done.done(HttpAnswer{result.http_status, result.headers, result.body});
    case http::CallStatus::Permanent:
      if (c.verdict == http::Verdict::RouteMisconfigured) {
        // Every call refused alike (credentials, URL) is the code's or the configuration's
        // fault: pause, do not dead-letter the stream. Refused while others succeed: this
        // request's own.
        if (auto retry = pause_->retry_after_refusal(then, why, "topic " + name_))
          return done.retry(std::move(*retry));
      }
      return done.dead_letter(why);
    case http::CallStatus::RetriesExhausted: return done.retry(why);
  }
}

HandlerScope PythonTopic::scope() {
  // `enter` and `leave` only set and clear the thread's running loop; an exception of
  // theirs (none is expected) must not escape a scope, whose leave runs in a destructor.
  const auto call = [](const py::object& hook) {
    if (hook.is_none()) return;
    try {
      hook();
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("idem: a batch pass hook of Python handlers");
    }
  };
  return {[this, call] {
            gil_.emplace();
            call(enter_);
          },
          [this, call] {
            call(leave_);
            gil_.reset();
          }};
}

}  // namespace idem::python
