// The outbox row across the binding (outbox_binding.hpp).
#include "outbox_binding.hpp"

#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "idem/outbox.hpp"
#include "python_values.hpp"

namespace py = pybind11;

namespace idem::python {
namespace {

/// The row's values in outbox_insert_statement()'s order; the event id as uuid.UUID.
py::tuple prepare_outbox_row(const std::string& topic, const std::string& aggregate_type,
                             const std::string& aggregate_id, const py::function& payload,
                             const std::vector<std::pair<std::string, std::string>>& headers,
                             const std::optional<std::string>& message_key) {
  Outbox outbox;
  const OutboxRow row = outbox.prepare(
      outbox_factory(topic, aggregate_type, aggregate_id, payload, headers, message_key));
  return py::make_tuple(python_uuid(row.event_id), row.message.aggregate_type,
                        row.message.aggregate_id, row.message.topic, row.message_key, row.shard,
                        row.message.payload, row.headers_json);
}

}  // namespace

OutboxEventFactory outbox_factory(std::string topic, std::string aggregate_type,
                                  std::string aggregate_id, py::function payload,
                                  std::vector<std::pair<std::string, std::string>> headers,
                                  std::optional<std::string> message_key) {
  return [=](const Uuid& event_id) {
    OutboxMessage m;
    m.aggregate_type = aggregate_type;
    m.aggregate_id = aggregate_id;
    m.topic = topic;
    // The payload is made once the id is born, so that it can carry it (IDEM-1).
    m.payload = payload(python_uuid(event_id)).cast<std::string>();
    m.headers = headers;
    m.message_key = message_key;
    return m;
  };
}

void bind_outbox(py::module_& module) {
  module.attr("OUTBOX_INSERT") = py::str(std::string(outbox_insert_statement()));
  module.def("prepare_outbox_row", &prepare_outbox_row, py::arg("topic"), py::arg("aggregate_type"),
             py::arg("aggregate_id"), py::arg("payload"), py::arg("headers"),
             py::arg("message_key"));
}

}  // namespace idem::python
