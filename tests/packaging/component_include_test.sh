#!/usr/bin/env bash
# A component sees the core through its public headers only: built as a component is
# built, a source that includes its own private headers compiles, and one that includes a
# private header of the core fails, for that reason.
#   component_include_test.sh BUILD_DIR
set -euo pipefail
build="$1"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
cmake --build "$build" --target idem_component_probe_own_headers >"$out" 2>&1 || {
  cat "$out"
  echo "FAIL: a component's own private headers were not found" >&2
  exit 1
}
if cmake --build "$build" --target idem_component_probe_private_core_header >"$out" 2>&1; then
  echo "FAIL: a component included a private header of the core and the build went on" >&2
  exit 1
fi
if ! grep -q 'stores/store_errors.hpp: No such file or directory' "$out"; then
  cat "$out"
  echo "FAIL: the build failed for another reason than the private header" >&2
  exit 1
fi
echo "ok: a private header of the core fails a component's build"
