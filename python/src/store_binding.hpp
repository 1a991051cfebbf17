#pragma once
// idem._idem.Store and idem._idem.Transaction: a store opened by URL and its
// transactions, as idem/store.hpp has them (idem/_store.py puts the Python API on top).
#include <pybind11/pybind11.h>

namespace idem::python {

void bind_store(pybind11::module_& module);

}  // namespace idem::python
