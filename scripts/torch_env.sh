# shellcheck shell=sh
# Sourced by bench_compare.sh and bench_pairs.sh: how PyTorch runs beside
# qkv. Defines two functions.
#   torch_avx2_only  sets avx2_only to 1 when QKV_KERNELS=avx2 stands in for
#                    a CPU without AVX-512 (and holds ATen's kernels to AVX2,
#                    so that PyTorch runs as it would on one), else 0
#   torch_setup      sets py (a python3 with PyTorch; fails without one)
#                    and exports PyTorch's OPENBLAS_CORETYPE: the fastest
#                    kernel for this CPU (Debian's OpenBLAS may detect a new
#                    CPU as an old one), or for AVX2 CPUs with avx2_only
torch_avx2_only() {
    avx2_only=0
    if [ "${QKV_KERNELS:-}" = avx2 ] && grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
        avx2_only=1
        export ATEN_CPU_CAPABILITY=avx2
    fi
}

torch_setup() {
    here=$1 # the scripts directory
    py=/usr/bin/python3
    [ -x "$py" ] || py=python3
    if ! "$py" -c 'import torch' 2>/dev/null; then
        echo "PyTorch is not installed for $py; apt-get install python3-torch" >&2
        return 1
    fi
    # the "pick:" line of --pick-coretype, empty when OpenBLAS's own
    # detection was the fastest
    if [ "$avx2_only" = 1 ]; then
        echo "Choosing OPENBLAS_CORETYPE for PyTorch among AVX2 CPUs' kernels, ATen held to AVX2:"
        picked=$("$py" "$here/bench_torch.py" --pick-coretype avx2) || return 1
    else
        echo "Choosing OPENBLAS_CORETYPE for PyTorch (512^3 sgemm per core type):"
        picked=$("$py" "$here/bench_torch.py" --pick-coretype) || return 1
    fi
    printf '%s\n' "$picked" | grep -v '^pick:'
    core=$(printf '%s\n' "$picked" | sed -n 's/^pick://p')
    if [ -n "$core" ]; then
        export OPENBLAS_CORETYPE="$core"
    else
        unset OPENBLAS_CORETYPE
    fi
}
