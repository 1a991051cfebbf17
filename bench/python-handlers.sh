#!/usr/bin/env bash
# Python handlers on idem.App against the compiled count handler (bench/python_handlers.py)
# on a throwaway PostgreSQL made durable (fsync=on, full_page_writes=on: the driver turns
# them on, as bench/postgres_durable.hpp does for the C++ benchmarks, and prints them).
#
#   bench/python-handlers.sh [BUILD_DIR] [-- DRIVER ARGS...]
#
# BUILD_DIR (default build-rel) is a Release build with -DIDEM_PYTHON=ON and the targets
# idem-cli and idem_python. DRIVER ARGS go to the driver, e.g. --events 200000 --rounds 5
# --profile-dir /tmp/pyb-prof. shared_buffers is 512MB, as for the other benchmarks
# (IDEM_PG_SHARED_BUFFERS overrides it). Debian's python3 runs the driver and the apps:
# it has psycopg, confluent-kafka and the interpreter the module was built for.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-rel"
if [[ $# -gt 0 && "$1" != "--" ]]; then
  build="$(cd "$1" && pwd)"
  shift
fi
[[ "${1:-}" == "--" ]] && shift
for f in "$build/cli/idem" "$build/python/idem/__init__.py"; do
  [[ -e "$f" ]] || { echo "missing $f: build idem-cli and idem_python in $build" >&2; exit 2; }
done
export IDEM_PG_SHARED_BUFFERS="${IDEM_PG_SHARED_BUFFERS:-512MB}"
exec "$root/scripts/with-postgres.sh" /usr/bin/python3 "$root/bench/python_handlers.py" \
  --idem "$build/cli/idem" --pythonpath "$build/python" "$@"
