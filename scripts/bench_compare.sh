#!/bin/sh
# `make bench-compare`: qkv's benchmark, then PyTorch's on the same
# training configurations (R: the batches `qkv train` draws, which the
# benchmark writes to out/bench_batches.csv; S, M, L: synthetic), then the
# ratios. PyTorch comes from Debian's
# python3-torch (apt-get install python3-torch); it is never needed to build
# or test qkv.
#   scripts/bench_compare.sh BENCH_BINARY QKV_BINARY
set -u
bench=${1:-build/bench}
qkv=${2:-build/qkv}
mkdir -p out
# QKV_KERNELS=avx2 stands in for a CPU without AVX-512, so PyTorch runs as
# it would on one: ATen's kernels held to AVX2 (ATEN_CPU_CAPABILITY) and
# OpenBLAS's kernel the fastest of those for AVX2 CPUs
# shellcheck source=scripts/torch_env.sh
. "$(dirname "$0")/torch_env.sh"
torch_avx2_only
# The benchmark's own GEMM tables load OpenBLAS too: its kernel for the
# widest vector set here (Debian's build may detect this CPU as an older
# one), so the ratios are against OpenBLAS at its best
if [ "$avx2_only" = 0 ] && grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
    blas_core=SkylakeX
elif grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
    blas_core=Haswell
else
    blas_core=
fi
if [ -n "$blas_core" ]; then
    OPENBLAS_CORETYPE=$blas_core "$bench" "$qkv" out/bench.csv || exit 1
else
    "$bench" "$qkv" out/bench.csv || exit 1
fi
echo
torch_setup "$(dirname "$0")" || exit 1
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
        n = split("R S M L", cfg, " ")
        for (i = 1; i <= n; i++) {
            c = cfg[i]
            printf "%-4s %14.1f %14.1f %9.1fx %14.2f %14.2f\n", c, qkv[c "_step"], torch[c "_step"],
                   torch[c "_step"] / qkv[c "_step"], qkv[c "_bwd_over_fwd"],
                   torch[c "_bwd_over_fwd"]
            if (c == "R" && ("R1_step" in torch)) # the same loss, the pronoun row alone
                printf "%-4s %14.1f %14.1f %9.1fx %14.2f %14.2f  (PyTorch: the pronoun row only)\n",
                       "R1", qkv["R_step"], torch["R1_step"], torch["R1_step"] / qkv["R_step"],
                       qkv["R_bwd_over_fwd"], torch["R1_bwd_over_fwd"]
        }
        printf "\nlength sweep (B 32, d_k 64): time per step, and the exponent of T fitted\n"
        printf "%-6s %14s %14s %10s\n", "T", "qkv (µs)", "torch (µs)", "speed-up"
        m = 0; sq = 0; st = 0; sx = 0; sqx = 0; stx = 0; sxx = 0
        for (T = 16; T <= 256; T *= 2) {
            k = "T" T "_step"
            if (!(k in qkv) || !(k in torch))
                continue
            printf "%-6d %14.1f %14.1f %9.1fx\n", T, qkv[k], torch[k], torch[k] / qkv[k]
            x = log(T); m++; sx += x; sxx += x * x
            sq += log(qkv[k]); sqx += x * log(qkv[k])
            st += log(torch[k]); stx += x * log(torch[k])
        }
        if (m > 1)
            printf "time grows as T^%.2f (qkv) and T^%.2f (PyTorch)\n",
                   (m * sqx - sx * sq) / (m * sxx - sx * sx),
                   (m * stx - sx * st) / (m * sxx - sx * sx)
        printf "\nops and the Transformer block: time per call, qkv against PyTorch\n"
        printf "%-20s %14s %14s %10s\n", "op", "qkv (µs)", "torch (µs)", "speed-up"
        n = split("exp,tanh,sigmoid,gelu,softmax,layer_norm fwd+bwd,block_step,rnn_step", op, ",")
        for (i = 1; i <= n; i++)
            if ((op[i] in qkv) && (op[i] in torch))
                printf "%-20s %14.1f %14.1f %9.1fx\n", op[i], qkv[op[i]], torch[op[i]],
                       torch[op[i]] / qkv[op[i]]
        if (("rnn_ids_step" in qkv) && ("rnn_step" in torch))
            printf "%-20s %14.1f %14.1f %9.1fx  (tokens in: the table projected once;" \
                   " nn.RNN projects every token)\n", "rnn_ids_step", qkv["rnn_ids_step"],
                   torch["rnn_step"], torch["rnn_step"] / qkv["rnn_ids_step"]
        if ("block_fraction_of_peak" in qkv)
            printf "qkv block: %.1f GFLOP/s, %.0f%% of the measured one-core peak (%.0f GFLOP/s)\n",
                   qkv["block_gflops"], 100 * qkv["block_fraction_of_peak"], qkv["peak_gflops"]
        if ("ratio_best_over_openblas_512" in qkv)
            printf "\nqkv matmul / OpenBLAS: %.0f%% at 512, %.0f%% at 1024\n",
                   100 * qkv["ratio_best_over_openblas_512"],
                   100 * qkv["ratio_best_over_openblas_1024"]
        printf "\ncausal attention at length T (d 64, forward + backward): qkv, its online"
        printf " form and PyTorch\n"
        printf "%-6s %14s %14s %14s %10s %10s\n", "T", "qkv (µs)", "online (µs)", "torch (µs)",
               "speed-up", "online"
        n = split("256,1024,2048", lt, ",")
        for (i = 1; i <= n; i++) {
            k = "attention_T" lt[i]
            if ((k in qkv) && (k in torch))
                printf "%-6d %14.1f %14.1f %14.1f %9.1fx %9.1fx\n", lt[i], qkv[k],
                       qkv["attention_online_T" lt[i]], torch[k], torch[k] / qkv[k],
                       torch[k] / qkv["attention_online_T" lt[i]]
        }
        if ("peak_rss_default_train" in qkv)
            printf "peak RSS of the default qkv train: %.1f MB\n", qkv["peak_rss_default_train"]
    }' out/bench.csv out/bench_torch.csv
