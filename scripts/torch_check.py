#!/usr/bin/env python3
"""Recomputes qkv's ops with PyTorch, float64 on the CPU, and compares.

tests/test_torch.c writes FILE: for each case, a header line
"case SET-LABEL OP [KEY=VALUE ...]", then the op's inputs in order ("x":
takes a gradient, "c": a constant such as a target or a mask; each as
ndim, the shape and the values), the output "y", the upstream gradient
"dy" and one "g" line per input, qkv's gradient; then "end". Values are
hex floats, so the inputs torch sees are exactly qkv's.

For every output and gradient the error is max|qkv - torch| / max|torch|
over the tensor (infinities must agree exactly). Prints one line per
case label with its worst error over the kernel sets, and exits 1 if any
exceeds --tol.

    /usr/bin/python3 scripts/torch_check.py [--tol 2e-5] FILE
"""
import argparse
import math
import sys

import torch
import torch.nn.functional as F


def params_of(words):
    out = {}
    for w in words:
        k, v = w.split("=", 1)
        out[k] = v
    return out


def ints(s):
    return [int(v) for v in s.split(",")]


def hex_tensor(words):
    """The tensor that words write: ndim, the shape, then hex float values
    (float64, so that torch sees exactly qkv's numbers)."""
    nd = int(words[0])
    shape = [int(v) for v in words[1:1 + nd]]
    vals = [float.fromhex(v) for v in words[1 + nd:]]
    return torch.tensor(vals, dtype=torch.float64).reshape(shape)


def read_cases(path):
    """Yields (label, op, params, tensors, y, dy, grads)."""
    with open(path) as f:
        lines = [ln.split() for ln in f if ln.strip()]
    i = 0
    while i < len(lines):
        head = lines[i]
        assert head[0] == "case", head
        label, op, params = head[1], head[2], params_of(head[3:])
        tensors, grads, y, dy = [], [], None, None
        i += 1
        while lines[i][0] != "end":
            w = lines[i]
            if w[0] in ("x", "c", "y"):
                t = hex_tensor(w[1:])
                if w[0] == "y":
                    y = t
                else:
                    tensors.append((w[0], t))
            elif w[0] == "dy":
                dy = [float.fromhex(v) for v in w[1:]]
            elif w[0] == "g":
                grads.append([float.fromhex(v) for v in w[1:]])
            i += 1
        i += 1
        yield label, op, params, tensors, y, dy, grads


def attention(q, k, v, mask, scale, causal):
    """softmax(scale·Q·Kᵀ + M)·V, with key j > i dropped when causal."""
    s = scale * (q @ k.transpose(-2, -1))
    if mask is not None:
        s = s + mask
    if causal:
        tq, tk = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.ones(tq, tk, dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(s, dim=-1) @ v


def attention_heads(x, heads, mask, scale, causal):
    b, t, d3 = x.shape
    d = d3 // 3

    def split(part):
        return part.reshape(b, t, heads, d // heads).permute(0, 2, 1, 3)

    q, k, v = split(x[..., :d]), split(x[..., d:2 * d]), split(x[..., 2 * d:])
    o = attention(q, k, v, mask, scale, causal)
    return o.permute(0, 2, 1, 3).reshape(b, t, d)


def rnn_scan(xw, wh, h0, act):
    h, states = h0, []
    for s in range(xw.shape[0]):
        pre = xw[s] if h is None else xw[s] + h @ wh
        h = torch.tanh(pre) if act == "tanh" else pre
        states.append(h)
    return torch.stack(states)


def rms_norm(x, gamma, eps):
    """x/√(mean x² + eps)·γ, by hand (torch 1.13 has no rms_norm)."""
    y = x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps)
    return y if gamma is None else y * gamma


def forward(op, p, xs, cs):
    """The op in torch, on the inputs xs (with gradients) and constants cs."""
    unary = {"exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "tanh": torch.tanh,
             "sigmoid": torch.sigmoid, "relu": torch.relu, "silu": F.silu,
             "gelu": lambda x: F.gelu(x, approximate="tanh"), "neg": torch.neg,
             "abs": torch.abs, "softplus": F.softplus,
             "softplus_exact": lambda x: F.relu(x) + torch.log1p(torch.exp(-x.abs())),
             "transpose": lambda x: x.transpose(-2, -1)}
    binary = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
              "matmul": torch.matmul, "matmul_nt": lambda a, b: a @ b.transpose(-2, -1)}
    reduce_dim = {"sum_dim": lambda x, d, k: x.sum(d, keepdim=k),
                  "mean_dim": lambda x, d, k: x.mean(d, keepdim=k),
                  "max_dim": lambda x, d, k: x.max(d, keepdim=k).values,
                  "min_dim": lambda x, d, k: x.min(d, keepdim=k).values,
                  "logsumexp_dim": lambda x, d, k: x.logsumexp(d, keepdim=k)}
    if op in unary:
        return unary[op](xs[0])
    if op in binary:
        return binary[op](xs[0], xs[1])
    if op in reduce_dim:
        return reduce_dim[op](xs[0], int(p["dim"]), bool(int(p["keepdim"])))
    if op == "var_dim":
        return torch.var(xs[0], int(p["dim"]), correction=int(p["correction"]),
                         keepdim=bool(int(p["keepdim"])))
    if op == "pow":
        return xs[0] ** float(p["p"])
    if op == "clamp":
        return torch.clamp(xs[0], float(p["min"]), float(p["max"]))
    if op == "leaky_relu":
        return F.leaky_relu(xs[0], float(p["slope"]))
    if op == "scale":
        return xs[0] * float(p["c"])
    if op == "mask":  # dropped entries pass no gradient, as masked_fill
        return xs[0].masked_fill((cs[0] == -math.inf).expand_as(xs[0]), -math.inf)
    if op == "affine":
        return xs[0] @ xs[1] + (xs[2] if len(xs) > 2 else 0)
    if op == "reshape":
        return xs[0].reshape(ints(p["shape"]))
    if op == "reshape_exp":
        return torch.exp(xs[0].reshape(ints(p["shape"])))
    if op == "permute":
        return xs[0].permute(ints(p["perm"]))
    if op == "swapdims":
        return xs[0].transpose(int(p["d0"]), int(p["d1"]))
    if op == "concat":
        return torch.cat(xs, dim=int(p["dim"]))
    if op == "stack":
        return torch.stack(xs, dim=int(p["dim"]))
    if op == "slice":
        return xs[0].narrow(int(p["dim"]), int(p["start"]), int(p["len"]))
    if op == "sum":
        return xs[0].sum()
    if op == "mean":
        return xs[0].mean()
    if op == "gather":
        return xs[0][cs[0].long()]
    if op == "pick_rows":
        return xs[0][torch.arange(xs[0].shape[0]), cs[0].long()]
    if op == "softmax":
        return torch.softmax(xs[0], dim=-1)
    if op == "log_softmax":
        return torch.log_softmax(xs[0], dim=-1)
    if op == "cross_entropy":
        c = xs[0].shape[-1]
        return F.cross_entropy(xs[0].reshape(-1, c), cs[0].reshape(-1).long(), ignore_index=-1,
                               label_smoothing=float(p.get("eps", 0)))
    if op == "mse":
        return F.mse_loss(xs[0], cs[0])
    if op == "l1_loss":
        return F.l1_loss(xs[0], cs[0])
    if op == "huber_loss":
        return F.huber_loss(xs[0], cs[0], delta=float(p["delta"]))
    if op == "bce_with_logits":
        return F.binary_cross_entropy_with_logits(xs[0], cs[0])
    if op == "layer_norm":
        g, b = (xs[1], xs[2]) if len(xs) > 1 else (None, None)
        return F.layer_norm(xs[0], xs[0].shape[-1:], g, b, float(p["eps"]))
    if op == "rms_norm":
        return rms_norm(xs[0], xs[1] if len(xs) > 1 else None, float(p["eps"]))
    mask = cs[0] if cs else None
    causal = p.get("causal") == "1"
    if op == "attention":
        return attention(xs[0], xs[1], xs[2], mask, float(p["scale"]), causal)
    if op == "attention_heads":
        return attention_heads(xs[0], int(p["heads"]), mask, float(p["scale"]), causal)
    if op == "embed_attention":  # wq [V,dk] (also wk), wv [V,dv]; ids and a mask
        ids = cs[0].long()
        return attention(xs[0][ids], xs[0][ids], xs[1][ids], cs[1], float(p["scale"]), False)
    if op == "rnn_scan":
        return rnn_scan(xs[0], xs[1], xs[2] if len(xs) > 2 else None, p["act"])
    raise ValueError(f"unknown op {op}")


def error(got, want):
    """max|got - want| / max|want| over the finite entries; infinities and
    NaNs must sit in the same places (inf if not)."""
    got = got.reshape(want.shape)
    fin = torch.isfinite(want)
    if not (torch.equal(fin, torch.isfinite(got)) and torch.equal(got.isnan(), want.isnan())
            and torch.equal(got.isposinf(), want.isposinf())):
        return math.inf
    if not fin.any():
        return 0.0
    diff = (got[fin] - want[fin]).abs().max().item()
    scale = want[fin].abs().max().item()
    return diff / scale if scale > 0 else diff


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tol", type=float, default=2e-5)
    ap.add_argument("file")
    args = ap.parse_args()
    torch.set_num_threads(1)
    worst, order, failures, n = {}, [], [], 0
    for label, op, p, tensors, y, dy, grads in read_cases(args.file):
        n += 1
        xs = [t.clone().requires_grad_(True) for role, t in tensors if role == "x"]
        cs = [t for role, t in tensors if role == "c"]
        out = forward(op, p, xs, cs)
        if tuple(out.shape) != tuple(y.shape):
            failures.append(f"{label}: shape {list(y.shape)}, torch {list(out.shape)}")
            continue
        out.backward(torch.tensor(dy, dtype=torch.float64).reshape(out.shape))
        errs = {"y": error(y, out.detach())}
        if len(grads) != len(xs):  # zip would leave a gradient unchecked
            failures.append(f"{label}: {len(grads)} gradients written for {len(xs)} inputs")
            continue
        for i, (x, g) in enumerate(zip(xs, grads)):
            want = x.grad if x.grad is not None else torch.zeros_like(x)
            errs[f"dx{i}"] = error(torch.tensor(g, dtype=torch.float64), want)
        name = label.split("-", 1)[1]
        if name not in worst:
            order.append(name)
            worst[name] = {}
        for k, e in errs.items():
            worst[name][k] = max(worst[name].get(k, 0.0), e)
            if not e <= args.tol:
                failures.append(f"{label}: {k} error {e:.2e} > {args.tol:.0e}")
    for name in order:
        e = worst[name]
        grads = " ".join(f"{k} {v:.1e}" for k, v in e.items() if k != "y")
        print(f"{name:26s} y {e['y']:.1e}  {grads}")
    top = max((max(e.values()) for e in worst.values()), default=float("nan"))
    print(f"torch_check: {n} cases, worst {top:.2e}, tolerance {args.tol:.0e}")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
