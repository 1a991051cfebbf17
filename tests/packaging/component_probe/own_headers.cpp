// Built as a component is built (idem_component_include_root): its own private headers
// and the public ones are found. The control for private_core_header.cpp.
#include "idem/store.hpp"
#include "sinks/sink_event.hpp"

int idem_component_probe_own_headers() {
  return 0;
}
