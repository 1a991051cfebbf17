// Built as a component is built: a private header of the core is not found, so this file
// must fail to compile (tests/packaging/component_include_test.sh checks that it does, and
// why).
#include "sinks/sink_event.hpp"
#include "stores/store_errors.hpp"

int idem_component_probe_private_core_header() {
  return 0;
}
