#!/usr/bin/env bash
# The packaging test: installs idem into a scratch prefix, then configures, builds and
# runs an outside project that links only the core (find_package(idem), idem::idem):
# an exactly-once consumer against `idem dev-broker` (a separate process) and SQLite.
# Also checks the outside program's link line: the core brings no cpp-httplib,
# prometheus-cpp or toml++.
#   run_packaging_test.sh BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR IDEM_CLI
set -euo pipefail
build_dir=$1 source_dir=$2 work=$3 cli=$4
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build_dir" --prefix "$prefix" >/dev/null
cmake -S "$source_dir" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  -G "Unix Makefiles" >/dev/null
cmake --build "$work/build" -j2 >/dev/null

link_line=$(cat "$work/build/CMakeFiles/consumer.dir/link.txt")
for forbidden in httplib prometheus tomlplusplus; do
  if grep -q "$forbidden" <<<"$link_line"; then
    echo "FAIL: the outside project's link line names $forbidden:"
    echo "$link_line"
    exit 1
  fi
done
echo "link line: no cpp-httplib, prometheus-cpp or toml++"

broker_out=$work/broker.out
"$cli" dev-broker --topic deposits:2 --no-stdin >"$broker_out" 2>"$work/broker.err" &
broker=$!
trap 'kill "$broker" 2>/dev/null || true; wait "$broker" 2>/dev/null || true' EXIT
bootstrap=""
for _ in $(seq 1 300); do  # the broker prints its bootstrap servers once it is up
  bootstrap=$(grep -o '127\.0\.0\.1:[0-9]*\(,127\.0\.0\.1:[0-9]*\)*' "$broker_out" | head -n 1 || true)
  [ -n "$bootstrap" ] && break
  kill -0 "$broker" 2>/dev/null || { echo "FAIL: the dev broker exited"; cat "$work/broker.err"; exit 1; }
  sleep 0.1
done
[ -n "$bootstrap" ] || { echo "FAIL: the dev broker printed no bootstrap servers"; exit 1; }

"$work/build/consumer" "$bootstrap" deposits "$work/outside.db"
echo "outside project OK"
