#!/bin/sh
# The public headers check: each header under include/ compiles on its own
# (it includes what it needs) as strict C11, and as strict C++11 when a C++
# compiler is present, since the headers promise extern "C" use from C++.
#
#   scripts/headers.sh [CC [CXX]]        (default cc, c++)
set -u
cc=${1:-cc}
cxx=${2:-c++}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
have_cxx=0
command -v "$cxx" >/dev/null 2>&1 && have_cxx=1
fail=0
n=0
for h in $(find include -name '*.h' | sort); do
    n=$((n + 1))
    printf '#include "%s"\nint main(void) { return 0; }\n' "$PWD/$h" >"$tmp/h.c"
    if ! "$cc" -std=c11 -pedantic-errors -Wall -Wextra -Werror -Iinclude -fsyntax-only \
        "$tmp/h.c" 2>"$tmp/err"; then
        echo "headers: $h is not strict C11 on its own:" >&2
        cat "$tmp/err" >&2
        fail=1
    fi
    [ "$have_cxx" = 1 ] || continue
    printf '#include "%s"\nint main() { return 0; }\n' "$PWD/$h" >"$tmp/h.cpp"
    if ! "$cxx" -std=c++11 -pedantic-errors -Wall -Wextra -Werror -Iinclude -fsyntax-only \
        "$tmp/h.cpp" 2>"$tmp/err"; then
        echo "headers: $h is not strict C++11:" >&2
        cat "$tmp/err" >&2
        fail=1
    fi
done
if [ "$have_cxx" = 1 ]; then
    langs="C11 and C++11 ($cxx)"
else
    langs="C11 (no C++ compiler: $cxx not found)"
fi
[ "$fail" = 0 ] && echo "headers: all $n compile alone as strict $langs"
exit "$fail"
