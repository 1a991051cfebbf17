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

# Every component is exported with what it needs: a project asking for each of them (and
# only naming console and sinks, which bring metrics and http) configures, and its
# targets resolve.
mkdir -p "$work/components"
cat >"$work/components/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.23)
project(idem_outside_components LANGUAGES CXX)
find_package(idem 0.1 REQUIRED COMPONENTS console sinks reference devtools)
add_library(every_component INTERFACE)
target_link_libraries(every_component INTERFACE idem::console idem::sinks idem::reference
                      idem::devtools idem::metrics idem::http)
CMAKE
cmake -S "$work/components" -B "$work/components/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -G "Unix Makefiles" >/dev/null
echo "components: console, sinks, reference, devtools, metrics and http found"

# The outside program is the exactly-once consumer example, run against a dev broker.
bash "$(dirname "$0")/../../examples/run_with_dev_broker.sh" "$cli" deposits:2 \
  "$work/build/consumer" deposits "$work/outside.db"
echo "outside project OK"
