#!/usr/bin/env python3
"""多头注意力演示: the tutorial's pure-Python forward pass, in its own style
(random.seed(42), lists of lists, no numpy), taken to H heads the way its
next article describes: Q, K and V are computed once, their columns are
split into H heads of width d_k / H, each head attends on its own with
scores scaled by sqrt(d_k / H), the heads' outputs are concatenated, and
an output projection Wo (d_k x d_k) mixes them.

The weights are drawn as the tutorial draws them, N(0, 0.1) row by row,
Wq, Wk, Wv, then Wo. With one head it is the tutorial's layer exactly (no
Wo) and prints what the tutorial prints.

This is the outside reference for `qkv demo --heads H` (tests/test_demo.c):

  python3 scripts/mha_demo.py [--heads H] [--d-model N] [--d-k N] [--seq-len N]
                              [--seed N] [--no-scale]
"""
import argparse
import math
import random


def softmax(x: list) -> list:
    max_val = max(x)
    exp_x = [math.exp(v - max_val) for v in x]
    sum_exp = sum(exp_x)
    return [v / sum_exp for v in exp_x]


def matrix_multiply(A: list, B: list) -> list:
    m, n, p = len(A), len(B), len(B[0])
    result = [[0.0 for _ in range(p)] for _ in range(m)]
    for i in range(m):
        for j in range(p):
            for k in range(n):
                result[i][j] += A[i][k] * B[k][j]
    return result


def transpose(matrix: list) -> list:
    return list(map(list, zip(*matrix)))


def columns(matrix: list, start: int, width: int) -> list:
    return [row[start:start + width] for row in matrix]


def show(title: str, matrix: list) -> None:
    print(f"\n{title}")
    for i, row in enumerate(matrix):
        print(f"  第 {i} 行: {[f'{v:.4f}' for v in row]}")


class MultiHeadAttention:
    def __init__(self, d_model: int, d_k: int, heads: int, seed: int, scaled: bool):
        random.seed(seed)
        self.scaled = scaled
        self.d_model, self.d_k, self.heads = d_model, d_k, heads
        self.d_head = d_k // heads
        self.Wq = [[random.normalvariate(0, 0.1) for _ in range(d_k)] for _ in range(d_model)]
        self.Wk = [[random.normalvariate(0, 0.1) for _ in range(d_k)] for _ in range(d_model)]
        self.Wv = [[random.normalvariate(0, 0.1) for _ in range(d_k)] for _ in range(d_model)]
        if heads > 1:
            self.Wo = [[random.normalvariate(0, 0.1) for _ in range(d_k)] for _ in range(d_k)]

    def forward(self, X: list) -> list:
        Q = matrix_multiply(X, self.Wq)
        K = matrix_multiply(X, self.Wk)
        V = matrix_multiply(X, self.Wv)
        print("Q 的形状:", len(Q), "×", len(Q[0]))
        print("K 的形状:", len(K), "×", len(K[0]))
        print("V 的形状:", len(V), "×", len(V[0]))
        head_outputs = []
        for h in range(self.heads):
            lo = h * self.d_head
            if self.heads > 1:
                print(f"\n---------- 第 {h} 个头（Q、K、V 的第 {lo} 到 {lo + self.d_head - 1} 列）"
                      "----------")
            Qh, Kh, Vh = (columns(M, lo, self.d_head) for M in (Q, K, V))
            scores = matrix_multiply(Qh, transpose(Kh))
            show("原始注意力分数:", scores)
            if self.scaled:
                scale_factor = math.sqrt(self.d_head)
                scores_scaled = [[v / scale_factor for v in row] for row in scores]
                show("缩放后的注意力分数:", scores_scaled)
            else:
                scores_scaled = scores
                print("\n未缩放（--no-scale）: 原始分数直接进入 Softmax")
            weights = [softmax(row) for row in scores_scaled]
            show("注意力权重（Softmax 后）:", weights)
            out = matrix_multiply(weights, Vh)
            if self.heads > 1:
                show(f"第 {h} 个头的输出（{len(out)} × {len(out[0])}）:", out)
            head_outputs.append(out)
        if self.heads == 1:
            return head_outputs[0]
        concat = [sum((o[i] for o in head_outputs), []) for i in range(len(X))]
        print("\n" + "-" * 50)
        show(f"拼接 {self.heads} 个头的输出（{len(concat)} × {len(concat[0])}）:", concat)
        print(f"\n输出投影 Wo 的形状: {len(self.Wo)} × {len(self.Wo[0])}")
        return matrix_multiply(concat, self.Wo)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=8)
    ap.add_argument("--d-k", type=int, default=6)
    ap.add_argument("--seq-len", type=int, default=4)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--no-scale", action="store_true")
    o = ap.parse_args()
    X = [[1.0 if j == i else 0.0 for j in range(o.d_model)] for i in range(o.seq_len)]
    rule = "=" * 50
    print(rule)
    print("Runoob 自注意力演示" if o.heads == 1 else "Runoob 多头注意力演示")
    print(rule)
    print(f"输入序列长度: {len(X)}")
    print(f"输入维度: {len(X[0])}")
    if o.heads > 1:
        print(f"头数: {o.heads}，每个头的维度: {o.d_k} / {o.heads} = {o.d_k // o.heads}")
    print()
    output = MultiHeadAttention(o.d_model, o.d_k, o.heads, o.seed, not o.no_scale).forward(X)
    print("\n" + rule)
    print("自注意力输出:" if o.heads == 1 else "多头注意力输出:")
    print(rule)
    for i, row in enumerate(output):
        print(f"词 {i} 的输出: {[f'{v:.4f}' for v in row]}")


if __name__ == "__main__":
    main()
