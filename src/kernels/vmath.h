/*
 * vmath.h - the vectorised element-wise maths of the AVX2 and AVX-512 sets
 * (avx2_math.c, avx512_math.c): the constants both share, so that the two
 * compute the same approximations, and their entry points. Private to
 * src/kernels; a float32 x86-64 build only.
 *
 * The methods, in float with fused multiply-adds:
 *   exp    x = t·ln2 + r, |r| <= ln2/2 (t·ln2 in two parts, so r is exact
 *          before the last part), e^r = 1 + (r + r²·Q(r)), then scaled by
 *          2^t in one rounding (subnormal results included).
 *   log    x = 2^k·m with m in [√½, √2), f = m - 1, s = f/(2 + f):
 *          log(1 + f) = f - (f²/2 - s·(f²/2 + R(s²))), R the atanh series;
 *          subnormal x scaled by 2^25 first.
 *   tanh   E/(E + 2) with E = e^(2|x|) - 1 = 2^t·(r + r²·Q(r)) + (2^t - 1):
 *          one formula for every x, no cancellation near 0 (where t = 0);
 *          the sign of x copied back (-0 stays -0). r = 2|x| - t·VM_LN2_HI
 *          alone, without exp's second part t·VM_LN2_LO: that is below
 *          t·1.9e-9, nothing at t = 0, and where t >= 1 (|x| >= 0.17)
 *          tanh's relative change from it is at most 0.06 ulp (at |x| =
 *          0.173: (1 - tanh²x)/(2·tanh x)·t·1.9e-9), shrinking as e^-2|x|
 *          beyond. Over every float in [-10, 10] the worst error stays
 *          2.42 ulp, and the map is 8 to 10% faster (one FMA of about 21
 *          operations a register, in a map bound by its FMA ports).
 *   sigmoid  x = t·ln2 + r as for exp, so e^-x = p·2^-t with p = e^-r
 *          (-r formed directly, as t·ln2 - x) and σ(x) = s/(s + p) with
 *          s = 2^t exact: one formula for every x, no select. A subnormal result
 *          is rounded once, by the division (s is exact down to 2^-149;
 *          from t = -150 on it is 0, where σ is below 0.71·2^-149).
 *          Against the form it replaced, z = e^-|x| and 1/(1 + z) or
 *          z/(1 + z) by the sign: no compare and select, and s apart from
 *          p's chain; 10% less time on 1M floats, worst error 2.48 ulp
 *          (it was 2.40) and 0.98 ulp of a subnormal (0.75).
 *   gelu   x·σ(v) with v = 2√(2/π)·(x + 0.044715·x³), which is the tanh form
 *          without its cancellation (1 + tanh(v/2) = 2σ(v)). σ(v) is e^v
 *          for v << 0, and an error in v is an error in e^v (at v = -87, a
 *          relative error of 2^-24 in v would be 5 ulp), so v is carried
 *          into e^(-|v|) as two floats, hi + lo, from error-free products:
 *          x² = a + ea and K2·x = w + ew (the FMA x·y - fl(x·y) is exact),
 *          1 + C·x² = u + eu (u - 1 is exact, u being in [1, 8)), and
 *          hi = fl(w·u), lo = (w·u - hi) + ew·u + w·eu; the terms dropped
 *          are below 2^-44 of v. K2 and C are split into float pairs. Its
 *          derivative is σ(v)·(1 + x·σ(-v)·K2·(1 + 3C·x²)) from the same σ.
 * Each quotient is one division. These maps are bound by arithmetic, not
 * memory (about 13 vector operations for exp, 19 for tanh, 16 for sigmoid),
 * so they spend no operation on a last half-ulp: tests/test_kernels.c
 * holds them to a few ulp, the bounds there.
 * Q has degree 4: a minimax fit of the relative error of r + r²·Q(r)
 * (scripts/fit_expm1.py), 1.3e-8 (0.22·2^-24) before its coefficients
 * were rounded to float. It replaced a degree-5 Q (a Chebyshev
 * interpolation, evaluated by Horner's rule): one FMA fewer and a chain
 * of four dependent operations after r², not six, since these maps wait
 * on that chain as much as on their operation count. Over every float of
 * the sweeps of tests/test_kernels.c the worst errors stayed where they
 * were (exp 0.99, tanh 2.42, gelu 3.40 ulp, and sigmoid 2.40 before its
 * own change above); on 1M floats exp took 14% less time, tanh 12%,
 * sigmoid 5 to 11%.
 */
#ifndef QKV_VMATH_H
#define QKV_VMATH_H

#include "kernels/kernels.h"

#ifdef QKV_HAVE_X86_KERNELS

/* ln 2 = VM_LN2_HI + VM_LN2_LO, the first part a float (so t·VM_LN2_HI
 * subtracted from x by one FMA is exact for |t| <= 255), and 1/ln 2. */
#define VM_LN2_HI 6.931471825e-01f
#define VM_LN2_LO (-1.904654323e-09f)
#define VM_LOG2E 1.442695022e+00f

/* exp's inputs are clamped to [VM_EXP_LO, VM_EXP_HI]: below -103.98,
 * e^x < 2^-150 rounds to 0, and from -112 on the exponent t is at most
 * -160, which the AVX2 scaling turns into 0 without an underflowing
 * multiplication (slow on some CPUs); above ln FLT_MAX = 88.7228, e^x
 * overflows to inf. */
#define VM_EXP_LO (-112.0f)
#define VM_EXP_HI 89.0f

/* sigmoid's inputs are clamped to at most this: from 16.7 on σ(x) rounds
 * to 1, and 2^t stays finite (t <= 127). */
#define VM_SIGMOID_HI 88.0f

/* Where e^x only serves in 1 + e^x (or beside 1), its exponent is raised
 * to at least this: no subnormals, and no change to 1 + e^x. */
#define VM_EXP_SUM_MIN (-80.0f)

/* e^r = 1 + r + r²·(Q0 + Q1·r + Q2·r² + Q3·r³ + Q4·r⁴) on |r| <= ln2/2,
 * evaluated as (Q0 + Q1·r) + r²·((Q2 + Q3·r) + r²·Q4): four dependent
 * operations from r², not six. */
#define VM_EXP_Q0 4.999999816e-01f
#define VM_EXP_Q1 1.666654367e-01f
#define VM_EXP_Q2 4.166719968e-02f
#define VM_EXP_Q3 8.366514082e-03f
#define VM_EXP_Q4 1.388252023e-03f

/* log: bits of √½, and log(1 + f) = 2·atanh(s): R(z) = z·(R1 + z·(R2 +
 * z·(R3 + z·R4))) with z = s² <= 0.0295 (the series 2/3, 2/5, 2/7, 2/9;
 * the next term is below 3e-9 relative). ln 2 split for k·ln 2 with k up
 * to 8 bits: VM_LOG_LN2_HI has its low 9 bits zero. */
#define VM_SQRT_HALF_BITS 0x3f3504f3
#define VM_LOG_R1 6.666666865e-01f
#define VM_LOG_R2 4.000000060e-01f
#define VM_LOG_R3 2.857142985e-01f
#define VM_LOG_R4 2.222222239e-01f
#define VM_LOG_LN2_HI 0.693145751953125f
#define VM_LOG_LN2_LO 1.428606765330187e-06f

/* tanh takes e^(2|x|) - 1 with 2|x| capped here: from |x| = 9.01 on,
 * tanh x rounds to 1 in float, and 2^29 keeps clear of overflow. */
#define VM_TANH_CAP 20.0f

/* GELU: v = x·K2·(1 + C·x²) with K2 = 2√(2/π) = VM_GELU_K2F + VM_GELU_K2L
 * and C = 0.044715 = VM_GELU_CH + VM_GELU_CL (each pair within 2^-48 of
 * the constant); its derivative's factor K2·(1 + 3C·x²) in one float each.
 * x is clamped to ±VM_GELU_BIG for v: from there on σ(v) is 0 or 1 in
 * float (e^-142 underflows), and the results are x and 0 (gradients 1 and
 * 0). The vector sets round t = round(v·log2 e) by adding 1.5·2^23, which
 * is round to nearest only in the default rounding mode: their accuracy
 * bounds hold there, as libm's do (under a directed mode a reviewer
 * measured 10 to 28 ulp). */
#define VM_GELU_K2F 1.595769167e+00f
#define VM_GELU_K2L (-4.534068054e-08f)
#define VM_GELU_CH 4.471499845e-02f
#define VM_GELU_CL 1.546144435e-09f
#define VM_GELU_K2C3F 2.140644491e-01f
#define VM_GELU_BIG 12.0f

/* The AVX2+FMA versions (avx2_math.c) and the AVX-512F ones
 * (avx512_math.c) of the kernel set's exp, log, tanh, sigmoid, gelu and
 * gelu_backward fields: the contracts of qkv_vexp and the others in
 * kernels.h, over any n; y may be x. */
void qkv_avx2_exp(float *y, const float *x, size_t n);
void qkv_avx2_log(float *y, const float *x, size_t n);
void qkv_avx2_tanh(float *y, const float *x, size_t n);
void qkv_avx2_sigmoid(float *y, const float *x, size_t n);
void qkv_avx2_gelu(float *y, const float *x, size_t n);
void qkv_avx2_gelu_backward(float *dx, const float *x, const float *dy, size_t n, int store);
void qkv_avx512_exp(float *y, const float *x, size_t n);
void qkv_avx512_log(float *y, const float *x, size_t n);
void qkv_avx512_tanh(float *y, const float *x, size_t n);
void qkv_avx512_sigmoid(float *y, const float *x, size_t n);
void qkv_avx512_gelu(float *y, const float *x, size_t n);
void qkv_avx512_gelu_backward(float *dx, const float *x, const float *dy, size_t n, int store);

#endif
#endif
