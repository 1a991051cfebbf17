#pragma once
// idem._idem.Consumer: idem's consumer configured and run as `idem consume` runs it
// (idem::ConsumerService: stop watchdog, maintenance, metrics, /readyz, routes declared in
// the file), with handlers written in Python; and idem._idem.HandlerTx, the transaction a
// Python handler gets (idem/_app.py puts the Python API on top of both).
#include <pybind11/pybind11.h>

namespace idem::python {

void bind_consumer(pybind11::module_& module);

}  // namespace idem::python
