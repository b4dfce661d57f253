#!/bin/sh
# Runs the Check suites of a test program as separate processes, JOBS at a
# time (default: the CPUs online), and prints each suite's report as it
# ends. Exits 1 if any suite fails or runs no checks (a suite name that
# CK_RUN_SUITE does not know), else 0.
#
#   scripts/suites.sh build/qkv_tests [SUITE ...]    (default: every suite)
#
# Environment such as QKV_KERNELS or TSAN_OPTIONS passes through.
set -u
bin=$1
shift
jobs=${JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}
HEAVY_SUITES=${HEAVY_SUITES:-cli faults torch gemm}
if [ $# -gt 0 ]; then
    list=$*
else
    list=$("$bin" --list) || { echo "suites: $bin --list failed" >&2; exit 1; }
    # Longest first, so that no long suite starts last while the other
    # workers sit idle: cli (about 70 s alone) and faults (about 40 s)
    # take three quarters of the whole, and listed bottom up they came
    # last, which made the run about 15 s longer on two cores.
    heavy=
    rest=
    for s in $list; do
        case " $HEAVY_SUITES " in
        *" $s "*) heavy="$heavy $s" ;;
        *) rest="$rest $s" ;;
        esac
    done
    ordered=
    for h in $HEAVY_SUITES; do # in HEAVY_SUITES's order
        case " $heavy " in *" $h "*) ordered="$ordered $h" ;; esac
    done
    list="$ordered $rest"
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
export bin tmp
# one suite: its report, and its name in $tmp/failed unless it ran checks
# and all passed ($list splits into names on purpose; the script in
# single quotes expands in the child shell)
# shellcheck disable=SC2086,SC2016
printf '%s\n' $list | xargs -P "$jobs" -I{} sh -c '
    CK_RUN_SUITE={} "$bin" >"$tmp/{}.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ] || ! grep -q "Checks: [1-9]" "$tmp/{}.log"; then
        echo "{} (exit $rc)" >>"$tmp/failed"
    fi
    cat "$tmp/{}.log"'
# a suite that never ran (xargs stopped early) left no report
for s in $list; do
    grep -q "Checks: " "$tmp/$s.log" 2>/dev/null || echo "$s (no report)" >>"$tmp/failed"
done
if [ -s "$tmp/failed" ]; then
    echo "suites: failed:" "$(tr '\n' ' ' <"$tmp/failed")" >&2
    exit 1
fi
# shellcheck disable=SC2086
echo "suites: all $(printf '%s\n' $list | wc -l) passed"
