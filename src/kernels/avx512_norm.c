/*
 * avx512_norm.c - layer norm and RMS norm, forward and backward, for
 * AVX-512, giving the portable versions' bits (norm.c defines the order of
 * the sums): the forward's 32 partial sums in the lanes of four double
 * accumulators, the backward's 16 in two per sum, and the float arithmetic
 * 16 entries at a time, the same operations in the same order. Compiled
 * with -mavx512f; runs only after dispatch.c found AVX-512F. A float32
 * x86-64 build only: otherwise this file is empty.
 */
#include "kernels/kernels.h"

#ifdef QKV_HAVE_X86_KERNELS
#include <math.h>

#include "kernels/avx512.h"

/* Lanes 0-7 (hf = 0) or 8-15 (hf = 1) of v, as doubles. */
QKV_ALWAYS_INLINE __m512d cvt_half(__m512 v, int hf)
{
    const __m512d d = _mm512_castps_pd(v);
    return _mm512_cvtps_pd(
        _mm256_castpd_ps(hf == 0 ? _mm512_castpd512_pd256(d) : _mm512_extractf64x4_pd(d, 1)));
}

/* The halving tree's last three levels, from 8 partials in the lanes:
 * (l + l+4), then (l + l+2), then lane 0 + lane 1. */
QKV_ALWAYS_INLINE double halve8(__m512d s)
{
    const __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(s), _mm512_extractf64x4_pd(s, 1));
    const __m128d g = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
    return _mm_cvtsd_f64(g) + _mm_cvtsd_f64(_mm_unpackhi_pd(g, g));
}

/* Adds entries x[j..j+8) of a row into a (partials 8q..8q+7 of 32 when
 * j = 32i + 8q): x itself, or (x - mu)² when sq; w < 8 entries left are a
 * tail, with the lanes past it adding nothing. */
QKV_ALWAYS_INLINE __m512d fwd_add(__m512d a, const float *x, int w, int sq, __m512d mu)
{
    const __mmask8 m = (__mmask8)(w >= 8 ? 0xFF : (1u << w) - 1);
    __m512d v = w >= 8 ? _mm512_cvtps_pd(_mm256_loadu_ps(x))
                       : _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_maskz_loadu_ps(m, x)));
    if (sq) {
        v = w >= 8 ? _mm512_sub_pd(v, mu) : _mm512_maskz_sub_pd(m, v, mu);
        v = _mm512_mul_pd(v, v);
    }
    return _mm512_add_pd(a, v);
}

/* Σ x[j] (sq = 0) or Σ (x[j] - mu)² (sq = 1) over a row of d, in norm.c's
 * order: partial j mod 32 in lane j mod 8 of accumulator (j mod 32) / 8. */
QKV_ALWAYS_INLINE double fwd_sum(const float *x, size_t d, double mu, int sq)
{
    const __m512d vmu = _mm512_set1_pd(mu);
    __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    size_t j = 0;
    for (; j + 32 <= d; j += 32) {
        a0 = fwd_add(a0, x + j, 8, sq, vmu);
        a1 = fwd_add(a1, x + j + 8, 8, sq, vmu);
        a2 = fwd_add(a2, x + j + 16, 8, sq, vmu);
        a3 = fwd_add(a3, x + j + 24, 8, sq, vmu);
    }
    if (j < d) {
        const int w = (int)(d - j);
        a0 = fwd_add(a0, x + j, w, sq, vmu);
        if (w > 8)
            a1 = fwd_add(a1, x + j + 8, w - 8, sq, vmu);
        if (w > 16)
            a2 = fwd_add(a2, x + j + 16, w - 16, sq, vmu);
        if (w > 24)
            a3 = fwd_add(a3, x + j + 24, w - 24, sq, vmu);
    }
    /* h = 16: partial l + partial l+16; h = 8: then l + l+8 */
    return halve8(_mm512_add_pd(_mm512_add_pd(a0, a2), _mm512_add_pd(a1, a3)));
}

void qkv_norm_avx512(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                     const float *beta, size_t rows, size_t d, double eps, int center)
{
    for (size_t r = 0; r < rows; r++, x += d, y += d) {
        const double mu = center ? fwd_sum(x, d, 0, 0) / (double)d : 0;
        const double var = fwd_sum(x, d, mu, 1) / (double)d;
        const double rs = 1 / sqrt(var + eps);
        mean[r] = (float)mu;
        rstd[r] = (float)rs;
        const __m512 vm = _mm512_set1_ps((float)mu), vs = _mm512_set1_ps((float)rs);
        for (size_t j = 0; j < d; j += 16) {
            const __mmask16 mk = lanes(d - j < 16 ? (int)(d - j) : 16);
            __m512 v = _mm512_mul_ps(_mm512_sub_ps(load16(mk, x + j), vm), vs);
            if (gamma != NULL)
                v = _mm512_mul_ps(v, load16(mk, gamma + j));
            if (beta != NULL)
                v = _mm512_add_ps(v, load16(mk, beta + j));
            store16(y + j, mk, v);
        }
    }
}

void qkv_norm_backward_avx512(float *dx, float *dgamma, float *dbeta, const float *dy,
                              const float *x, const float *mean, const float *rstd,
                              const float *gamma, size_t rows, size_t d, int center)
{
    for (size_t r = 0; r < rows; r++, x += d, dy += d) {
        const __m512 vm = _mm512_set1_ps(mean[r]), vs = _mm512_set1_ps(rstd[r]);
        /* partial j mod 16 in lane j mod 8 of the accumulator for half (j mod 16) / 8 */
        __m512d sg0 = _mm512_setzero_pd(), sg1 = sg0, sx0 = sg0, sx1 = sg0;
        for (size_t j = 0; j < d; j += 16) {
            const __mmask16 mk = lanes(d - j < 16 ? (int)(d - j) : 16);
            const __m512 dyv = load16(mk, dy + j); /* 0 past the end, and so is g */
            const __m512 xhat = _mm512_maskz_mul_ps(mk, _mm512_sub_ps(load16(mk, x + j), vm), vs);
            const __m512 g = gamma != NULL ? _mm512_mul_ps(dyv, load16(mk, gamma + j)) : dyv;
            const __m512d g0 = cvt_half(g, 0), g1 = cvt_half(g, 1);
            if (center) {
                sg0 = _mm512_add_pd(sg0, g0);
                sg1 = _mm512_add_pd(sg1, g1);
            }
            sx0 = _mm512_add_pd(sx0, _mm512_mul_pd(g0, cvt_half(xhat, 0)));
            sx1 = _mm512_add_pd(sx1, _mm512_mul_pd(g1, cvt_half(xhat, 1)));
            if (dgamma != NULL)
                store16(dgamma + j, mk,
                        _mm512_add_ps(load16(mk, dgamma + j), _mm512_mul_ps(dyv, xhat)));
            if (dbeta != NULL)
                store16(dbeta + j, mk, _mm512_add_ps(load16(mk, dbeta + j), dyv));
        }
        if (dx == NULL)
            continue;
        /* h = 8: partial l + partial l+8, then the last three levels */
        const double mg = center ? halve8(_mm512_add_pd(sg0, sg1)) / (double)d : 0;
        const double mgx = halve8(_mm512_add_pd(sx0, sx1)) / (double)d;
        const __m512 fm = _mm512_set1_ps((float)mg), fx = _mm512_set1_ps((float)mgx);
        float *dxr = dx + r * d;
        for (size_t j = 0; j < d; j += 16) {
            const __mmask16 mk = lanes(d - j < 16 ? (int)(d - j) : 16);
            const __m512 dyv = load16(mk, dy + j);
            const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(load16(mk, x + j), vm), vs);
            const __m512 g = gamma != NULL ? _mm512_mul_ps(dyv, load16(mk, gamma + j)) : dyv;
            const __m512 t = _mm512_sub_ps(_mm512_sub_ps(g, fm), _mm512_mul_ps(xhat, fx));
            store16(dxr + j, mk, _mm512_add_ps(load16(mk, dxr + j), _mm512_mul_ps(vs, t)));
        }
    }
}
#else
typedef int qkv_no_avx512_norm; /* ISO C wants a declaration */
#endif
