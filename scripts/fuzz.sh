#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang + ASan + UBSan) in a build directory of
# their own and runs each for SECONDS (default 60), one after another. Fails on the
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
for name in "${targets[@]}"; do
  corpus="$build/corpus/$name"
  mkdir -p "$corpus"
  cp -n "$root/fuzz/corpus/$name/"* "$corpus/" 2>/dev/null || true
  dict=()
  if [ -f "$root/fuzz/$name.dict" ]; then dict=(-dict="$root/fuzz/$name.dict"); fi
  log="$build/artifacts/$name.log"
  echo "fuzz: $name for $seconds s"
  status=0
  "$build/fuzz/${name}_fuzz" "$corpus" "${dict[@]}" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$name-" >"$log" 2>&1 || status=$?
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  units="$(find "$corpus" -type f | wc -l)"
  bytes="$(du -sk "$corpus" | cut -f1)"
  if [ "$status" -ne 0 ]; then
    echo "fuzz: $name FAILED (exit $status); the end of its log ($log):" >&2
    tail -n 60 "$log" >&2
    exit 1
  fi
  summary+=("$(printf '%-16s %12s executions in %4s s, corpus %6s inputs (%s KiB)' \
    "$name" "${execs:-?}" "$seconds" "$units" "$bytes")")
done
echo "fuzz: no crash"
printf '  %s\n' "${summary[@]}"
