#!/usr/bin/env bash
# idem_bench_consumer of two builds (an older commit's and this one's) against one
# PostgreSQL server at fsync=on, full_page_writes=on, rounds interleaved (old, new, new,
# old, old, new, ...) so load changes on a shared machine hit both alike; prints the median and
# the best round of every row per build, with the load average when the best round started.
#
#   scripts/with-postgres.sh bench/consumer-before-after.sh OLD_BENCH NEW_BENCH [ROUNDS] [-- ARGS...]
#
# ARGS go to both binaries (e.g. --events 200000 --batch1-events 5000 --handlers count).
# OLD_ONLY / NEW_ONLY (default c / a,c,d) pick each binary's configurations (--only); the
# new one also gets --repeat 1 --backends postgres, which an old binary may not know. The
# old binary need not know about durability either: the server is made durable here first
# (ALTER SYSTEM persists for the life of the throwaway cluster).
set -euo pipefail
old="$1"
new="$2"
rounds="${3:-3}"
shift 3 || shift $#
[[ "${1:-}" == "--" ]] && shift
: "${IDEM_TEST_PG_DSN:?run under scripts/with-postgres.sh}"

psql() { "$IDEM_TEST_PG_BIN/psql" -X -q -At "$IDEM_TEST_PG_DSN" "$@"; }
psql -c "ALTER SYSTEM SET fsync = on" -c "ALTER SYSTEM SET full_page_writes = on" \
  -c "SELECT pg_reload_conf()" >/dev/null
sleep 1
echo "postgres: fsync=$(psql -c 'SHOW fsync') full_page_writes=$(psql -c 'SHOW full_page_writes')" \
  "synchronous_commit=$(psql -c 'SHOW synchronous_commit') shared_buffers=$(psql -c 'SHOW shared_buffers')"
echo "start: $(uptime)"

log="$(mktemp)"
trap 'rm -f "$log" "$log.run"' EXIT
for ((r = 1; r <= rounds; r++)); do
  # Which build goes first alternates, so a load that falls (or rises) through the run
  # does not favour the build that always runs second.
  order="old new"
  ((r % 2 == 0)) && order="new old"
  for which in $order; do
    args=(--only "${OLD_ONLY:-c}")
    bin="$old"
    if [[ "$which" == new ]]; then
      bin="$new"
      args=(--only "${NEW_ONLY:-a,c,d}" --repeat 1 --backends postgres)
    fi
    load="$(cut -d' ' -f1 /proc/loadavg)"
    echo "== round $r, $which ($bin), load $load"
    # One line per run: "<which> <load> <the bench's own line>" (the new bench's line
    # has the load at the start of that run itself, which wins below).
    if ! "$bin" "${args[@]}" "$@" >"$log.run" 2>&1; then
      echo "$which failed:" >&2
      tail -5 "$log.run" >&2
    fi
    cat "$log.run"
    grep ' ev/s' "$log.run" | sed "s|^|$which $load |" >>"$log" || true
  done
done
echo "end: $(uptime)"

# Best round per (build, config, handler, batch).
python3 - "$log" <<'EOF'
import re, sys
best = {}
order = []
for line in open(sys.argv[1]):
    which, load, rest = line.split(' ', 2)
    m = re.match(r'\s*(.+?)\s{2,}(\S+)\s+(\d+)\s+(\d+) ev\s+\S+ s\s+(\d+) ev/s', rest)
    if not m:
        continue
    config, handler, batch, events, rate = m.groups()
    own = re.search(r' load (\d+\.\d+) ', rest)
    if own:
        load = own.group(1)
    key = (which, config, handler, int(batch))
    if key not in best:
        order.append(key)
        best[key] = []
    best[key].append((int(rate), float(load), int(events)))
print("\n| build | config | handler | batch | events | events/s (median) | events/s (best) | every round | load at best |")
print("|---|---|---|---:|---:|---:|---:|---|---:|")
for key in sorted(order, key=lambda k: (k[3], k[1], k[2], k[0])):
    runs = best[key]
    b = max(runs)
    rates = sorted(r[0] for r in runs)
    mid = len(rates) // 2
    median = rates[mid] if len(rates) % 2 else (rates[mid - 1] + rates[mid]) // 2
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {b[2]} | {median} | {b[0]} | "
          f"{' / '.join(str(r[0]) for r in runs)} | {b[1]:.2f} |")
EOF
