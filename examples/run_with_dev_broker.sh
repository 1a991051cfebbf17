#!/usr/bin/env bash
# Runs an example that needs a Kafka broker against `idem dev-broker`, started here as a
# separate process:  run_with_dev_broker.sh IDEM_CLI TOPIC[:PARTITIONS] PROGRAM [ARGS...]
# The program gets the bootstrap servers as its first argument.
set -euo pipefail
cli=$1 topic=$2 program=$3
shift 3
work=$(mktemp -d)
"$cli" dev-broker --topic "$topic" --no-stdin >"$work/broker.out" 2>"$work/broker.err" &
broker=$!
trap 'kill "$broker" 2>/dev/null || true; wait "$broker" 2>/dev/null || true; rm -rf "$work"' EXIT
bootstrap=""
for _ in $(seq 1 300); do  # the broker prints its bootstrap servers once it is up
  bootstrap=$(grep -o '127\.0\.0\.1:[0-9]*\(,127\.0\.0\.1:[0-9]*\)*' "$work/broker.out" | head -n 1 || true)
  [ -n "$bootstrap" ] && break
  kill -0 "$broker" 2>/dev/null || { echo "the dev broker exited:"; cat "$work/broker.err"; exit 1; }
  sleep 0.1
done
[ -n "$bootstrap" ] || { echo "the dev broker printed no bootstrap servers"; exit 1; }
"$program" "$bootstrap" "$@"
