#!/bin/sh
# `make bench-compare`: qkv's benchmark, then PyTorch's on the same three
# training configurations, then the ratios. PyTorch comes from Debian's
# python3-torch (apt-get install python3-torch); it is never needed to build
# or test qkv.
#   scripts/bench_compare.sh BENCH_BINARY QKV_BINARY
set -u
bench=${1:-build/bench}
qkv=${2:-build/qkv}
mkdir -p out
"$bench" "$qkv" out/bench.csv || exit 1
echo
py=/usr/bin/python3
[ -x "$py" ] || py=python3
if ! "$py" -c 'import torch' 2>/dev/null; then
    echo "bench-compare: PyTorch is not installed for $py; apt-get install python3-torch" >&2
    exit 1
fi
"$py" "$(dirname "$0")/bench_torch.py" out/bench_torch.csv || exit 1
echo
echo "qkv against PyTorch eager (one thread): time per training step"
awk -F, '
    FNR == 1 { next }
    FILENAME ~ /bench_torch/ { torch[$2] = $3; next }
    { qkv[$2] = $3 }
    END {
        printf "%-4s %14s %14s %10s %14s %14s\n", "cfg", "qkv (µs)", "torch (µs)", "speed-up",
               "qkv bwd/fwd", "torch bwd/fwd"
        n = split("S M L", cfg, " ")
        for (i = 1; i <= n; i++) {
            c = cfg[i]
            printf "%-4s %14.1f %14.1f %9.1fx %14.2f %14.2f\n", c, qkv[c "_step"], torch[c "_step"],
                   torch[c "_step"] / qkv[c "_step"], qkv[c "_bwd_over_fwd"],
                   torch[c "_bwd_over_fwd"]
        }
        if ("ratio_best_over_openblas_512" in qkv)
            printf "\nqkv matmul / OpenBLAS: %.0f%% at 512, %.0f%% at 1024\n",
                   100 * qkv["ratio_best_over_openblas_512"],
                   100 * qkv["ratio_best_over_openblas_1024"]
        if ("peak_rss_default_train" in qkv)
            printf "peak RSS of the default qkv train: %.1f MB\n", qkv["peak_rss_default_train"]
    }' out/bench.csv out/bench_torch.csv
