#!/usr/bin/env python3
"""The training-step benchmark of `make bench`, in PyTorch eager, on one CPU
thread, for `make bench-compare`.

Same model as qkv: token ids index the rows of Wq, Wk, Wv; scores Q·Kᵀ/√d_k
with a padding mask; softmax; A·V; the query row; ·Wo; cross-entropy; Adam.
Needs Debian's PyTorch, which the build never requires:

    apt-get install python3-torch libopenblas0-pthread
    /usr/bin/python3 scripts/bench_torch.py [out/bench_torch.csv [steps|T|ops|block|rnn|long]]
    /usr/bin/python3 scripts/bench_torch.py --pick-coretype [avx2]

Prints a table like qkv's and writes section,name,value,unit rows.
"""
import math
import os
import statistics
import sys
import time

# One thread for every pool PyTorch may use. torch.set_num_threads(1) sets
# ATen's and OpenMP's, but not OpenBLAS's own pool, which Debian's PyTorch
# calls for its products: without this, a 512^3 product ran on both cores
# here (326 GFLOP/s, against 203 to 205 on one, and a one-core peak of about 217). The
# variables must be set before OpenBLAS loads.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ[_var] = "1"


def keep_freed_memory():
    """glibc returns a freed block of 128 KiB or more to the system at once
    (its mmap threshold), so every step of a model with large activations
    maps fresh pages and faults them in. That made PyTorch's Transformer
    block step take 40 to 70 ms here, against 27 to 34 ms with the freed
    memory kept for reuse, as a long-running trainer's heap ends up. So
    PyTorch is timed at its best: nothing is mapped or trimmed per step
    (qkv allocates nothing per step)."""
    import ctypes
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
    libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)  # glibc's largest on 64-bit
    libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)
    libc.mallopt(M_TOP_PAD, 64 << 20)


keep_freed_memory()

try:
    import torch
except ImportError:
    sys.exit("bench_torch.py: PyTorch is not installed; apt-get install python3-torch "
             "and run it with /usr/bin/python3")

CONFIGS = [("S", 32, 12, 48, 16), ("M", 32, 12, 48, 256), ("L", 256, 16, 64, 512)]
LENGTHS = [16, 32, 64, 128, 256]  # bench.c's length sweep: B 32, d_k 64, V 64
CLASSES = 12


def median_time(fn, blocks=7, min_block=0.2):
    fn()
    reps = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_block:
            break
        reps = int(reps * min(100, 1.5 * min_block / max(dt, 1e-9))) + 1
    times = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - t0) / reps)
    return statistics.median(times)


def time_training(opt, loss):
    """Seconds per training step (zero_grad, backward, opt.step), per
    forward pass, and per backward pass (forward + backward less forward),
    each a median_time."""
    def step():
        opt.zero_grad(set_to_none=False)
        loss().backward()
        opt.step()

    def fwd_bwd():
        opt.zero_grad(set_to_none=False)
        loss().backward()

    t_step = median_time(step)
    t_fwd = median_time(loss)
    return t_step, t_fwd, median_time(fwd_bwd) - t_fwd


def bench(name, B, T, V, dk, rows):
    g = torch.Generator().manual_seed(7)
    params = [torch.randn(V, dk, generator=g).mul_(0.1).requires_grad_() for _ in range(3)]
    wo = torch.randn(dk, CLASSES, generator=g).div_(math.sqrt(dk)).requires_grad_()
    params.append(wo)
    ids = torch.randint(1, V, (B, T), generator=g)
    query = torch.randint(0, T, (B,), generator=g)
    target = torch.randint(0, CLASSES, (B,), generator=g)
    mask = torch.zeros(B, 1, T)  # every item has full length, as in bench.c
    opt = torch.optim.Adam(params, lr=1e-3)
    scale = 1.0 / math.sqrt(dk)
    arange = torch.arange(B)

    def forward():
        wq, wk, wv, wo_ = params
        q, k, v = wq[ids], wk[ids], wv[ids]
        s = torch.bmm(q, k.transpose(1, 2)) * scale + mask
        a = torch.softmax(s, dim=-1)
        h = torch.bmm(a, v)[arange, query]
        return torch.nn.functional.cross_entropy(h @ wo_, target)

    t_step, t_fwd, t_bwd = time_training(opt, forward)
    print(f"{name:<3} {B:5d} {T:4d} {V:4d} {dk:5d} {t_step * 1e6:12.1f} {t_fwd * 1e6:12.1f} "
          f"{t_bwd * 1e6:12.1f} {t_bwd / t_fwd:9.2f}")
    rows += [("train", f"{name}_step", t_step * 1e6, "us"),
             ("train", f"{name}_forward", t_fwd * 1e6, "us"),
             ("train", f"{name}_backward", t_bwd * 1e6, "us"),
             ("train", f"{name}_bwd_over_fwd", t_bwd / t_fwd, "ratio")]


def read_batches(path):
    """The real workload's batches as bench.c wrote them (write_real_batches):
    (ids [B,T], additive key mask [B,1,T], query [B], target [B]) each, and
    the model's vocabulary size, d_k and classes; None when absent."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    meta = lines[0].split(",")
    V, dk, classes = int(meta[1]), int(meta[2]), int(meta[3])
    items = {}
    for line in lines[1:]:
        k, _, n, q, tgt, ids = line.split(",")
        item = (int(n), int(q), int(tgt), [int(i) for i in ids.split()])
        items.setdefault(int(k), []).append(item)
    batches = []
    for k in sorted(items):
        rows_ = items[k]
        ids = torch.tensor([r[3] for r in rows_])
        lens = torch.tensor([r[0] for r in rows_])
        T = ids.shape[1]
        mask = torch.zeros(len(rows_), 1, T)
        mask[torch.arange(T)[None, None, :] >= lens[:, None, None]] = float("-inf")
        batches.append((ids, mask, torch.tensor([r[1] for r in rows_]),
                        torch.tensor([r[2] for r in rows_])))
    return V, dk, classes, batches


def bench_real(rows, path):
    """The steps `qkv train` runs: its first batches (padded, with a key
    mask), its model (V x d_k tables, d_k x classes output) and Adam, taken
    in turn as bench.c takes them."""
    got = read_batches(path)
    if got is None:
        print(f"R   (no {path}: run build/bench first)")
        return
    V, dk, classes, batches = got
    g = torch.Generator().manual_seed(7)
    params = [torch.randn(V, dk, generator=g).mul_(0.1).requires_grad_() for _ in range(3)]
    params.append(torch.randn(dk, classes, generator=g).div_(math.sqrt(dk)).requires_grad_())
    opt = torch.optim.Adam(params, lr=0.05)
    scale = 1.0 / math.sqrt(dk)
    turn = [0]

    def forward():
        ids, mask, query, target = batches[turn[0]]
        turn[0] = (turn[0] + 1) % len(batches)
        wq, wk, wv, wo = params
        q, k, v = wq[ids], wk[ids], wv[ids]
        a = torch.softmax(torch.bmm(q, k.transpose(1, 2)) * scale + mask, dim=-1)
        h = torch.bmm(a, v)[torch.arange(ids.shape[0]), query]
        return torch.nn.functional.cross_entropy(h @ wo, target)

    def forward_row():
        """The same loss from the pronoun's row alone: its scores against
        every key, their softmax, and that row of A·V (what qkv train's
        steps compute)."""
        ids, mask, query, target = batches[turn[0]]
        turn[0] = (turn[0] + 1) % len(batches)
        wq, wk, wv, wo = params
        q = wq[ids[torch.arange(ids.shape[0]), query]]
        k, v = wk[ids], wv[ids]
        s = torch.bmm(k, q.unsqueeze(2)).squeeze(2) * scale + mask[:, 0]
        h = torch.bmm(torch.softmax(s, dim=-1).unsqueeze(1), v).squeeze(1)
        return torch.nn.functional.cross_entropy(h @ wo, target)

    T = batches[0][0].shape[1]
    for name, fn, what in (("R", forward, f"T {T}, {len(batches)} batches"),
                           ("R1", forward_row, "the pronoun's row only")):
        t_step, t_fwd, t_bwd = time_training(opt, fn)
        print(f"{name:<3} {batches[0][0].shape[0]:5d} {'pad':>4} {V:4d} {dk:5d} "
              f"{t_step * 1e6:12.1f} {t_fwd * 1e6:12.1f} {t_bwd * 1e6:12.1f} "
              f"{t_bwd / t_fwd:9.2f}   ({what})")
        rows += [("train", f"{name}_step", t_step * 1e6, "us"),
                 ("train", f"{name}_forward", t_fwd * 1e6, "us"),
                 ("train", f"{name}_backward", t_bwd * 1e6, "us"),
                 ("train", f"{name}_bwd_over_fwd", t_bwd / t_fwd, "ratio")]


def bench_rnn(rows):
    """bench.c's tanh RNN step: embedding, nn.RNN over 64 steps, the last
    state into 12 classes, cross-entropy, Adam."""
    B, T, E, H, V, C = 32, 64, 128, 128, 64, 12
    g = torch.Generator().manual_seed(5)
    emb = torch.nn.Embedding(V, E)
    rnn = torch.nn.RNN(E, H, nonlinearity="tanh", batch_first=True)
    out = torch.nn.Linear(H, C)
    params = list(emb.parameters()) + list(rnn.parameters()) + list(out.parameters())
    opt = torch.optim.Adam(params, lr=1e-3)
    ids = torch.randint(0, V, (B, T), generator=g)
    target = torch.randint(0, C, (B,), generator=g)

    def forward():
        _, h = rnn(emb(ids))
        return torch.nn.functional.cross_entropy(out(h[0]), target)

    t_step, t_fwd, t_bwd = time_training(opt, forward)
    print(f"\ntanh RNN step (B {B}, T {T}, embedding {E}, hidden {H}; torch.nn.RNN): "
          f"{t_step * 1e6:.1f} µs, forward {t_fwd * 1e6:.1f}, backward {t_bwd * 1e6:.1f}")
    rows += [("rnn", "rnn_step", t_step * 1e6, "us"),
             ("rnn", "rnn_forward", t_fwd * 1e6, "us"),
             ("rnn", "rnn_backward", t_bwd * 1e6, "us")]


def bench_ops(rows):
    """The ops table of `bench ops`: forward maps and softmax under no_grad,
    layer norm forward + backward from a fixed dy (x.grad accumulating)."""
    g = torch.Generator().manual_seed(8)
    print("\nOps (one thread): µs per call")
    print(f"{'op':<24} {'shape':<14} {'µs':>10}")
    x = torch.randn(1 << 20, generator=g).mul_(2)
    maps = [("exp", torch.exp), ("tanh", torch.tanh), ("sigmoid", torch.sigmoid),
            ("gelu", lambda v: torch.nn.functional.gelu(v, approximate="tanh"))]
    with torch.no_grad():
        for name, fn in maps:
            us = median_time(lambda: fn(x)) * 1e6
            print(f"{name:<24} {'[1048576]':<14} {us:>10.1f}")
            rows.append(("ops", name, us, "us"))
        s = torch.randn(32, 4, 64, 64, generator=g).mul_(2)
        us = median_time(lambda: torch.softmax(s, dim=-1)) * 1e6
        print(f"{'softmax':<24} {'[32,4,64,64]':<14} {us:>10.1f}")
        rows.append(("ops", "softmax", us, "us"))
    xl = torch.randn(32, 64, 128, generator=g).requires_grad_()
    w = torch.ones(128, requires_grad=True)
    b = torch.zeros(128, requires_grad=True)
    dy = torch.randn(32, 64, 128, generator=g)

    def layer_norm():
        y = torch.nn.functional.layer_norm(xl, (128,), w, b, 1e-5)
        y.backward(dy)
    us = median_time(layer_norm) * 1e6
    print(f"{'layer_norm fwd+bwd':<24} {'[32,64,128]':<14} {us:>10.1f}")
    rows.append(("ops", "layer_norm fwd+bwd", us, "us"))


def bench_long(rows):
    """The attention rows of `bench long`: causal self-attention, d 64,
    forward + backward from a fixed dO, as a PyTorch 1.13 user writes it
    (Q·Kᵀ scaled, the upper triangle filled with -inf, softmax, ·V). Not
    T = 4096: its [T,T] tensors are 64 MiB, above glibc's largest mmap
    threshold (32 MiB), so each would be mapped and faulted in afresh
    every step, which is not PyTorch at its best (keep_freed_memory)."""
    g = torch.Generator().manual_seed(3)
    print("\nCausal attention at length T (d 64; forward + backward): ms per call")
    print(f"{'B':>5} {'T':>5} {'ms':>10}")
    for B, T in ((32, 256), (4, 1024), (1, 2048)):
        q, k, v = (torch.randn(B, T, 64, generator=g).requires_grad_() for _ in range(3))
        dy = torch.randn(B, T, 64, generator=g)
        upper = torch.ones(T, T, dtype=torch.bool).triu_(1)

        def step():
            s = (q @ k.transpose(1, 2)).mul_(0.125).masked_fill_(upper, float("-inf"))
            (torch.softmax(s, dim=-1) @ v).backward(dy)
        ms = median_time(step, blocks=3) * 1e3
        print(f"{B:5d} {T:5d} {ms:10.2f}")
        rows.append(("long", f"attention_T{T}", ms * 1e3, "us"))


def bench_block(rows):
    """The Transformer block step of `bench block`: B 32, T 64, d_model 128,
    4 heads, FFN 512, causal, pre-norm, GELU (tanh), MSE against a fixed
    target, AdamW; forward with autograd recording, as qkv's is."""
    B, T, D, H, F = 32, 64, 128, 4, 512
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.up, self.down = nn.Linear(D, F), nn.Linear(F, D)
            self.register_buffer("mask", torch.full((T, T), float("-inf")).triu(1))

        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
            q, k, v = (m.view(B, T, H, D // H).transpose(1, 2) for m in (q, k, v))
            a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // H) + self.mask, dim=-1)
            x = x + self.proj((a @ v).transpose(1, 2).reshape(B, T, D))
            h = nn.functional.gelu(self.up(self.ln2(x)), approximate="tanh")
            return x + self.down(h)

    g = torch.Generator().manual_seed(3)
    m = Block()
    x, target = torch.randn(B, T, D, generator=g), torch.randn(B, T, D, generator=g)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)

    def loss():
        return nn.functional.mse_loss(m(x), target)

    t_step, t_fwd, t_bwd = time_training(opt, loss)
    core = os.environ.get("OPENBLAS_CORETYPE", "(detected)")
    print(f"\nTransformer block step (B {B}, T {T}, d_model {D}, {H} heads, FFN {F}, causal; "
          f"OpenBLAS core {core})")
    print(f"{'step (ms)':>12} {'fwd (ms)':>12} {'bwd (ms)':>12} {'bwd/fwd':>9}")
    print(f"{t_step * 1e3:12.2f} {t_fwd * 1e3:12.2f} {t_bwd * 1e3:12.2f} {t_bwd / t_fwd:9.2f}")
    rows += [("block", "block_step", t_step * 1e6, "us"),
             ("block", "block_forward", t_fwd * 1e6, "us"),
             ("block", "block_backward", t_bwd * 1e6, "us"),
             ("block", "block_bwd_over_fwd", t_bwd / t_fwd, "ratio")]


def blas_in_use():
    """The file behind the libblas.so.3 that PyTorch's products call, as
    this process has it mapped, or None. Debian's PyTorch links
    libblas.so.3, which the alternatives system points at OpenBLAS's or at
    the reference BLAS; OpenBLAS's LAPACK may be mapped beside the
    reference BLAS, so only libblas itself counts."""
    torch.ones(2, 2) @ torch.ones(2, 2)
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if os.path.basename(path).startswith("libblas.so"):
                return path
    return None


def require_openblas():
    """Refuse to time PyTorch on the reference BLAS: its products run at a
    few GFLOP/s (6.7 at 512^3 here, against about 200 with OpenBLAS), and
    every ratio against it would flatter qkv."""
    lib = blas_in_use()
    if lib is not None and "openblas" not in lib:
        what = ("the reference BLAS" if os.path.basename(os.path.dirname(lib)) == "blas"
                else "not OpenBLAS (whose kernel this benchmark picks)")
        sys.exit(f"bench_torch: PyTorch's products go to {lib}, {what}; "
                 "apt-get install libopenblas0-pthread (or point libblas.so.3 at OpenBLAS's "
                 "with update-alternatives) to time PyTorch at its speed")


def sgemm_rate():
    """GFLOP/s of one 512^3 float32 product on one thread (the best of 5)."""
    torch.set_num_threads(1)
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    best = 0.0
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(10):
            a @ b
        best = max(best, 10 * 2 * 512 ** 3 / (time.perf_counter() - t0) / 1e9)
    return best


def pick_coretype(avx2_only=False):
    """Debian's OpenBLAS may not recognise a new CPU and fall back to an old
    kernel, so PyTorch is timed with the OPENBLAS_CORETYPE whose 512^3
    product is fastest here; each candidate runs in a fresh process, since
    OpenBLAS reads the variable once, when it loads. With avx2_only, only
    the kernels an AVX2 CPU without AVX-512 would run are tried (OpenBLAS's
    own detection is left out: on an AVX-512 CPU it may pick an AVX-512
    kernel)."""
    import subprocess
    best, best_rate = "", 0.0
    cores = ["", "SkylakeX", "Cooperlake", "Zen", "Haswell", "Sandybridge", "Prescott"]
    if avx2_only:
        cores = ["Zen", "Haswell"]
    for core in cores:
        env = dict(os.environ, OPENBLAS_CORETYPE=core)
        r = subprocess.run([sys.executable, __file__, "--sgemm-rate"], env=env,
                           capture_output=True, text=True)
        if r.returncode == 0:
            rate = float(r.stdout)
            print(f"  OPENBLAS_CORETYPE={core or '(unset)':<12} {rate:7.1f} GFLOP/s at 512")
            if rate > best_rate:
                best, best_rate = core, rate
    print(f"pick:{best}")  # a marker: the best may be the empty string (unset)


def main():
    if sys.argv[1:] == ["--sgemm-rate"]:
        print(sgemm_rate())
        return
    require_openblas()
    if sys.argv[1:2] == ["--pick-coretype"] and sys.argv[2:] in ([], ["avx2"]):
        pick_coretype(sys.argv[2:] == ["avx2"])
        return
    out = sys.argv[1] if len(sys.argv) > 1 else "out/bench_torch.csv"
    torch.set_num_threads(1)
    capability = [line.split(":", 1)[1].strip() for line in torch.__config__.show().splitlines()
                  if "CPU capability usage" in line]
    print(f"PyTorch {torch.__version__} eager, {torch.get_num_threads()} thread "
          f"(OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}; "
          f"ATen kernels {capability[0] if capability else 'unknown'})")
    print("Training step (forward + backward + Adam), median of 7 blocks; 12 classes")
    print(f"{'cfg':<3} {'B':>5} {'T':>4} {'V':>4} {'d_k':>5} {'step (µs)':>12} {'fwd (µs)':>12} "
          f"{'bwd (µs)':>12} {'bwd/fwd':>9}")
    rows = []
    only = sys.argv[2] if len(sys.argv) > 2 else None
    if only not in (None, "steps", "T", "ops", "block", "rnn", "long"):
        sys.exit(f"bench_torch.py: unknown table {only!r} (steps, T, ops, block, rnn or long)")
    if only in (None, "steps"):
        bench_real(rows, os.path.join(os.path.dirname(out) or ".", "bench_batches.csv"))
    for cfg in CONFIGS if only in (None, "steps") else []:
        bench(*cfg, rows)
    if only in (None, "T", "steps"):
        for T in LENGTHS:
            bench(f"T{T}", 32, T, 64, 64, rows)
    if only in (None, "ops"):
        bench_ops(rows)
    if only in (None, "block"):
        bench_block(rows)
    if only in (None, "rnn"):
        bench_rnn(rows)
    if only in (None, "long"):
        bench_long(rows)
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        f.write("section,name,value,unit\n")
        for r in rows:
            f.write(f"{r[0]},{r[1]},{r[2]:.6g},{r[3]}\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
