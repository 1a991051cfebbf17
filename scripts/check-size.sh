#!/usr/bin/env bash
# Size limits of the library and CLI sources (tests and benchmarks are exempt):
# no source file over 600 lines, no class or struct body over 300 lines. A class body is
# measured from its `class|struct Name ... {` line to the `};` at the same indentation.
#   scripts/check-size.sh        prints offenders; exits 1 if there are any
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
while IFS= read -r f; do
  lines=$(wc -l <"$f")
  if [ "$lines" -gt 600 ]; then
    echo "check-size: $f has $lines lines (limit 600)"
    status=1
  fi
  awk -v file="$f" '
    match($0, /^( *)(class|struct) [A-Za-z_][A-Za-z0-9_]*[^;]*\{ *$/) {
      indent = substr($0, 1, RLENGTH); sub(/[^ ].*/, "", indent)
      depth++; start[depth] = NR; ind[depth] = indent; name[depth] = $0; next
    }
    depth > 0 && $0 == ind[depth] "};" {
      len = NR - start[depth]
      if (len > 300) { printf "check-size: %s:%d: class of %d lines (limit 300): %s\n", file, start[depth], len, name[depth]; bad = 1 }
      depth--
    }
    END { exit bad }' "$f" || status=1
done < <(git ls-files 'src/*.cpp' 'src/*.hpp' 'include/*.hpp' 'cli/*.cpp' 'cli/*.hpp')
[ "$status" = 0 ] && echo "check-size: every file <= 600 lines, every class <= 300 lines"
exit "$status"
