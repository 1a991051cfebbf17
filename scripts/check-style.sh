#!/usr/bin/env bash
# Style checks of the test command (scripts/test.sh):
#  1. clang-format: every tracked C++ file must already be formatted with the repo's
#     .clang-format; any drift fails (fix with `scripts/check-style.sh --fix`).
#  2. clang-tidy with the repo's .clang-tidy on the C++ sources changed since
#     IDEM_TIDY_BASE (default: the previous commit), using BUILD_DIR's
#     compile_commands.json (at most IDEM_TIDY_MAX_FILES of them, default 8). Its findings
#     are printed; IDEM_TIDY_STRICT=1 makes them fail.
#   scripts/check-style.sh [--fix | --format-only] [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
fix=0
format_only=0
if [ "${1:-}" = "--fix" ]; then fix=1; shift; fi
if [ "${1:-}" = "--format-only" ]; then format_only=1; shift; fi
build="${1:-${IDEM_BUILD_DIR:-$root/build-test}}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

mapfile -t files < <(git ls-files '*.cpp' '*.hpp')
if [ "$fix" = 1 ]; then
  clang-format -i "${files[@]}"
  echo "check-style: formatted ${#files[@]} files"
  exit 0
fi
if ! clang-format --dry-run -Werror "${files[@]}" 2>"$log"; then
  echo "check-style: clang-format drift (run scripts/check-style.sh --fix):"
  grep -o '^[^:]*:[0-9]*:[0-9]*: error' "$log" | cut -d: -f1 | sort -u | sed 's/^/  /'
  exit 1
fi
echo "check-style: clang-format: ${#files[@]} files formatted"
[ "$format_only" = 1 ] && exit 0

base="${IDEM_TIDY_BASE:-HEAD~1}"
if ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
  echo "check-style: clang-tidy: no base commit $base; nothing to check"
  exit 0
fi
mapfile -t changed < <(git diff --name-only --diff-filter=AM "$base" -- 'src/*.cpp' 'cli/*.cpp' \
                       'src/**/*.cpp' 'cli/**/*.cpp')
if [ ${#changed[@]} -eq 0 ]; then
  echo "check-style: clang-tidy: no C++ source changed since $base"
  exit 0
fi
# clang-tidy takes 10-30 s a file on this 2-core machine: a commit that touches many files
# (a tree-wide rename or reformat) is checked on its first IDEM_TIDY_MAX_FILES files only.
max_files="${IDEM_TIDY_MAX_FILES:-8}"
if [ ${#changed[@]} -gt "$max_files" ]; then
  echo "check-style: clang-tidy: ${#changed[@]} sources changed since $base; checking the first $max_files"
  changed=("${changed[@]:0:$max_files}")
fi
if [ ! -f "$build/compile_commands.json" ]; then
  echo "check-style: clang-tidy needs $build/compile_commands.json (configure first)"
  exit 1
fi
findings=0
for f in "${changed[@]}"; do
  out=$(clang-tidy -p "$build" --quiet "$f" 2>/dev/null || true)
  if grep -q 'warning:\|error:' <<<"$out"; then
    findings=$((findings + 1))
    printf '%s\n' "$out" | grep -A3 'warning:\|error:' | head -n 40
  fi
done
echo "check-style: clang-tidy: ${#changed[@]} changed files since $base, $findings with findings"
if [ "${IDEM_TIDY_STRICT:-0}" = 1 ] && [ "$findings" -gt 0 ]; then exit 1; fi
