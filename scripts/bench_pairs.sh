#!/bin/sh
# `make bench-pairs`: qkv against PyTorch eager (one thread), each table
# measured in pairs. For each of ROUNDS rounds and each table (the training
# steps with the length sweep, the ops, the Transformer block, the RNN),
# qkv's table runs and then PyTorch's, at once. bench-compare runs all of
# qkv's tables and then all of PyTorch's, minutes apart, and on a machine
# whose speed drifts (a shared VM: by 30 to 50% within minutes here) its
# ratios mix two moments; a pair's two sides are seconds apart.
#
# Prints per row qkv's best and PyTorch's best over the rounds, the ratio
# of those, and the lowest, median and highest of the rounds' own ratios;
# then the ops' times over the memcpy floor and the block's share of the
# peak, each measured in qkv's own process, as their range over the rounds.
# Every table's output and CSV stay in out/pairs/.
#   scripts/bench_pairs.sh BENCH_BINARY [ROUNDS [TABLES]]
# TABLES: any of steps ops block rnn (default all four, in that order).
set -u
bench=${1:-build/bench}
rounds=${2:-3}
tables=${3:-steps ops block rnn}
here=$(dirname "$0")
dir=out/pairs
case $rounds in
'' | *[!0-9]* | 0)
    echo "bench_pairs: ROUNDS must be a whole number from 1, not '$rounds'" >&2
    exit 2
    ;;
esac
for t in $tables; do
    case $t in
    steps | ops | block | rnn) ;;
    *)
        echo "bench_pairs: unknown table '$t' (steps, ops, block or rnn)" >&2
        exit 2
        ;;
    esac
done
[ -x "$bench" ] || {
    echo "bench_pairs: no benchmark at $bench (make $bench)" >&2
    exit 1
}
mkdir -p "$dir" || exit 1
rm -f "$dir"/qkv_*.csv "$dir"/torch_*.csv
# shellcheck source=scripts/torch_env.sh
. "$here/torch_env.sh"
torch_avx2_only
torch_setup "$here" || exit 1
r=1
while [ "$r" -le "$rounds" ]; do
    for t in $tables; do
        echo "round $r of $rounds: $t (qkv, then PyTorch)"
        q=$dir/qkv_${t}_$r p=$dir/torch_${t}_$r
        "$bench" --csv "$q.csv" "$t" >"$q.txt" 2>&1 || {
            cat "$q.txt" >&2
            exit 1
        }
        "$py" "$here/bench_torch.py" "$p.csv" "$t" >"$p.txt" 2>&1 || {
            cat "$p.txt" >&2
            exit 1
        }
    done
    r=$((r + 1))
done
echo
echo "qkv against PyTorch eager (one thread; kernels ${QKV_KERNELS:-auto}), $rounds rounds of pairs"
# file names: {qkv,torch}_TABLE_ROUND.csv; rows section,name,value,unit
awk -F, '
    FNR == 1 {
        n = split(FILENAME, parts, "/")
        split(parts[n], f, "[_.]")
        side = f[1]; round = f[3]
        if (round > nr) nr = round
        next
    }
    { v[side, $2, round] = $3 }
    function sortn(a, n,    i, j, t) {
        for (i = 2; i <= n; i++)
            for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    }
    # one row: qkv name q against PyTorch name t
    function pair(label, q, t,    r, k, bq, bt, rat) {
        k = 0; bq = -1; bt = -1
        for (r = 1; r <= nr; r++) {
            if (!(("qkv", q, r) in v) || !(("torch", t, r) in v))
                continue
            rat[++k] = v["torch", t, r] / v["qkv", q, r]
            if (bq < 0 || v["qkv", q, r] < bq) bq = v["qkv", q, r]
            if (bt < 0 || v["torch", t, r] < bt) bt = v["torch", t, r]
        }
        if (k == 0)
            return
        sortn(rat, k)
        printf "%-22s %12.1f %12.1f %8.2fx %8.2fx %8.2fx %8.2fx %3d\n", label, bq, bt, bt / bq,
               rat[1], (k % 2 ? rat[(k + 1) / 2] : (rat[k / 2] + rat[k / 2 + 1]) / 2), rat[k], k
    }
    # the range over the rounds of a figure qkv measured in one process
    function range(label, q, scale, unit,    r, k, lo, hi) {
        k = 0
        for (r = 1; r <= nr; r++)
            if (("qkv", q, r) in v) {
                k++
                if (k == 1 || v["qkv", q, r] < lo) lo = v["qkv", q, r]
                if (k == 1 || v["qkv", q, r] > hi) hi = v["qkv", q, r]
            }
        if (k > 0)
            printf "%-30s %8.2f to %.2f%s over %d rounds\n", label, lo * scale, hi * scale, unit, k
    }
    END {
        printf "%-22s %12s %12s %9s %9s %9s %9s %3s\n", "row (µs)", "qkv best", "torch best",
               "bests", "lowest", "median", "highest", "n"
        n = split("R_step,S_step,M_step,L_step,T16_step,T32_step,T64_step,T128_step,T256_step",
                  s, ",")
        for (i = 1; i <= n; i++)
            pair(s[i], s[i], s[i])
        n = split("exp,tanh,sigmoid,gelu,softmax,layer_norm fwd+bwd,block_step,rnn_step", s, ",")
        for (i = 1; i <= n; i++)
            pair(s[i], s[i], s[i])
        pair("rnn_ids_step", "rnn_ids_step", "rnn_step")
        printf "\n"
        n = split("exp,tanh,sigmoid,gelu,softmax,layer_norm fwd+bwd", s, ",")
        for (i = 1; i <= n; i++)
            range(s[i] " over the memcpy floor", s[i] "_over_floor", 1, "x")
        range("block, share of the peak", "block_fraction_of_peak", 100, "%")
    }' "$dir"/qkv_*.csv "$dir"/torch_*.csv
