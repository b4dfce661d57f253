#!/bin/sh
# Render every qkv plot that its CSV input exists for.
#
#   scripts/plots.sh [DATA_DIR [PLOT_DIR [NAME...]]]   (defaults: out, DATA_DIR/plots)
#
# With NAMEs (loss, saturation, ..., softmax_base), only those plots.
#
# Inputs, and the command that makes each:
#   DATA_DIR/train.csv                 qkv train                      -> loss.png
#   DATA_DIR/saturation/runs.csv       qkv saturation                 -> saturation.png
#   DATA_DIR/saturation-adam/runs.csv  qkv saturation --optim adam    -> saturation_adam.png
#   DATA_DIR/saturation/variance.csv   qkv saturation                 -> variance.png
#   DATA_DIR/heatmap.csv               qkv resolve --csv ... "句子"    -> heatmap.png
#   DATA_DIR/softmax.csv               qkv softmax --csv ...          -> softmax.png
#   DATA_DIR/distance/summary.csv      qkv distance                   -> distance.png
#   DATA_DIR/bptt/grads.csv            qkv bptt                       -> bptt.png
#   DATA_DIR/parallel/steps.csv        qkv parallel                   -> parallel.png
#   DATA_DIR/ablate/summary.csv        qkv ablate                     -> ablate.png
#   (and DATA_DIR/ablate-roles/summary.csv from qkv ablate --task roles, if there)
#   DATA_DIR/softmax.csv with base_2,base_e,base_10 columns (qkv softmax --base 2,e,10)
#   and DATA_DIR/ablate/curves.csv                                    -> softmax_base.png
# Missing inputs are named, the rest is still drawn, and the exit status is 1.
set -u
data=${1:-out}
plots=${2:-$data/plots}
if [ $# -gt 2 ]; then shift 2; else set --; fi
names="loss saturation saturation_adam variance heatmap softmax distance bptt parallel ablate"
names="$names softmax_base"
for name in "$@"; do
    case " $names " in
    *" $name "*) ;;
    *)
        echo "plots: no plot is called '$name' (the plots: $names)" >&2
        exit 2
        ;;
    esac
done
only=" $* "
here=$(cd "$(dirname "$0")" && pwd)/plots

if ! command -v gnuplot >/dev/null 2>&1; then
    echo "plots: gnuplot is not installed; run scripts/deps.sh" >&2
    exit 1
fi
if [ ! -d "$data" ]; then
    echo "plots: $data is not a directory (the data comes from make run or the qkv commands)" >&2
    exit 1
fi
if [ -e "$plots" ] && [ ! -d "$plots" ]; then
    echo "plots: $plots is a file, not a directory for the plots" >&2
    exit 1
fi
# mkdir says why it could not (no permission, a read-only file system)
if ! mkdir -p "$plots"; then
    echo "plots: cannot make the plot directory $plots" >&2
    exit 1
fi
status=0

# render NAME SCRIPT INPUT HOW [EXTRA_GNUPLOT_ASSIGNMENTS]: gnuplot in the
# background (the plots are independent: both cores draw), its messages
# and exit status kept in $work; finish reports them in the order rendered.
# Each PNG is drawn into .NAME.png.part beside it and renamed over NAME.png
# only when whole: an interrupted or failed plot leaves the last one as it was.
work=$(mktemp -d "${TMPDIR:-/tmp}/qkv-plots.XXXXXX") || exit 1
# shellcheck disable=SC2154 # n is the trap's own loop variable
trap 'rm -rf "$work"; for n in $order; do rm -f "$plots/.$n.png.part"; done' EXIT
# stopped (make run stops a background plots.sh on a failure): stop the
# renderers, which stop their gnuplot, and let the EXIT trap clean up
renderers=
trap 'kill $renderers 2>/dev/null; wait; exit 143' TERM
trap 'kill $renderers 2>/dev/null; wait; exit 130' INT
order=
render() {
    name=$1 script=$2 input=$3 how=$4 extra=${5:-}
    wanted "$name" || return 0
    if [ ! -s "$input" ]; then
        echo "plots: skipped $name.png: missing $input (make it with: $how)" >&2
        status=1
        return
    fi
    # a run that failed may leave its CSV with the header alone, on which
    # gnuplot stops with "x range is invalid"
    if ! awk 'NR > 1 { rows = 1; exit } END { exit !rows }' "$input"; then
        echo "plots: skipped $name.png: $input has no data rows (did its run fail?)" >&2
        status=1
        return
    fi
    order="$order $name"
    (
        gnuplot -e "dir='$here'; infile='$input'; outfile='$plots/.$name.png.part'; $extra" \
            "$here/$script.gp" >"$work/$name.log" 2>&1 &
        gp=$!
        trap 'kill "$gp" 2>/dev/null; wait "$gp"; exit 143' TERM
        wait "$gp"
        echo $? >"$work/$name.rc"
    ) &
    renderers="$renderers $!"
}

# wanted NAME: true when NAME is to be drawn.
wanted() {
    [ "$only" = "  " ] || case $only in *" $1 "*) ;; *) return 1 ;; esac
}

finish() {
    wait
    for name in $order; do
        cat "$work/$name.log" >&2
        if [ "$(cat "$work/$name.rc" 2>/dev/null)" != 0 ]; then
            echo "plots: gnuplot failed on $name.gp for $name.png" >&2
            status=1
        elif ! complete_png "$plots/.$name.png.part"; then
            # gnuplot says nothing when the disk fills up under it
            echo "plots: $plots/$name.png is incomplete (is the disk full?)" >&2
            status=1
        elif ! mv -f "$plots/.$name.png.part" "$plots/$name.png"; then
            status=1
        else
            echo "plots: wrote $plots/$name.png"
        fi
    done
}

# Nonzero unless $1 is a whole PNG file: it must end with the IEND chunk
# (length 0, "IEND", CRC ae426082).
complete_png() {
    [ "$(tail -c 12 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = \
        "0000000049454e44ae426082" ]
}

# Space-separated distinct values of the column named $2 of the CSV file
# $1 (the d_k list, the vector names); columns are found by header name.
distinct() {
    awk -F, -v name="$2" '
        NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next }
        c && !seen[$c]++ { v = $c; gsub(/"/, "", v); printf "%s ", v }' "$1"
}

# Whether the CSV file $1 has every column named $2, $3, ... (in any order:
# qkv softmax --base 10,2,e writes base_10,base_2,base_e).
has_columns() {
    csv=$1
    shift
    for col in "$@"; do
        head -n 1 "$csv" 2>/dev/null | tr , '\n' | grep -qx "$col" || return 1
    done
}

# The first row's value in the column named $2 of the CSV file $1.
first_value() {
    awk -F, -v name="$2" '
        NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next }
        c { print $c; exit }' "$1"
}

render loss loss "$data/train.csv" "build/qkv train --log $data/train.csv"
for run in saturation saturation-adam; do
    csv=$data/$run/runs.csv
    optim=sgd
    [ "$run" = saturation-adam ] && optim=adam
    name=$(echo "$run" | tr - _)
    if [ -s "$csv" ]; then
        render "$name" saturation "$csv" "" \
            "dks='$(distinct "$csv" d_k)'; seed=$(first_value "$csv" seed); optim='$optim'"
    else
        render "$name" saturation "$csv" "build/qkv saturation --optim $optim --out $data/$run"
    fi
done
render variance variance "$data/saturation/variance.csv" \
    "build/qkv saturation --out $data/saturation"
render heatmap heatmap "$data/heatmap.csv" \
    "build/qkv resolve --csv $data/heatmap.csv \"小明是个运动达人，他平时很爱打篮球\""
if [ -s "$data/softmax.csv" ]; then
    render softmax softmax "$data/softmax.csv" "" "vecs='$(distinct "$data/softmax.csv" vector)'"
else
    render softmax softmax "$data/softmax.csv" "build/qkv softmax --csv $data/softmax.csv"
fi
csv=$data/distance/summary.csv
if [ -s "$csv" ]; then
    render distance distance "$csv" "" "models='$(distinct "$csv" model)'"
else
    render distance distance "$csv" "build/qkv distance --out $data/distance"
fi
csv=$data/bptt/grads.csv
if [ -s "$csv" ]; then
    render bptt bptt "$csv" "" "rhos='$(awk -F, 'NR > 1 && $1 == "rnn" && $3 == "linear" &&
        !seen[$2]++ { printf "%s ", $2 }' "$csv")'; trained=$(grep -c '^rnn-trained,' "$csv")"
else
    render bptt bptt "$csv" "build/qkv bptt --out $data/bptt"
fi
csv=$data/parallel/steps.csv
if [ -s "$csv" ]; then
    render parallel parallel "$csv" "" \
        "models='$(distinct "$csv" model)'; threads=$(awk -F, 'NR > 1 && $3 > m { m = $3 }
            END { print m + 0 }' "$csv")"
else
    render parallel parallel "$csv" "build/qkv parallel --out $data/parallel"
fi
csv=$data/ablate/summary.csv
roles=$data/ablate-roles/summary.csv
[ -s "$roles" ] || roles=
render ablate ablate "$csv" "build/qkv ablate --out $data/ablate" "roles='$roles'"
curves=$data/ablate/curves.csv
# the right panel draws these variants of ablate's curves; a run of some
# (qkv ablate --variants full,no-v) would leave lines out under their keys
bases="full base-2 base-10 base-2-matched base-10-matched"
lacking=$(for v in $bases; do
    grep -q "^$v," "$curves" 2>/dev/null || printf '%s ' "$v"
done)
if ! wanted softmax_base; then
    :
elif [ -s "$curves" ] && [ -n "$lacking" ]; then
    echo "plots: skipped softmax_base.png: $curves lacks the variants ${lacking% }" \
        "(make them with: build/qkv ablate --out $data/ablate)" >&2
    status=1
elif [ -s "$curves" ] && has_columns "$data/softmax.csv" base_2 base_e base_10; then
    render softmax_base softmax_base "$data/softmax.csv" "" \
        "vec='$(first_value "$data/softmax.csv" vector)'; curves='$curves';
         seed='$(first_value "$curves" seed)'"
else
    echo "plots: skipped softmax_base.png: missing $data/softmax.csv with bases 2,e,10 or" \
        "$curves (make them with: build/qkv softmax --base 2,e,10 --csv $data/softmax.csv;" \
        "build/qkv ablate --out $data/ablate)" >&2
    status=1
fi
finish
exit $status
