#!/bin/sh
# The main job (`make run`): train the coreference model, resolve the
# tutorial's sentence, measure √d_k saturation under SGD and Adam, and draw
# every plot. Expects `make` to have built build/qkv.
set -eu
qkv=${QKV:-build/qkv}
out=${OUT:-out}
sentence="小明是个运动达人，他平时很爱打篮球"

step() { printf '\n== %s\n' "$*"; }

step "1/5 train Wq, Wk, Wv on the coreference task"
"$qkv" train --log "$out/train.csv" --save "$out/coref.safetensors"

step "2/5 resolve the tutorial's sentence"
"$qkv" resolve --model "$out/coref.safetensors" --csv "$out/heatmap.csv" "$sentence"

step "3/5 linear vs exponential normalisation"
"$qkv" softmax --csv "$out/softmax.csv"

step "4/5 sqrt(d_k) saturation sweep, SGD then Adam"
"$qkv" saturation --seeds 3 --out "$out/saturation"
"$qkv" saturation --seeds 3 --optim adam --out "$out/saturation-adam"

step "5/5 plots"
sh "$(dirname "$0")/plots.sh" "$out" "$out/plots"
printf '\nDone. Plots are in %s/plots/: loss.png saturation.png saturation_adam.png\n' "$out"
printf 'variance.png heatmap.png softmax.png\n'
