#pragma once
// idem._idem.prepare_outbox_row and OUTBOX_INSERT: the outbox row of idem/outbox.hpp,
// made by the core (the id, the shard, the headers) for a service that inserts it through
// its own database connection (idem/outbox.py).
#include <pybind11/pybind11.h>

namespace idem::python {

void bind_outbox(pybind11::module_& module);

}  // namespace idem::python
