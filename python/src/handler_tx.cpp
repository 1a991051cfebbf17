// The transaction of a Python handler (handler_tx.hpp).
#include "handler_tx.hpp"

#include <pybind11/stl.h>

#include "idem/outbox.hpp"
#include "python_values.hpp"

namespace py = pybind11;

namespace idem::python {

py::tuple HandlerTx::execute(const std::string& sql, const py::args& args) {
  const std::vector<Param> params = to_params(args);
  Transaction& tx = open();
  Rows rows;
  {
    py::gil_scoped_release unlocked;
    rows = kept([&] { return tx.execute_params(sql, params); });
  }
  return to_python(rows, backend_);
}

// The GIL stays held: on PostgreSQL the statement is only queued (it goes out with the
// next round trip), and on SQLite an INSERT into a local file is shorter than the GIL's
// hand-over would be.
void HandlerTx::defer(const std::string& sql, const py::args& args) {
  const std::vector<Param> params = to_params(args);
  Transaction& tx = open();
  kept([&] {
    tx.execute_deferred_params(sql, params);
    return 0;
  });
}

py::object HandlerTx::publish(const std::string& topic, const std::string& key,
                              const py::function& payload, const std::string& aggregate_type,
                              const std::vector<std::pair<std::string, std::string>>& headers) {
  Transaction& tx = open();
  Outbox outbox;
  const Uuid id = kept([&] {
    return outbox.enqueue(tx, [&](const Uuid& event_id) {
      OutboxMessage m;
      m.aggregate_type = aggregate_type;
      m.aggregate_id = key;
      m.topic = topic;
      m.payload = payload(python_uuid(event_id)).cast<std::string>();
      m.headers = headers;
      return m;
    });
  });
  return python_uuid(id);
}

Transaction& HandlerTx::open() {
  if (tx_ == nullptr) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Internal,
                "this transaction belongs to a handler call that has returned: use tx only "
                "inside the handler");
  }
  return *tx_;
}

void HandlerTx::bind(py::module_& module) {
  py::class_<HandlerTx>(module, "HandlerTx")
      .def("execute", &HandlerTx::execute, py::arg("sql"))
      .def("defer", &HandlerTx::defer, py::arg("sql"))
      .def("publish", &HandlerTx::publish, py::arg("topic"), py::arg("key"), py::arg("payload"),
           py::arg("aggregate_type"), py::arg("headers"))
      .def_property_readonly("active", &HandlerTx::active);
}

}  // namespace idem::python
