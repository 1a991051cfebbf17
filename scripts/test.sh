#!/usr/bin/env bash
# Builds idem with warnings as errors and runs every test (unit, integration,
# fault, packaging) against a throwaway PostgreSQL on 127.0.0.1 and the
# embedded Kafka-protocol broker, then the fuzz targets briefly. Used by .ci/run.
# Prints the time each step took. Extra arguments go to ctest (e.g. -L fault).
#
# IDEM_JOBS: build jobs (default 2). IDEM_TEST_JOBS: tests run at once (default 8): most
# tests wait on the mock cluster's group timing, a database or a child process rather
# than on the CPU, so many share two cores (docs/testing.md).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${IDEM_BUILD_DIR:-$root/build-test}"
jobs="${IDEM_JOBS:-2}"
test_jobs="${IDEM_TEST_JOBS:-8}"

started=$SECONDS
step_started=$SECONDS
step_done() {
  echo "test.sh: $1 took $((SECONDS - step_started)) s ($((SECONDS - started)) s in all)"
  step_started=$SECONDS
}

"$root/scripts/check-style.sh" --format-only  # clang-format drift fails before anything is built
"$root/scripts/check-size.sh"  # no source file over 600 lines, no class over 300 (tests exempt)
step_done "format and size checks"
# IDEM_BUILD_BENCH: the benchmark programs are compiled (never run here), so a change to
# an API they use fails the test command instead of rotting until the next measurement.
# They are compiled last, beside the tests and the fuzzing (below): nothing the tests run
# needs them, and those steps leave a core mostly idle.
# A unity build: each target compiles as a few translation units of up to 8 sources, so the
# headers every source includes (the standard library, fmt, GoogleTest, httplib, CLI11) are
# parsed a few times per target instead of once per source: less than half the CPU of
# one unit per source (docs/testing.md). A source must still compile on its own (builds
# without this flag, the fuzz build, clang-tidy's compile of each changed source).
# Debug information as line tables only (-g1): a crash's backtrace keeps its functions,
# files and lines, and a unit compiles in about 70% of the time full debug information
# takes (docs/testing.md). RelWithDebInfo otherwise, as users build it.
# What is built, for the build and for clang-tidy's commands (below).
project_options=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIDEM_BUILD_BENCH=ON -DIDEM_PYTHON=ON)
cmake -S "$root" -B "$build" "${project_options[@]}" -DIDEM_WERROR=ON -DCMAKE_UNITY_BUILD=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
cmake --build "$build" -j"$jobs" --target src/all cli/all tests/all examples/all python/all
step_done "build (all but the benchmarks)"

# The fuzz targets (clang, a build directory of their own), then clang-tidy on the sources
# changed by the last commit and the benchmark programs' compile, run while the tests run,
# at the lowest priority: the tests keep the CPU they ask for, and the rest take what they
# leave, which is most of it in the run's last minute (a few long fault scenarios
# waiting). The benchmarks' compile goes on while the fuzz targets run (one per core, ahead
# of it) and may outlast them; clang-tidy's findings are printed once the tests are done.
fuzz_log="$build/fuzz-build.log"
bench_log="$build/bench-build.log"
tidy_log="$build/clang-tidy.log"
setsid nice -n 19 "$root/scripts/fuzz.sh" --build-only >"$fuzz_log" 2>&1 &
fuzz_build=$!  # a process group of its own: stopped with its compilers if we end early
setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done  # after the fuzz build
  exec nice -n 19 cmake --build "$2" -j"$3" --target bench/all' bench_build "$fuzz_build" \
  "$build" "$jobs" >"$bench_log" 2>&1 &
bench_build=$!
# clang-tidy reads a source's own compile command, which a unity build's compile database
# lacks (it lists the generated unity sources): a second tree, configured without the unity
# build and never built, gives the commands.
tidy_commands="$build/tidy-commands"
setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done  # after the fuzz build
  nice -n 19 cmake -S "$2" -B "$3" "${@:4}" -DCMAKE_UNITY_BUILD=OFF >/dev/null &&
  exec nice -n 19 "$2/scripts/check-style.sh" "$3"' clang_tidy "$fuzz_build" "$root" \
  "$tidy_commands" "${project_options[@]}" >"$tidy_log" 2>&1 &
tidy=$!
trap 'kill -- "-$fuzz_build" "-$bench_build" "-$tidy" 2>/dev/null || true' EXIT
tests=0
"$root/scripts/with-postgres.sh" \
  ctest --test-dir "$build" --output-on-failure --timeout 900 -j"$test_jobs" "$@" || tests=$?
step_done "tests (ctest -j$test_jobs)"
fuzz_built=0
wait "$fuzz_build" || fuzz_built=$?
if [ "$fuzz_built" -ne 0 ]; then
  echo "test.sh: the fuzz build failed; its log ($fuzz_log):" >&2
  tail -n 60 "$fuzz_log" >&2
  exit 1
fi
[ "$tests" -eq 0 ] || exit "$tests"
"$root/scripts/fuzz.sh" 20  # the libFuzzer targets, briefly: 20 s each, one per core
step_done "fuzzing (the rest of its build, then 20 s per target, one per core)"
tidied=0
wait "$tidy" || tidied=$?
cat "$tidy_log"
if [ "$tidied" -ne 0 ]; then
  echo "test.sh: clang-tidy failed (log above)" >&2
  exit 1
fi
step_done "clang-tidy (the rest of it)"
bench_built=0
wait "$bench_build" || bench_built=$?
trap - EXIT
if [ "$bench_built" -ne 0 ]; then
  echo "test.sh: the benchmarks' build failed; its log ($bench_log):" >&2
  tail -n 60 "$bench_log" >&2
  exit 1
fi
step_done "the rest of the benchmarks' build"
