#!/usr/bin/env bash
# The newcomer example end to end, as the tests run it:  run.sh IDEM_CLI
# A Python service (producer.py) and a config file (balance.toml), nothing else: the
# service creates its tables and sends payments; `idem consume --config` applies each
# exactly once. Exits 77 (skipped) without python3-confluent-kafka, 1 under CI=true.
set -euo pipefail
cli=$1
here=$(cd "$(dirname "$0")" && pwd)
# The first python3 on PATH may be a pyenv or venv one without Debian's dist-packages.
py=""
for candidate in python3 /usr/bin/python3; do
  if "$candidate" -c "import confluent_kafka" 2>/dev/null; then py=$candidate; break; fi
done
if [ -z "$py" ]; then
  echo "python3-confluent-kafka is missing (apt-get install python3-confluent-kafka)"
  [ "${CI:-}" = true ] && exit 1
  exit 77
fi
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
"$cli" dev-broker --topic payments:3 --topic payments.dlq:1 --no-stdin >"$work/broker.out" 2>"$work/broker.err" &
pids+=($!)
bootstrap=""
for _ in $(seq 1 300); do
  bootstrap=$(grep -o '127\.0\.0\.1:[0-9]*' "$work/broker.out" | head -n 1 || true)
  [ -n "$bootstrap" ] && break
  sleep 0.1
done
[ -n "$bootstrap" ] || { echo "the dev broker printed no bootstrap servers"; cat "$work/broker.err"; exit 1; }
"$py" "$here/producer.py" setup "$work/service.db"
"$py" "$here/producer.py" send "$bootstrap" payments
"$cli" consume --config "$here/balance.toml" --db "sqlite://$work/service.db" --brokers "$bootstrap" \
  >"$work/consume.out" 2>&1 &
pids+=($!)
for _ in $(seq 1 600); do
  if "$py" "$here/producer.py" check "$work/service.db" >"$work/check.out" 2>&1; then
    cat "$work/check.out"
    exit 0
  fi
  sleep 0.1
done
cat "$work/check.out" "$work/consume.out"
exit 1
