#!/usr/bin/env python3
"""Fit the polynomial Q of the vector exponential (src/kernels/vmath.h).

e^r - 1 = r + r^2 * Q(r) on |r| <= ln(2)/2, with Q of degree 4. The fit
minimises the largest relative error of r + r^2 * Q(r) against e^r - 1, by
Lawson's iteratively reweighted least squares on 400 Chebyshev nodes, in
40-digit arithmetic. It prints that error (in units of 2^-24) and the five
coefficients, which vmath.h holds rounded to float.

A developer's tool, not part of the build: it needs mpmath
(python3-mpmath) and takes about 20 seconds.
"""
import mpmath as mp

mp.mp.dps = 40
HALF_LN2 = mp.log(2) / 2
DEGREE = 4
NODES = [HALF_LN2 * mp.cos(mp.pi * (i + 0.5) / 400) for i in range(400)]


def q_exact(r):
    """(e^r - 1 - r) / r^2, the function Q approximates."""
    if abs(r) < mp.mpf("1e-10"):
        return mp.mpf(1) / 2 + r / 6
    return (mp.expm1(r) - r) / r**2


def weight(r):
    """An error in Q is this much relative error in e^r - 1."""
    return r * r / abs(mp.expm1(r)) if r != 0 else mp.mpf(0)


def fit():
    lawson = [mp.mpf(1)] * len(NODES)
    for _ in range(60):
        a = mp.matrix(DEGREE + 1, DEGREE + 1)
        b = mp.matrix(DEGREE + 1, 1)
        for r, lw in zip(NODES, lawson):
            s = weight(r) ** 2 * lw
            for i in range(DEGREE + 1):
                b[i] += s * r**i * q_exact(r)
                for j in range(DEGREE + 1):
                    a[i, j] += s * r ** (i + j)
        c = mp.lu_solve(a, b)
        errs = [abs(weight(r) * (sum(c[i] * r**i for i in range(DEGREE + 1)) - q_exact(r)))
                for r in NODES]
        total = sum(lw * e for lw, e in zip(lawson, errs))
        lawson = [lw * e / total for lw, e in zip(lawson, errs)]
    return c, max(errs)


def main():
    c, err = fit()
    print("largest relative error %s (%s x 2^-24)"
          % (mp.nstr(err, 5), mp.nstr(err / mp.mpf(2) ** -24, 4)))
    for i in range(DEGREE + 1):
        print("#define VM_EXP_Q%d %.9ef" % (i, float(c[i])))


if __name__ == "__main__":
    main()
