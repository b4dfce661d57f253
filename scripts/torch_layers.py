#!/usr/bin/env python3
"""Recomputes qkv's layers with PyTorch's own modules, float64 on the CPU.

tests/test_torch_layers.c writes FILE, one case after another:

    case SET-LABEL KIND [KEY=VALUE ...]
    TAG NAME NDIM SHAPE... VALUES...      (one line per tensor)
    end

with the values in hex floats, so that torch starts from exactly qkv's
numbers (the hyperparameters of a training run too). The tags: "p" a
parameter as qkv stores it (a linear weight is [in, out], the transpose
of nn.Linear's), "x" an input with a gradient (x; a recurrent case's
first state h0, c0), "ids" and "tg" token ids and targets
(-1: ignored), "pad" a padding mask [B,T] of 0 and -inf; then qkv's
results: "y" an output, "dy" the gradient seeded at the output of that
name, "g" the gradient of the input or parameter of that name, "loss"
the losses of a training run, one per step, and "q" a parameter after it.

KIND says what torch builds from the parameters, by their names:

  mha    nn.MultiheadAttention(D, H, batch_first=True): in_proj_weight is
         qkv's ATTN.qkv.weight transposed (so its rows are Q, K, V, each
         split into H heads of D/H consecutive features, as qkv splits
         the columns), out_proj is ATTN.proj; the causal flag is an
         upper-triangular boolean attn_mask and the padding a boolean
         key_padding_mask. Outputs: y and the attention weights, per head.
  block  nn.TransformerEncoderLayer(norm_first=True, dropout=0, activation
         GELU's tanh form, batch_first=True): x + MHA(LN1(x)), then
         x + FFN(LN2(x)); norm1/norm2 are BLK.ln1/ln2, self_attn BLK.attn,
         linear1/linear2 BLK.ffn.up/down.
  model  nn.Embedding (emb) + a learned position table (pos) + the
         sinusoidal table of "Attention Is All You Need" (written here),
         blocks blk0, blk1, ... as above, a final nn.LayerNorm (lnf), an
         nn.Linear head (head), and F.cross_entropy (mean, ignore_index
         -1). Outputs: the loss, the logits and the sinusoidal table.
  rnn, lstm, gru
         nn.RNN (tanh), nn.LSTM or nn.GRU, time-major, from CELL.wx and
         CELL.wh transposed (weight_ih, weight_hh) and CELL.b (bias_ih,
         with bias_hh frozen at zero: qkv keeps their sum) or CELL.bx and
         CELL.bh; x [T,B,in], the first state h0 (and c0) when the file
         has it (tag "x", with a gradient), else zeros. Outputs: y, every
         step's state, and the LSTM's last cell state c.
  train  the model, trained for steps=K steps by torch.optim.AdamW with two
         parameter groups: weight decay wd on the weights and embeddings,
         none on the biases and the norms' gains and biases (decided here
         from the names); the rate of step s (from 0) is a linear warm-up
         lr_max·(s+1)/warmup for s < warmup, then a cosine from lr_max to
         lr_min at step total (a LambdaLR). Compares the loss of every step
         and every parameter's displacement q - p.

Every parameter in the file must be bound to a torch parameter, and every
torch parameter to one of the file's (else the case fails). The error of a
tensor is max|qkv - torch| / max|torch|. Prints each case label's worst
errors over the kernel sets and exits 1 if one exceeds --tol (--tol-train
for the training runs).

    /usr/bin/python3 scripts/torch_layers.py [--tol T] [--tol-train T] FILE
"""
import argparse
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_check import hex_tensor  # the file format both scripts read

F64 = torch.float64


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def read_cases(path):
    """Yields (label, kind, params, [(tag, name, tensor)])."""
    with open(path) as f:
        lines = [ln.split() for ln in f if ln.strip()]
    i = 0
    while i < len(lines):
        head = lines[i]
        assert head[0] == "case", head
        label, kind = head[1], head[2]
        params = dict(w.split("=", 1) for w in head[3:])
        items = []
        i += 1
        while lines[i][0] != "end":
            w = lines[i]
            items.append((w[0], w[1], hex_tensor(w[2:])))
            i += 1
        i += 1
        yield label, kind, params, items


class Binder:
    """Builds torch modules from qkv's parameters (by name) and remembers
    which torch parameter holds which of them, and whether transposed."""

    def __init__(self, p):
        self.p = p
        self.links = []

    def load(self, name, tp, transpose=False):
        v = self.p[name].T if transpose else self.p[name]
        if tuple(v.shape) != tuple(tp.shape):
            raise ValueError(f"{name}: qkv {list(v.shape)}, torch {list(tp.shape)}")
        with torch.no_grad():
            tp.copy_(v)
        self.links.append((name, tp, transpose))

    def linear_into(self, lin, prefix):
        self.load(prefix + ".weight", lin.weight, transpose=True)
        self.load(prefix + ".bias", lin.bias)

    def norm_into(self, ln, prefix):
        self.load(prefix + ".weight", ln.weight)
        self.load(prefix + ".bias", ln.bias)

    def mha_into(self, mha, prefix):
        self.load(prefix + ".qkv.weight", mha.in_proj_weight, transpose=True)
        self.load(prefix + ".qkv.bias", mha.in_proj_bias)
        self.linear_into(mha.out_proj, prefix + ".proj")

    def mha(self, prefix, heads):
        d = self.p[prefix + ".proj.weight"].shape[0]
        m = nn.MultiheadAttention(d, heads, dropout=0.0, bias=True, batch_first=True, dtype=F64)
        self.mha_into(m, prefix)
        return m

    def block(self, prefix, heads):
        d, hidden = self.p[prefix + ".ffn.up.weight"].shape
        b = nn.TransformerEncoderLayer(d, heads, dim_feedforward=hidden, dropout=0.0,
                                       activation=gelu_tanh, layer_norm_eps=1e-5,
                                       batch_first=True, norm_first=True, dtype=F64)
        b.train()  # no fast path; dropout is 0 anyway
        self.norm_into(b.norm1, prefix + ".ln1")
        self.mha_into(b.self_attn, prefix + ".attn")
        self.norm_into(b.norm2, prefix + ".ln2")
        self.linear_into(b.linear1, prefix + ".ffn.up")
        self.linear_into(b.linear2, prefix + ".ffn.down")
        return b

    def check(self, modules):
        """Every file parameter bound once; every torch parameter bound,
        but for those frozen at zero (zero_frozen)."""
        names = [n for n, _, _ in self.links]
        if sorted(names) != sorted(self.p):
            raise ValueError(f"bound {sorted(names)}, file has {sorted(self.p)}")
        bound = {id(tp) for _, tp, _ in self.links}
        for m in modules:
            for n, tp in m.named_parameters():
                if id(tp) not in bound and tp.requires_grad:
                    raise ValueError(f"torch parameter {n} has no qkv parameter")

    @staticmethod
    def zero_frozen(tp):
        """A torch parameter qkv has no counterpart for, which it sums
        into another (nn.RNN's and nn.LSTM's bias_hh, added to bias_ih):
        zero, and no gradient."""
        with torch.no_grad():
            tp.zero_()
        tp.requires_grad_(False)

    def recurrent(self, kind, prefix):
        """nn.RNN (tanh), nn.LSTM or nn.GRU, one layer, time-major, from
        qkv's W_x [in, kH] and W_h [H, kH] (the transposes of weight_ih and
        weight_hh, the gates in the same order) and its bias: b, the sum of
        bias_ih and bias_hh (RNN, LSTM), or bx and bh (GRU)."""
        n_in, kh = self.p[prefix + ".wx"].shape
        h = self.p[prefix + ".wh"].shape[0]
        if kind == "rnn":
            m = nn.RNN(n_in, h, nonlinearity="tanh", dtype=F64)
        elif kind == "lstm":
            m = nn.LSTM(n_in, h, dtype=F64)
        else:
            m = nn.GRU(n_in, h, dtype=F64)
        if m.weight_ih_l0.shape[0] != kh:
            raise ValueError(f"{prefix}.wx [{n_in}, {kh}] is no {kind} of {h} states")
        self.load(prefix + ".wx", m.weight_ih_l0, transpose=True)
        self.load(prefix + ".wh", m.weight_hh_l0, transpose=True)
        if kind == "gru":
            self.load(prefix + ".bx", m.bias_ih_l0)
            self.load(prefix + ".bh", m.bias_hh_l0)
        else:
            self.load(prefix + ".b", m.bias_ih_l0)
            self.zero_frozen(m.bias_hh_l0)
        return m

    def params(self):
        return [tp for _, tp, _ in self.links]

    def grad(self, name):
        for n, tp, tr in self.links:
            if n == name:
                g = tp.grad if tp.grad is not None else torch.zeros_like(tp)
                return g.T if tr else g
        raise KeyError(name)

    def value(self, name):
        for n, tp, tr in self.links:
            if n == name:
                return (tp.T if tr else tp).detach()
        raise KeyError(name)


def masks(one, pad, t):
    """The boolean attn_mask (True: not allowed) and key_padding_mask."""
    causal = torch.ones(t, t, dtype=torch.bool).triu(1) if one.get("causal") == "1" else None
    kpm = (pad == -math.inf) if pad is not None else None
    return causal, kpm


def sinusoidal(t, d):
    """pe[pos, 2i] = sin(pos / 10000^(2i/d)), pe[pos, 2i+1] = cos(the same)."""
    pos = torch.arange(t, dtype=F64).unsqueeze(1)
    two_i = torch.arange(0, d, 2, dtype=F64)
    angle = pos / torch.pow(torch.tensor(10000.0, dtype=F64), two_i / d)
    pe = torch.zeros(t, d, dtype=F64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, :d // 2])
    return pe


class Model:
    """The model case's network, from the parameters' names."""

    def __init__(self, b, heads, nblocks):
        v, d = b.p["emb.weight"].shape
        self.emb = nn.Embedding(v, d, dtype=F64)
        b.load("emb.weight", self.emb.weight)
        self.pos = nn.Parameter(torch.zeros_like(b.p["pos.weight"]))
        b.load("pos.weight", self.pos)
        self.blocks = [b.block(f"blk{i}", heads) for i in range(nblocks)]
        self.lnf = nn.LayerNorm(d, eps=1e-5, dtype=F64)
        b.norm_into(self.lnf, "lnf")
        self.head = nn.Linear(d, v, dtype=F64)
        b.linear_into(self.head, "head")
        self.modules = [self.emb, self.lnf, self.head] + self.blocks
        self.v = v
        b.check(self.modules + [nn.ParameterList([self.pos])])

    def __call__(self, one, ids, tg, pad):
        t = ids.shape[1]
        pe = sinusoidal(self.pos.shape[0], self.pos.shape[1])
        x = self.emb(ids) + self.pos[:t] + pe[:t]
        causal, kpm = masks(one, pad, t)
        for blk in self.blocks:
            x = blk(x, src_mask=causal, src_key_padding_mask=kpm)
        logits = self.head(self.lnf(x))
        loss = F.cross_entropy(logits.reshape(-1, self.v), tg.reshape(-1), ignore_index=-1)
        return {"loss": loss, "logits": logits, "pe": pe}


def forward(kind, one, p, inputs):
    """torch's outputs (a dict) and the Binder, for one case."""
    b = Binder(p)
    pad = inputs.get("pad")
    if kind == "mha":
        m = b.mha("attn", int(one["heads"]))
        b.check([m])
        x = inputs["x"]
        causal, kpm = masks(one, pad, x.shape[1])
        y, w = m(x, x, x, key_padding_mask=kpm, need_weights=True, attn_mask=causal,
                 average_attn_weights=False)
        return {"y": y, "attn": w}, b
    if kind == "block":
        blk = b.block("blk", int(one["heads"]))
        b.check([blk])
        x = inputs["x"]
        causal, kpm = masks(one, pad, x.shape[1])
        return {"y": blk(x, src_mask=causal, src_key_padding_mask=kpm)}, b
    if kind == "model":
        model = Model(b, int(one["heads"]), int(one["blocks"]))
        return model(one, inputs["ids"].long(), inputs["tg"].long(), pad), b
    if kind in ("rnn", "lstm", "gru"):
        m = b.recurrent(kind, "cell")
        b.check([m])
        x, h0, c0 = inputs["x"], inputs.get("h0"), inputs.get("c0")
        if kind == "lstm":
            zero = torch.zeros(x.shape[1], m.hidden_size, dtype=F64)
            state = ((h0 if h0 is not None else zero).unsqueeze(0),
                     (c0 if c0 is not None else zero).unsqueeze(0))
            y, (_, cn) = m(x, state)
            return {"y": y, "c": cn[0]}, b
        y, _ = m(x, h0.unsqueeze(0) if h0 is not None else None)
        return {"y": y}, b
    raise ValueError(f"unknown kind {kind}")


def error(got, want):
    """max|got - want| / max|want| (0/0 is 0); inf for a shape mismatch or
    a NaN."""
    if got.numel() != want.numel():
        return math.inf
    got = got.reshape(want.shape)
    diff = (got - want).abs().max().item()
    scale = want.abs().max().item()
    if math.isnan(diff):
        return math.inf
    return diff / scale if scale > 0 else diff


def check_case(kind, one, items):
    """{quantity: error} for a forward-and-backward case."""
    p = {n: t for tag, n, t in items if tag == "p"}
    inputs = {n: t.clone().requires_grad_(tag == "x") for tag, n, t in items
              if tag in ("x", "ids", "tg", "pad")}
    outs, b = forward(kind, one, p, inputs)
    errs = {}
    seeds = {n: t for tag, n, t in items if tag == "dy"}
    total = 0
    for tag, n, t in items:
        if tag == "y":
            errs[n] = error(t, outs[n].detach())
            if n in seeds:
                total = total + (outs[n] * seeds[n].reshape(outs[n].shape)).sum()
            elif outs[n].dim() == 0:
                total = total + outs[n]
    total.backward()
    grads = [(n, t) for tag, n, t in items if tag == "g"]
    if sorted(n for n, _ in grads) != sorted(list(p) + [n for tag, n, _ in items if tag == "x"]):
        raise ValueError("the file's gradients are not those of every parameter and input")
    for n, t in grads:
        want = inputs[n].grad if n in inputs else b.grad(n)
        errs["d" + n] = error(t, want)
    return errs


def schedule(s, warmup, total, lr_max, lr_min):
    if s >= total:
        return lr_min
    if s < warmup:
        return lr_max * (s + 1) / warmup
    progress = (s - warmup) / (total - warmup)
    return lr_min + 0.5 * (lr_max - lr_min) * (1 + math.cos(math.pi * progress))


def decays(name):
    """GPT-2's rule, from the name: no decay for biases and norms."""
    last = name.split(".")
    return last[-1] != "bias" and not any(w.startswith("ln") for w in last[:-1])


def check_train(one, items):
    p = {n: t for tag, n, t in items if tag == "p"}
    inputs = {n: t for tag, n, t in items if tag in ("ids", "tg", "pad")}
    b = Binder(p)
    model = Model(b, int(one["heads"]), int(one["blocks"]))
    wd = float.fromhex(one["wd"])
    groups = [{"params": [tp for n, tp, _ in b.links if decays(n)], "weight_decay": wd},
              {"params": [tp for n, tp, _ in b.links if not decays(n)], "weight_decay": 0.0}]
    lr_max, lr_min = float.fromhex(one["lr_max"]), float.fromhex(one["lr_min"])
    warmup, total, steps = int(one["warmup"]), int(one["total"]), int(one["steps"])
    betas = (float.fromhex(one["beta1"]), float.fromhex(one["beta2"]))
    opt = torch.optim.AdamW(groups, lr=lr_max, betas=betas, eps=float.fromhex(one["eps"]))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: schedule(s, warmup, total, lr_max, lr_min) / lr_max)
    ids, tg = inputs["ids"].long(), inputs["tg"].long()
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = model(one, ids, tg, inputs.get("pad"))["loss"]
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    errs = {}
    got = {n: t for tag, n, t in items if tag in ("loss", "q")}
    errs["loss"] = error(got["loss"], torch.tensor(losses, dtype=F64))
    qs = [(n, t) for tag, n, t in items if tag == "q"]
    if sorted(n for n, _ in qs) != sorted(p):
        raise ValueError("the file's trained parameters are not every parameter")
    for n, q in qs:  # the displacement, which the decay and the steps make
        errs["q." + n] = error(q - p[n], b.value(n) - p[n])
    return errs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--tol-train", type=float, default=1e-4)
    ap.add_argument("file")
    args = ap.parse_args()
    torch.set_num_threads(1)
    worst, order, failures, n = {}, [], [], 0
    for label, kind, one, items in read_cases(args.file):
        n += 1
        try:
            errs = check_train(one, items) if kind == "train" else check_case(kind, one, items)
        except (ValueError, KeyError, RuntimeError) as e:
            failures.append(f"{label}: {e}")
            continue
        tol = args.tol_train if kind == "train" else args.tol
        name = label.split("-", 1)[1]
        if name not in worst:
            order.append(name)
            worst[name] = {}
        for k, e in errs.items():
            worst[name][k] = max(worst[name].get(k, 0.0), e)
            if not e <= tol:
                failures.append(f"{label}: {k} error {e:.2e} > {tol:.0e}")
    for name in order:
        e = worst[name]
        top = max(e, key=e.get)
        outs = " ".join(f"{k} {v:.1e}" for k, v in e.items() if not k.startswith(("d", "q.")))
        print(f"{name:22s} {outs}  worst {top} {e[top]:.1e}")
    top = max((max(e.values()) for e in worst.values()), default=float("nan"))
    print(f"torch_layers: {n} cases, worst {top:.2e}, tolerance {args.tol:.0e}, "
          f"training {args.tol_train:.0e}")
    for f in failures:
        print("FAIL", f)
    return 1 if failures or n == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
