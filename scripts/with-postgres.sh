#!/usr/bin/env bash
# Runs a command against a throwaway PostgreSQL cluster, then removes the cluster.
#
#   scripts/with-postgres.sh CMD [ARGS...]
#
# The cluster lives in a fresh temporary directory, listens on 127.0.0.1 on a free
# port (and on a unix socket inside that directory), trusts local connections, and
# has a database `idem_test`. CMD runs with:
#
#   IDEM_TEST_PG_DSN=postgresql://postgres@127.0.0.1:PORT/idem_test
#   IDEM_TEST_PG_BIN=<PostgreSQL bin dir>     (pg_ctl, postgres, ...)
#   IDEM_TEST_PG_DATA=<data dir>              so a test may stop/restart the server
#   IDEM_TEST_PG_PORT=PORT
#   IDEM_TEST_PG_SOCKET_DIR=<unix socket dir>
#   IDEM_TEST_PG_RUN_AS=postgres|""           prefix for pg_ctl: `runuser -u $IDEM_TEST_PG_RUN_AS --`
#                                             when non-empty (we run as root), else run directly
#
# IDEM_PG_SHARED_BUFFERS sets the server's shared_buffers (default 64MB, enough for the
# tests). Benchmarks use 512MB, closer to a production server: with 64MB a 100,000-row
# outbox and its new row versions outgrow the buffer pool, and every run pays for reads
# and writes through the kernel.
#
# The script exits with CMD's status; the cluster is stopped and its directory
# removed on every exit path (normal exit, failure, SIGINT, SIGTERM).
#
# Works as root (PostgreSQL refuses to run as root, so the server runs as the
# `postgres` user through runuser) and as an ordinary user (then no runuser).
set -euo pipefail

if [[ $# -eq 0 ]]; then
  echo "usage: $0 CMD [ARGS...]" >&2
  exit 2
fi

log() { echo "with-postgres: $*" >&2; }

# --- locate the server binaries ----------------------------------------------
find_bindir() {
  local d
  if [[ -n "${IDEM_PG_BINDIR:-}" && -x "${IDEM_PG_BINDIR}/initdb" ]]; then
    echo "${IDEM_PG_BINDIR}"; return 0
  fi
  # pg_config may come from libpq-dev alone; it only counts if initdb is beside it.
  if command -v pg_config >/dev/null 2>&1; then
    d="$(pg_config --bindir 2>/dev/null || true)"
    if [[ -n "$d" && -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
      echo "$d"; return 0
    fi
  fi
  # Debian layout; the highest installed major version wins.
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4,4 -n -r); do
    if [[ -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
      echo "$d"; return 0
    fi
  done
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v initdb)"; return 0
  fi
  return 1
}

if ! PG_BIN="$(find_bindir)"; then
  log "no PostgreSQL server binaries found (tried pg_config --bindir, /usr/lib/postgresql/*/bin, PATH)"
  exit 2
fi

# --- run the server as a non-root user ----------------------------------------
RUN_AS=""
if [[ "$(id -u)" -eq 0 ]]; then
  RUN_AS="${IDEM_PG_RUN_AS:-postgres}"
  if ! id -u "$RUN_AS" >/dev/null 2>&1; then
    log "running as root but user '$RUN_AS' does not exist (PostgreSQL refuses to run as root)"
    exit 2
  fi
fi

# The server user must be able to reach the directory (a TMPDIR under /root would
# not do), and the unix socket path inside it must stay short (about 100 bytes max).
TMP_BASE="${TMPDIR:-/tmp}"
if [[ -n "$RUN_AS" ]] && ! runuser -u "$RUN_AS" -- test -w "$TMP_BASE" 2>/dev/null; then
  TMP_BASE=/tmp
fi
if [[ ${#TMP_BASE} -gt 60 ]]; then
  TMP_BASE=/tmp
fi
TMP_DIR="$(mktemp -d "$TMP_BASE/idem-pg.XXXXXX")"
PG_DATA="$TMP_DIR/data"
PG_LOG="$TMP_DIR/server.log"
if [[ -n "$RUN_AS" ]]; then
  chown "$RUN_AS" "$TMP_DIR"
fi

# Runs a PostgreSQL tool as the cluster owner, from a directory that user can read
# (initdb and pg_ctl complain when started in a cwd they cannot access, e.g. /root).
as_owner() {
  if [[ -n "$RUN_AS" ]]; then
    (cd "$TMP_DIR" && runuser -u "$RUN_AS" -- "$@")
  else
    (cd "$TMP_DIR" && "$@")
  fi
}

STARTED=0
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [[ "$STARTED" -eq 1 ]]; then
    # Immediate mode: nothing in a throwaway cluster needs a clean shutdown.
    as_owner "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
  fi
  rm -rf "$TMP_DIR"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- create the cluster --------------------------------------------------------
# --no-sync: the cluster is thrown away, so initdb need not flush its files.
if ! as_owner "$PG_BIN/initdb" -D "$PG_DATA" -U postgres -E UTF8 --no-locale \
     --auth-local=trust --auth-host=trust --no-sync >"$TMP_DIR/initdb.log" 2>&1; then
  log "initdb failed:"
  cat "$TMP_DIR/initdb.log" >&2
  exit 2
fi

# Only loopback and the private socket are reachable, so trust auth is safe here.
cat >>"$PG_DATA/postgresql.conf" <<EOF

# --- settings written by scripts/with-postgres.sh ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$TMP_DIR'
max_connections = 200
# fsync only matters when the operating system crashes: killed server or client
# processes (what the crash tests do) lose nothing that reached the OS page cache.
# The throwaway cluster never outlives an OS crash, so skip the flushes for speed.
# synchronous_commit stays on, so a COMMIT still waits for its WAL write and the
# commit semantics the tests observe are the production ones.
fsync = off
synchronous_commit = on
full_page_writes = off
shared_buffers = ${IDEM_PG_SHARED_BUFFERS:-64MB}
max_locks_per_transaction = 256
log_min_messages = warning
log_min_error_statement = panic
log_connections = off
log_disconnections = off
EOF

# --- start it on a free port ---------------------------------------------------
port_in_use() {
  # A connect() that succeeds means someone listens there.
  (exec 3<>"/dev/tcp/127.0.0.1/$1") >/dev/null 2>&1
}

PORT=""
for attempt in 1 2 3 4 5 6 7 8 9 10; do
  candidate=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
  if port_in_use "$candidate"; then
    continue
  fi
  if as_owner "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t 30 \
       -o "-p $candidate" start >/dev/null 2>&1; then
    PORT="$candidate"
    STARTED=1
    break
  fi
  # Another process may have taken the port between the check and the start.
  log "server did not start on port $candidate (attempt $attempt), trying another"
  as_owner "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -w -t 10 stop >/dev/null 2>&1 || true
done
if [[ -z "$PORT" ]]; then
  log "could not start PostgreSQL; server log:"
  cat "$PG_LOG" >&2 || true
  exit 2
fi

if ! "$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$PORT" -U postgres -d postgres \
     -v ON_ERROR_STOP=1 -c "CREATE DATABASE idem_test" >/dev/null; then
  log "could not create database idem_test"
  exit 2
fi

export IDEM_TEST_PG_DSN="postgresql://postgres@127.0.0.1:$PORT/idem_test"
export IDEM_TEST_PG_BIN="$PG_BIN"
export IDEM_TEST_PG_DATA="$PG_DATA"
export IDEM_TEST_PG_PORT="$PORT"
export IDEM_TEST_PG_SOCKET_DIR="$TMP_DIR"
export IDEM_TEST_PG_RUN_AS="$RUN_AS"
log "$("$PG_BIN/postgres" --version) ready at $IDEM_TEST_PG_DSN"

# Not exec: the EXIT trap must still stop the server and remove the directory.
# CMD runs in the background so a SIGTERM/SIGINT sent to this script is handled
# at once (bash runs traps only between foreground commands) and forwarded to it.
# `<&0` keeps our stdin: a background command would otherwise read /dev/null.
set +e
"$@" <&0 &
CHILD=$!
trap 'kill -TERM "$CHILD" 2>/dev/null' TERM
trap 'kill -INT "$CHILD" 2>/dev/null' INT
while :; do
  wait "$CHILD"
  status=$?
  # wait returns early (status > 128) when a trapped signal arrives; go on
  # waiting until CMD itself has ended.
  kill -0 "$CHILD" 2>/dev/null || break
done
set -e
exit "$status"
