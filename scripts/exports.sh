#!/bin/sh
# The shared library's interface check: libqkv.so exports the functions
# that the public headers declare and nothing else. The library's own
# helpers (qkv_gemm, qkv_malloc, ...) share the qkv_ prefix but are no
# part of the interface: exported, a program could link to them, and
# changing one would break it without a new soname.
#
#   scripts/exports.sh [LIB [CC]]        (default build/libqkv.so, cc)
#   scripts/exports.sh --public [CC]     the public names, one a line, for
#                                        the link's version script (Makefile)
set -u
# every qkv_ name in the headers, comments and macros left out; CC may
# carry flags (word-split on purpose)
public() {
    # shellcheck disable=SC2086
    $1 -E -P -Iinclude include/qkv.h | grep -o '\bqkv_[a-z0-9_]*\b' | LC_ALL=C sort -u
}
if [ "${1:-}" = --public ]; then
    public "${2:-cc}"
    exit
fi
lib=${1:-build/libqkv.so}
cc=${2:-cc}
if [ ! -f "$lib" ]; then
    echo "exports: no $lib; run make first" >&2
    exit 2
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
public "$cc" >"$tmp/public"
nm -D --defined-only "$lib" | awk 'NF == 3 { print $3 }' | LC_ALL=C sort -u >"$tmp/exported"
extra=$(LC_ALL=C comm -23 "$tmp/exported" "$tmp/public")
if [ -n "$extra" ]; then
    echo "exports: $lib exports $(echo "$extra" | wc -l) names no public header declares:" >&2
    echo "$extra" | sed 's/^/  /' >&2
    exit 1
fi
echo "exports: $lib exports $(wc -l <"$tmp/exported") names, each declared in include/"
