#!/bin/sh
# The layering check: dependencies between src/ modules point only
# downwards, and there is no cycle among them.
#
#   scripts/layering.sh [OBJ_DIR]        (default build/obj)
#
# A module is a folder of src/ (util, kernels, core, ops, train, apps/NAME,
# cli). From the compiled objects' defined and undefined global symbols
# (nm), module A depends on module B when an object of A uses a symbol that
# an object of B defines. The layers, bottom up:
#
#   util < kernels < core < ops < train < layers < apps < cli
#
# A module may use its own layer and the ones below: so the kernels use
# only util, and the engine (kernels, core, ops) never uses an app. Every
# edge that points up is printed with one symbol that makes it, and the
# exit status is 1. Files within one module may call each other freely.
set -eu
obj=${1:-build/obj}
if [ ! -d "$obj" ]; then
    echo "layering: no objects in $obj; run make first" >&2
    exit 2
fi
tmp=$(mktemp)
report=$(mktemp)
trap 'rm -f "$tmp" "$report"' EXIT
# one line per symbol: D|U module symbol
find "$obj" -name '*.o' ! -path '*/tests/*' | sort | while read -r o; do
    rel=${o#"$obj"/}
    case $rel in
    apps/*) mod=$(echo "$rel" | cut -d/ -f1-2) ;;
    */*) mod=${rel%%/*} ;;
    *) continue ;;
    esac
    nm -P --defined-only -g "$o" | awk -v m="$mod" '$2 != "U" { print "D", m, $1 }'
    nm -P -u "$o" | awk -v m="$mod" '{ print "U", m, $1 }'
done >"$tmp"
if [ ! -s "$tmp" ]; then
    echo "layering: no symbols found under $obj" >&2
    exit 2
fi
awk '
function rank(m) {
    sub(/\/.*/, "", m)
    if (m == "util") return 0
    if (m == "kernels") return 1
    if (m == "core") return 2
    if (m == "ops") return 3
    if (m == "train") return 4
    if (m == "layers") return 5
    if (m == "apps") return 6
    if (m == "cli") return 7
    return -1
}
$1 == "D" { def[$3] = $2; next }
$1 == "U" { use[NR] = $2 " " $3; next }
END {
    bad = 0
    for (i in use) {
        split(use[i], u, " ")
        from = u[1]; sym = u[2]
        if (!(sym in def)) continue       # libc, libm, pthreads
        to = def[sym]
        if (to == from) continue
        edge[from " -> " to] = sym
        if (rank(from) < 0 || rank(to) < 0) {
            printf "layering: unknown module in %s -> %s\n", from, to
            bad = 1
        } else if (rank(to) > rank(from) && !((from " " to) in told)) {
            printf "layering: %s uses %s (%s): a module may use only its own layer " \
                   "and those below\n", from, to, sym
            told[from " " to] = 1
            bad = 1
        }
    }
    # the module graph must be acyclic: take away modules that depend on no
    # remaining module, or that no remaining module depends on, until
    # nothing changes; what is left lies on a cycle
    for (e in edge) {
        split(e, p, " -> ")
        node[p[1]] = 1; node[p[2]] = 1
    }
    n = 0
    for (m in node) n++
    do {
        progress = 0
        for (m in node) {
            if (m in gone) continue
            out = 0; inn = 0
            for (e in edge) {
                split(e, p, " -> ")
                if (p[1] in gone || p[2] in gone) continue
                if (p[1] == m) out++
                if (p[2] == m) inn++
            }
            if (out == 0 || inn == 0) { gone[m] = 1; progress = 1 }
        }
    } while (progress)
    cyc = ""
    for (m in node) if (!(m in gone)) cyc = cyc " " m
    if (cyc != "") {
        printf "layering: a cycle among:%s\n", cyc
        bad = 1
    }
    if (!bad) {
        ne = 0
        for (e in edge) { print "  " e > "/dev/stderr"; ne++ }
        printf "layering: ok: %d modules, %d dependencies, all pointing down\n", n, ne
    }
    exit bad
}' "$tmp" 2>"$report" && rc=0 || rc=$?
sort "$report"
exit "$rc"
