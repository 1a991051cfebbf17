#pragma once
// One topic of Python handlers as the consumer sees it: its records read and checked by
// the core's EventReader (no Python involved), each event handed to the topic's Python
// dispatcher (idem/_app.py) when its handler is to run, and, for handlers that declare an
// HTTP call (request=), the call made by the engine's HTTP client on the consumer's
// concurrent, key-ordered effect path.
#include <pybind11/pybind11.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "idem/consumer.hpp"
#include "idem/events/event_reader.hpp"
#include "idem/http/async_client.hpp"
#include "idem/http/route_pause.hpp"

namespace idem::python {

/// What the parser keeps of a record for its handler: read (and checked) when the record
/// is admitted, handed to Python when the handler runs.
struct PythonEvent {
  Uuid id;
  std::string type;
  std::string data;     ///< the data's JSON text as written
  std::size_t handler;  ///< in the topic's table of handlers
};

/// The answer to a handler's HTTP call (a 2xx), for its apply phase.
struct HttpAnswer {
  long status = 0;
  http::ResponseHeaders headers;
  std::string body;
};

/// "json", "cloudevents" or "auto". \throws Error(InvalidArgument, Config) for another.
[[nodiscard]] EventFormat event_format(const std::string& name);

class PythonTopic {
 public:
  /// `types[i]` is the event type handler i takes (nullopt: every type without a handler
  /// of its own). `request` is the topic's request dispatcher when its handlers declare an
  /// HTTP call, None otherwise.
  PythonTopic(std::string name, EventReaderOptions options,
              const std::vector<std::optional<std::string>>& types, pybind11::object dispatch,
              pybind11::object request);
  ~PythonTopic();
  PythonTopic(const PythonTopic&) = delete;
  PythonTopic& operator=(const PythonTopic&) = delete;

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// Whether the handlers declare an HTTP call (the topic is an effect topic).
  [[nodiscard]] bool calls() const noexcept { return !request_.is_none(); }
  void use_backend(Backend backend) noexcept { backend_ = backend; }
  /// The client the calls go through and who hears of the topic's pauses (401, 403, 404
  /// refusing every call). Before the consumer runs; `client` must outlive its calls.
  void use_client(http::AsyncClient& client, http::RoutePause::Observer on_pause);

  /// The record's event, or why it can never be processed. On the run() thread, without
  /// the GIL: nothing of Python is touched.
  [[nodiscard]] Validated<PythonEvent> parse(const RecordInfo& record, const ParseLimits& limits);

  /// Runs the event's handler in `tx` (with the call's `answer` on an effect topic) and
  /// says how it ended. On the run() thread, inside the scope (which holds the GIL).
  /// \throws the store error the handler's transaction raised, std::runtime_error for
  ///   any other exception of the handler, StopConsumer for KeyboardInterrupt/SystemExit.
  Outcome invoke(const PythonEvent& event, const RecordInfo& record, Transaction& tx,
                 const HttpAnswer* answer = nullptr);

  /// The call phase: asks Python for the request, sends it with the event id as its
  /// Idempotency-Key and completes `done` from the answer (ResponsePolicy's verdict).
  void start_call(const PythonEvent& event, const RecordInfo& record,
                  const CallCompletion<HttpAnswer>& done);

  /// The GIL taken once per batch pass, not once per event.
  [[nodiscard]] HandlerScope scope();

 private:
  void finish(const http::CallResult& result, http::RoutePause::Start then,
              const CallCompletion<HttpAnswer>& done);

  std::string name_;
  EventReader reader_;
  std::map<std::string, std::size_t, std::less<>> by_type_;
  std::optional<std::size_t> every_other_type_;
  pybind11::object dispatch_;
  pybind11::object request_;
  pybind11::str topic_text_;
  Backend backend_ = Backend::Postgres;
  std::optional<pybind11::gil_scoped_acquire> gil_;
  http::AsyncClient* client_ = nullptr;
  std::unique_ptr<http::RoutePause> pause_;
};

}  // namespace idem::python

template <>
struct idem::EventCodec<idem::python::PythonEvent> {
  static const Uuid& event_id(const python::PythonEvent& event) { return event.id; }
};
