#!/usr/bin/env bash
# Adds a synchronous streaming standby to the throwaway cluster of scripts/with-postgres.sh,
# then runs a command (a benchmark) against the primary:
#
#   scripts/with-postgres.sh bench/with-sync-standby.sh build/bench/idem_bench_relay 100000
#
# The standby is a pg_basebackup of the primary, in a directory of its own beside the
# primary's, on another free loopback port, with application_name bench_standby; the
# primary then names it in synchronous_standby_names, so every COMMIT waits for the
# standby's flush (synchronous_commit = on). Both servers flush for real (fsync on,
# full_page_writes on): the figures are those of a durable pair. The standby is stopped
# and its directory removed on every exit path; with-postgres.sh removes the primary.
#
# What it is for: the relay's publish_after = replicated waits until a batch's commits are
# flushed on the standbys. With a synchronous standby that is already true when COMMIT
# returns, so the wait should cost nothing; bench_relay measures both settings in the
# same run when the primary has a synchronous standby.
set -euo pipefail

log() { echo "with-sync-standby: $*" >&2; }

if [[ $# -eq 0 || -z "${IDEM_TEST_PG_DATA:-}" ]]; then
  echo "usage: scripts/with-postgres.sh $0 CMD [ARGS...]" >&2
  exit 2
fi

PG_BIN="$IDEM_TEST_PG_BIN"
PRIMARY_PORT="$IDEM_TEST_PG_PORT"
STANDBY_DIR="$(dirname "$IDEM_TEST_PG_DATA")/standby"

as_owner() {
  if [[ -n "${IDEM_TEST_PG_RUN_AS:-}" ]]; then
    (cd "$(dirname "$STANDBY_DIR")" && runuser -u "$IDEM_TEST_PG_RUN_AS" -- "$@")
  else
    (cd "$(dirname "$STANDBY_DIR")" && "$@")
  fi
}
primary_sql() {
  "$PG_BIN/psql" -X -q -At -h 127.0.0.1 -p "$PRIMARY_PORT" -U postgres -d postgres \
    -v ON_ERROR_STOP=1 -c "$1"
}

STARTED=0
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [[ "$STARTED" -eq 1 ]]; then
    # The primary would wait forever for a standby that is gone: stop naming it first.
    primary_sql "ALTER SYSTEM RESET synchronous_standby_names" >/dev/null 2>&1 || true
    primary_sql "SELECT pg_reload_conf()" >/dev/null 2>&1 || true
    as_owner "$PG_BIN/pg_ctl" -D "$STANDBY_DIR" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
  fi
  rm -rf "$STANDBY_DIR"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The base backup copies the primary's postgresql.conf, fsync = off included: the
# standby's flushes are switched back on below, the primary's here (a reload applies both).
primary_sql "ALTER SYSTEM SET fsync = on" >/dev/null
primary_sql "ALTER SYSTEM SET full_page_writes = on" >/dev/null
primary_sql "SELECT pg_reload_conf()" >/dev/null

# -R writes standby.signal and primary_conninfo (with the application_name given here).
as_owner "$PG_BIN/pg_basebackup" -D "$STANDBY_DIR" -X stream -R -c fast \
  -d "host=127.0.0.1 port=$PRIMARY_PORT user=postgres application_name=bench_standby"

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") >/dev/null 2>&1; }
STANDBY_PORT=""
for attempt in 1 2 3 4 5; do
  candidate=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
  port_in_use "$candidate" && continue
  if as_owner "$PG_BIN/pg_ctl" -D "$STANDBY_DIR" -l "$STANDBY_DIR/server.log" -w -t 60 \
       -o "-p $candidate -c fsync=on -c full_page_writes=on -c unix_socket_directories=$STANDBY_DIR" \
       start >/dev/null 2>&1; then
    STANDBY_PORT="$candidate"
    STARTED=1
    break
  fi
  log "standby did not start on port $candidate (attempt $attempt)"
done
if [[ -z "$STANDBY_PORT" ]]; then
  log "could not start the standby; its log:"
  cat "$STANDBY_DIR/server.log" >&2 || true
  exit 2
fi

# Streaming before the primary names it: otherwise the first commits would wait for it.
for _ in $(seq 1 600); do
  [[ "$(primary_sql "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'bench_standby' AND state = 'streaming'")" == 1 ]] && break
  sleep 0.1
done
primary_sql "ALTER SYSTEM SET synchronous_standby_names = 'bench_standby'" >/dev/null
primary_sql "SELECT pg_reload_conf()" >/dev/null
for _ in $(seq 1 600); do
  [[ "$(primary_sql "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'bench_standby'")" == sync ]] && break
  sleep 0.1
done
log "synchronous standby bench_standby streaming on port $STANDBY_PORT ($(primary_sql "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'bench_standby'"))"

set +e
"$@" <&0 &
CHILD=$!
trap 'kill -TERM "$CHILD" 2>/dev/null' TERM
trap 'kill -INT "$CHILD" 2>/dev/null' INT
wait "$CHILD"
status=$?
wait "$CHILD" 2>/dev/null
exit "$status"
