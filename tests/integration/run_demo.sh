#!/bin/sh
# CTest's `idem demo` runs, at a small scale. Usage: run_demo.sh IDEM sqlite|postgres [demo flags...]
# postgres: on the server of IDEM_TEST_PG_DSN (scripts/with-postgres.sh), in a database
# of its own that is dropped afterwards, so the demo's relay and audit see only its rows.
# Without IDEM_TEST_PG_DSN it skips (77), or fails under CI=true.
set -u
idem=$1
backend=$2
shift 2
case $backend in
  sqlite) exec "$idem" demo "$@" ;;
  postgres) ;;
  *) echo "run_demo.sh: unknown backend '$backend'" >&2; exit 2 ;;
esac
if [ -z "${IDEM_TEST_PG_DSN:-}" ]; then
  [ "${CI:-}" = true ] && { echo "IDEM_TEST_PG_DSN is not set" >&2; exit 1; }
  exit 77
fi
case $IDEM_TEST_PG_DSN in
  postgresql://*/*) ;;
  *) echo "run_demo.sh: IDEM_TEST_PG_DSN must be a postgresql://.../dbname URI" >&2; exit 2 ;;
esac
db="idem_demo_$$"
url="${IDEM_TEST_PG_DSN%/*}/$db"
psql -X -q -v ON_ERROR_STOP=1 "$IDEM_TEST_PG_DSN" -c "CREATE DATABASE $db" || exit 1
"$idem" demo --db "$url" "$@"
rc=$?
psql -X -q "$IDEM_TEST_PG_DSN" -c "DROP DATABASE $db WITH (FORCE)" >/dev/null || true
exit $rc
