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

# The outside program is the exactly-once consumer example, run against a dev broker.
bash "$(dirname "$0")/../../examples/run_with_dev_broker.sh" "$cli" deposits:2 \
  "$work/build/consumer" deposits "$work/outside.db"
echo "outside project OK"
