#!/bin/sh
# The style check that .ci/run runs: every C file follows .clang-format,
# and no line of code, script or Makefile is longer than 100 characters
# (counted as characters, not bytes, so Chinese text counts once).
#   scripts/style.sh            check; exit 1 and name the files that differ
#   scripts/style.sh --fix      reformat the C files in place
set -eu
cd "$(dirname "$0")/.."
cfiles=$(git ls-files '*.c' '*.h' | grep -v '^tests/data/')
if [ "${1:-}" = "--fix" ]; then
    clang-format --style=file -i $cfiles
    exit 0
fi
status=0
if command -v clang-format >/dev/null 2>&1; then
    for f in $cfiles; do
        if ! clang-format --style=file "$f" | cmp -s - "$f"; then
            echo "style: $f does not follow .clang-format (scripts/style.sh --fix)"
            status=1
        fi
    done
else
    echo "style: clang-format is not installed; skipping the format check" >&2
fi
long=$(git ls-files '*.c' '*.h' '*.sh' '*.gp' '*.py' Makefile .ci/run | grep -v '^tests/data/' |
    while read -r f; do
        LC_ALL=C sed 's/[\x80-\xbf]//g' "$f" | awk -v f="$f" 'length > 100 { print f ":" NR }'
    done)
if [ -n "$long" ]; then
    echo "style: lines over 100 characters:"
    echo "$long"
    status=1
fi
[ $status -eq 0 ] && echo "style: ok"
exit $status
