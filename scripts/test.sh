#!/usr/bin/env bash
# Builds idem with warnings as errors and runs every test (unit, integration,
# fault, packaging) against a throwaway PostgreSQL on 127.0.0.1 and the
# embedded Kafka-protocol broker. Used by .ci/run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${IDEM_BUILD_DIR:-$root/build-test}"
jobs="${IDEM_JOBS:-2}"

"$root/scripts/check-style.sh" --format-only  # clang-format drift fails before anything is built
"$root/scripts/check-size.sh"  # no source file over 600 lines, no class over 300 (tests exempt)
# IDEM_BUILD_BENCH: the benchmark programs are compiled (never run here), so a change to
# an API they use fails the test command instead of rotting until the next measurement.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIDEM_WERROR=ON \
  -DIDEM_BUILD_BENCH=ON
cmake --build "$build" -j"$jobs"
"$root/scripts/check-style.sh" "$build"  # clang-tidy on the sources changed by the last commit
"$root/scripts/with-postgres.sh" \
  ctest --test-dir "$build" --output-on-failure --timeout 900 -j"$jobs" "$@"
"$root/scripts/fuzz.sh" 20  # the libFuzzer targets, briefly: about a minute (clang, own build dir)
