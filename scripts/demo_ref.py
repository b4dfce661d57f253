#!/usr/bin/env python3
"""The tutorial's self-attention demo with its fixed settings made into flags.

With no flags it prints exactly what ../shared/seed/selfattn_demo.py prints
(scripts/golden.py checks this). It is the outside reference for
`qkv demo --d-model/--d-k/--seed/--no-scale`: pure Python, double precision.
"""
import argparse
import math
import random


def matmul(a, b):
    return [[sum(a[i][p] * b[p][j] for p in range(len(b))) for j in range(len(b[0]))]
            for i in range(len(a))]


def softmax(row):
    top = max(row)
    e = [math.exp(v - top) for v in row]
    s = sum(e)
    return [v / s for v in e]


def show(rows):
    for i, row in enumerate(rows):
        print(f"  第 {i} 行: {[f'{v:.4f}' for v in row]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d-model", type=int, default=8)
    ap.add_argument("--d-k", type=int, default=6)
    ap.add_argument("--seq-len", type=int, default=4)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--no-scale", action="store_true")
    o = ap.parse_args()
    random.seed(o.seed)
    w = [[[random.normalvariate(0, 0.1) for _ in range(o.d_k)] for _ in range(o.d_model)]
         for _ in range(3)]
    x = [[1.0 if j == i else 0.0 for j in range(o.d_model)] for i in range(o.seq_len)]
    rule = "=" * 50
    print(rule + "\nRunoob 自注意力演示\n" + rule)
    print(f"输入序列长度: {o.seq_len}\n输入维度: {o.d_model}\n")
    q, k, v = (matmul(x, m) for m in w)
    for name, m in zip("QKV", (q, k, v)):
        print(f"{name} 的形状: {len(m)} × {len(m[0])}")
    scores = matmul(q, [list(c) for c in zip(*k)])
    print("\n原始注意力分数:")
    show(scores)
    if o.no_scale:
        used = scores
        print("\n未缩放（--no-scale）: 原始分数直接进入 Softmax")
    else:
        used = [[s / math.sqrt(o.d_k) for s in row] for row in scores]
        print("\n缩放后的注意力分数:")
        show(used)
    attn = [softmax(row) for row in used]
    print("\n注意力权重（Softmax 后）:")
    show(attn)
    out = matmul(attn, v)
    print("\n" + rule + "\n自注意力输出:\n" + rule)
    for i, row in enumerate(out):
        print(f"词 {i} 的输出: {[f'{v:.4f}' for v in row]}")


if __name__ == "__main__":
    main()
