#!/usr/bin/env bash
# Runs a command against the scripts/with-postgres.sh server after making every commit
# wait DELAY_US microseconds (default 2000) before its WAL flush (commit_delay, with
# commit_siblings = 0 so the delay applies to every commit): a stand-in for storage
# whose flush is slower than this machine's (network disks). Used for the "slower
# flush" rows of bench/RESULTS.md; the settings persist for the life of the throwaway
# cluster only.
#
#   DELAY_US=2000 scripts/with-postgres.sh bench/with-slow-flush.sh CMD [ARGS...]
set -euo pipefail
: "${IDEM_TEST_PG_DSN:?run under scripts/with-postgres.sh}"
psql() { "$IDEM_TEST_PG_BIN/psql" -X -q -At "$IDEM_TEST_PG_DSN" "$@"; }
psql -c "ALTER SYSTEM SET commit_delay = ${DELAY_US:-2000}" -c "ALTER SYSTEM SET commit_siblings = 0" \
  -c "SELECT pg_reload_conf()" >/dev/null
# pg_reload_conf() signals the postmaster; new sessions read the file after it handled it.
until [[ "$(psql -c 'SHOW commit_delay')" == "${DELAY_US:-2000}" ]]; do sleep 0.1; done
echo "postgres: commit_delay=$(psql -c 'SHOW commit_delay') commit_siblings=$(psql -c 'SHOW commit_siblings')"
exec "$@"
