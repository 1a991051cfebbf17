// idem._idem: the compiled part of idem for Python. Thin on purpose: it hands the core's
// objects to Python and converts values; the API users call is the package's Python
// (python/idem/), where the choices a Python user sees are made.
#include <pybind11/pybind11.h>

#include <string>

#include "consumer_binding.hpp"
#include "idem/config.hpp"
#include "idem/error.hpp"
#include "idem/uuid.hpp"
#include "outbox_binding.hpp"
#include "store_binding.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_idem, module) {
  module.doc() = "The compiled part of idem for Python (use the idem package).";

  // idem::Error becomes idem.errors.StoreError with the core's classification, so that a
  // caller (and the consumer, for a handler's exception) tells a transient error from one
  // that redoing cannot fix.
  py::register_exception_translator([](std::exception_ptr raised) {
    try {
      if (raised) std::rethrow_exception(raised);
    } catch (const idem::ConfigError& e) {
      // Every problem of the configuration at once, each with its key and where its value
      // came from (a file and line, a variable, the App's settings).
      py::list problems;
      for (const idem::ConfigProblem& p : e.problems())
        problems.append(py::make_tuple(p.key, p.origin.describe(), p.message));
      const py::object type = py::module_::import("idem.errors").attr("ConfigError");
      const py::object error = type(e.what(), problems);
      PyErr_SetObject(type.ptr(), error.ptr());
    } catch (const idem::Error& e) {
      const py::object type = py::module_::import("idem.errors").attr("StoreError");
      const py::object error =
          type(e.what(), std::string(idem::to_string(e.code())),
               std::string(idem::to_string(e.source())), e.detail(), e.transient());
      PyErr_SetObject(type.ptr(), error.ptr());
    }
  });

  module.def(
      "uuid7_bytes",
      [] {
        const idem::Uuid id = idem::new_uuid_v7();
        return py::bytes(reinterpret_cast<const char*>(id.bytes().data()), id.bytes().size());
      },
      "16 bytes of a new UUIDv7 from the process's monotonic generator (RFC 9562).");

  idem::python::bind_store(module);
  idem::python::bind_outbox(module);
  idem::python::bind_consumer(module);
}
