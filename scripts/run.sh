#!/bin/sh
# The main job (`make run`): train the coreference model, resolve the
# tutorial's sentence, measure √d_k saturation under SGD and Adam, run the
# RNN chapter's three experiments (short versions: the full sweeps are
# behind the commands' flags), run the ablations, and draw every plot. Expects `make` to have
# built build/qkv. The sweeps' runs go to JOBS worker processes (default:
# the cores online), which changes no number: JOBS=1 gives the same output.
# With JOBS > 1 the gradient-through-time run (qkv bptt, one process) also
# starts early, beside the sweeps, and the plots of the first steps are
# drawn beside the distance runs; their output is shown in its place.
# Nothing runs beside the timed step (qkv parallel).
set -eu
qkv=${QKV:-build/qkv}
out=${OUT:-out}
jobs=${JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}
sentence="小明是个运动达人，他平时很爱打篮球"

n=0
step() { n=$((n + 1)); printf '\n== %d/9 %s\n' "$n" "$*"; }

step "train Wq, Wk, Wv on the coreference task"
"$qkv" train --log "$out/train.csv" --save "$out/coref.safetensors"

step "resolve the tutorial's sentence"
"$qkv" resolve --model "$out/coref.safetensors" --csv "$out/heatmap.csv" "$sentence"

step "linear vs exponential normalisation, and the softmax's base"
"$qkv" softmax --base 2,e,10 --csv "$out/softmax.csv"

# Jobs beside others keep their output in a temporary directory until
# their step; a failure, or an interrupt, stops them and removes it.
bg='' bptt_pid='' plots_pid='' plots_status=0 early=0
on_exit() {
    rc=$?
    for pid in $bptt_pid $plots_pid; do kill "$pid" 2>/dev/null || :; done
    # their own clean-up done before the directory goes (plots.sh keeps its
    # temporary files inside it)
    [ -z "$bptt_pid$plots_pid" ] || wait 2>/dev/null || :
    [ -z "$bg" ] || rm -rf "$bg"
    exit "$rc"
}
if [ "$jobs" -gt 1 ]; then
    trap on_exit EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    bg=$(mktemp -d "${TMPDIR:-/tmp}/qkv-run.XXXXXX")
    "$qkv" bptt --quiet --out "$out/bptt" >"$bg/bptt.txt" 2>&1 &
    bptt_pid=$!
fi

step "sqrt(d_k) saturation sweep, SGD then Adam"
"$qkv" saturation --seeds 3 --jobs "$jobs" --out "$out/saturation"
# the Var(q·k) table depends only on --dk and --seed: the SGD sweep's serves
"$qkv" saturation --seeds 3 --optim adam --jobs "$jobs" --no-variance \
    --out "$out/saturation-adam"

early_plots="loss heatmap softmax saturation saturation_adam variance"
# without gnuplot the plots step draws them all, and says so once
if [ "$jobs" -gt 1 ] && command -v gnuplot >/dev/null 2>&1; then
    # shellcheck disable=SC2086 # the names are words
    TMPDIR=$bg sh "$(dirname "$0")/plots.sh" "$out" "$out/plots" $early_plots \
        >"$bg/plots.txt" 2>&1 &
    plots_pid=$! early=1
fi

step "RNN, LSTM, GRU and attention as the pronoun moves away (qkv distance)"
"$qkv" distance --seeds 2 --steps 500 --distances 0,4,16,32,64 --jobs "$jobs" \
    --out "$out/distance"

step "the gradient through time (qkv bptt)"
if [ -n "$bptt_pid" ]; then
    status=0
    wait "$bptt_pid" || status=$?
    bptt_pid=''
    cat "$bg/bptt.txt"
    [ "$status" -eq 0 ] || exit "$status"
else
    "$qkv" bptt --out "$out/bptt"
fi
if [ -n "$plots_pid" ]; then # nothing may run beside the timed step
    wait "$plots_pid" || plots_status=$?
    plots_pid=''
fi

step "critical path and step time against T (qkv parallel)"
# (subnormals flushed: see README, "The RNN chapter, measured"). Blocks of
# 5 ms: 1.7 s for the 40 cells, against 3.1 s with 10 ms blocks, whose
# step times differ from these by no more than two 10 ms runs differ
# from each other (a median of 2 to 4%)
"$qkv" parallel --min-time 0.005 --flush-denormals --out "$out/parallel"

step "ablations: why V, why Q and K, why e (qkv ablate)"
"$qkv" ablate --jobs "$jobs" --out "$out/ablate"
"$qkv" ablate --task roles --seeds 10 --jobs "$jobs" --out "$out/ablate-roles"

step "plots"
if [ "$early" -eq 1 ]; then
    cat "$bg/plots.txt"
    # the rest in two processes, one a core; their output in this order
    TMPDIR=$bg sh "$(dirname "$0")/plots.sh" "$out" "$out/plots" distance bptt parallel \
        >"$bg/plots2.txt" 2>&1 &
    plots_pid=$!
    status=0
    TMPDIR=$bg sh "$(dirname "$0")/plots.sh" "$out" "$out/plots" ablate softmax_base \
        >"$bg/plots3.txt" 2>&1 || status=$?
    wait "$plots_pid" || plots_status=$?
    plots_pid=''
    cat "$bg/plots2.txt" "$bg/plots3.txt"
    [ "$plots_status" -ne 0 ] || plots_status=$status
    [ "$plots_status" -eq 0 ] || exit "$plots_status"
else
    sh "$(dirname "$0")/plots.sh" "$out" "$out/plots"
fi
printf '\nDone. Plots are in %s/plots/: loss.png saturation.png saturation_adam.png\n' "$out"
printf 'variance.png heatmap.png softmax.png distance.png bptt.png parallel.png\n'
printf 'ablate.png softmax_base.png\n'
