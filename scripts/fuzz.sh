#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang + ASan + UBSan) in a build directory of
# their own and runs each for SECONDS (default 60), IDEM_JOBS (2) at a time. Fails on the
# first crash, sanitizer report, leak or timeout; the input that caused it is left in
# <build>/artifacts/ (re-run it: <build>/fuzz/<target> <file>). Prints the executions
# and the corpus size of every target.
#
#   scripts/fuzz.sh [SECONDS]
#   scripts/fuzz.sh --build-only     only build the targets (scripts/test.sh, beside the tests)
#
# The seeds in fuzz/corpus/<name>/ are never written to: each target runs on a working
# corpus in <build>/corpus/<name>/ that starts from them and keeps growing across runs.
# IDEM_FUZZ_BUILD_DIR overrides the build directory (default: <repo>/build-fuzz).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build_only=0
if [ "${1:-}" = "--build-only" ]; then build_only=1; shift; fi
seconds="${1:-60}"
build="${IDEM_FUZZ_BUILD_DIR:-$root/build-fuzz}"
jobs="${IDEM_JOBS:-2}"
targets=(order_confirmed retry_headers config route_templates)

case "$seconds" in
  '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac

launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" \
  -DIDEM_BUILD_FUZZ=ON -DIDEM_BUILD_TESTS=OFF -DIDEM_BUILD_CLI=OFF -DIDEM_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j"$jobs" --target "${targets[@]/%/_fuzz}"
[ "$build_only" = 1 ] && exit 0

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
mkdir -p "$build/artifacts"
summary=()
# The targets run IDEM_JOBS at a time (one per core): each gets its SECONDS on a core of its
# own, as one after another would, in half the wall time on two cores.
start_target() {
  local name="$1" corpus="$build/corpus/$1" dict=()
  mkdir -p "$corpus"
  cp -n "$root/fuzz/corpus/$name/"* "$corpus/" 2>/dev/null || true
  if [ -f "$root/fuzz/$name.dict" ]; then dict=(-dict="$root/fuzz/$name.dict"); fi
  echo "fuzz: $name for $seconds s"
  "$build/fuzz/${name}_fuzz" "$corpus" "${dict[@]}" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$name-" >"$build/artifacts/$name.log" 2>&1 &
  running+=("$name:$!")
}
finish_target() {  # NAME:PID
  local name="${1%%:*}" pid="${1##*:}" status=0 log="$build/artifacts/${1%%:*}.log"
  wait "$pid" || status=$?
  if [ "$status" -ne 0 ]; then
    echo "fuzz: $name FAILED (exit $status); the end of its log ($log):" >&2
    tail -n 60 "$log" >&2
    exit 1
  fi
  local execs units bytes
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  units="$(find "$build/corpus/$name" -type f | wc -l)"
  bytes="$(du -sk "$build/corpus/$name" | cut -f1)"
  summary+=("$(printf '%-16s %12s executions in %4s s, corpus %6s inputs (%s KiB)' \
    "$name" "${execs:-?}" "$seconds" "$units" "$bytes")")
}
running=()
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT  # a failure leaves no fuzzer running
for name in "${targets[@]}"; do
  start_target "$name"
  if [ "${#running[@]}" -ge "$jobs" ]; then
    for run in "${running[@]}"; do finish_target "$run"; done
    running=()
  fi
done
for run in "${running[@]}"; do finish_target "$run"; done
echo "fuzz: no crash"
printf '  %s\n' "${summary[@]}"
