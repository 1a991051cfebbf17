#pragma once
// idem._idem.prepare_outbox_row and OUTBOX_INSERT: the outbox row of idem/outbox.hpp,
// made by the core (the id, the shard, the headers) for a service that inserts it through
// its own database connection (idem/outbox.py).
#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "idem/outbox.hpp"

namespace idem::python {

/// What Outbox::enqueue and Outbox::prepare call for a message made in Python: the payload
/// is made once the id is born (`payload(uuid.UUID)` returns its text), so that the event
/// can carry its own id. Called with the GIL held.
[[nodiscard]] OutboxEventFactory outbox_factory(
    std::string topic, std::string aggregate_type, std::string aggregate_id,
    pybind11::function payload, std::vector<std::pair<std::string, std::string>> headers,
    std::optional<std::string> message_key);

void bind_outbox(pybind11::module_& module);

}  // namespace idem::python
