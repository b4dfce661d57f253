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

/* Σ x[j] (sq = 0) or Σ (x[j] - mu[i])² (sq = 1) over each of R rows of d
 * (row i at x + i·d) into out[i], in norm.c's order: partial j mod 32 in
 * lane j mod 8 of accumulator (j mod 32) / 8. The R rows' independent
 * chains are interleaved, so that the adds' latency overlaps. */
QKV_ALWAYS_INLINE void fwd_sums(const int R, const float *x, size_t d, const double *mu, int sq,
                                double *out)
{
    __m512d a[4][4], vmu[4];
    for (int i = 0; i < R; i++) {
        vmu[i] = _mm512_set1_pd(sq ? mu[i] : 0);
        for (int q = 0; q < 4; q++)
            a[i][q] = _mm512_setzero_pd();
    }
    size_t j = 0;
    for (; j + 32 <= d; j += 32)
        for (int q = 0; q < 4; q++)
            for (int i = 0; i < R; i++)
                a[i][q] = fwd_add(a[i][q], x + i * d + j + 8 * q, 8, sq, vmu[i]);
    if (j < d)
        for (int q = 0; q < 4 && 8 * (size_t)q < d - j; q++)
            for (int i = 0; i < R; i++)
                a[i][q] = fwd_add(a[i][q], x + i * d + j + 8 * q, (int)(d - j) - 8 * q, sq, vmu[i]);
    /* h = 16: partial l + partial l+16; h = 8: then l + l+8 */
    for (int i = 0; i < R; i++)
        out[i] =
            halve8(_mm512_add_pd(_mm512_add_pd(a[i][0], a[i][2]), _mm512_add_pd(a[i][1], a[i][3])));
}

/* The output of one row: y = (x - m)·s [·γ] [+ β] in float. */
QKV_ALWAYS_INLINE void norm_out(float *y, const float *x, const float *gamma, const float *beta,
                                size_t d, float m, float s)
{
    const __m512 vm = _mm512_set1_ps(m), vs = _mm512_set1_ps(s);
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

/* The forward of one row of d <= 16·C entries (C <= 4 a constant), its
 * values as doubles held in registers between the two sums. */
QKV_ALWAYS_INLINE void norm_row_regs(const int C, float *y, float *mean, float *rstd,
                                     const float *x, const float *gamma, const float *beta,
                                     size_t d, double eps, int center)
{
    __m512d v[8], a[4];
    __mmask8 m8[8];
    for (int q = 0; q < C; q++) {
        const int w = d - 16 * (size_t)q < 16 ? (int)(d - 16 * (size_t)q) : 16;
        const __m512 f = load16(lanes(w), x + 16 * q); /* 0 past the end */
        v[2 * q] = cvt_half(f, 0);
        v[2 * q + 1] = cvt_half(f, 1);
        m8[2 * q] = (__mmask8)(w >= 8 ? 0xFF : (1u << w) - 1);
        m8[2 * q + 1] = (__mmask8)(w >= 16 ? 0xFF : w <= 8 ? 0 : (1u << (w - 8)) - 1);
    }
    /* chunk q holds partials 16·(q mod 2) .. +15: accumulators 2·(q mod 2), +1 */
    const __m512d one = _mm512_set1_pd(1);
    double mu = 0;
    if (center) {
        for (int k = 0; k < 4; k++)
            a[k] = _mm512_setzero_pd();
        for (int q = 0; q < C; q++) /* x·1 + a: the add, on the multiply units */
            for (int h = 0; h < 2; h++)
                a[2 * (q % 2) + h] = _mm512_fmadd_pd(v[2 * q + h], one, a[2 * (q % 2) + h]);
        mu =
            halve8(_mm512_add_pd(_mm512_add_pd(a[0], a[2]), _mm512_add_pd(a[1], a[3]))) / (double)d;
    }
    const __m512d vmu = _mm512_set1_pd(mu);
    for (int k = 0; k < 4; k++)
        a[k] = _mm512_setzero_pd();
    for (int q = 0; q < C; q++)
        for (int h = 0; h < 2; h++) {
            const __m512d t = _mm512_maskz_sub_pd(m8[2 * q + h], v[2 * q + h], vmu);
            a[2 * (q % 2) + h] = _mm512_add_pd(a[2 * (q % 2) + h], _mm512_mul_pd(t, t));
        }
    const double var =
        halve8(_mm512_add_pd(_mm512_add_pd(a[0], a[2]), _mm512_add_pd(a[1], a[3]))) / (double)d;
    const double rs = 1 / sqrt(var + eps);
    *mean = (float)mu;
    *rstd = (float)rs;
    norm_out(y, x, gamma, beta, d, (float)mu, (float)rs);
}

/* The forward of R rows. */
QKV_ALWAYS_INLINE void norm_rows_r(const int R, float *y, float *mean, float *rstd, const float *x,
                                   const float *gamma, const float *beta, size_t d, double eps,
                                   int center)
{
    double mu[4] = {0, 0, 0, 0}, var[4];
    if (center) {
        fwd_sums(R, x, d, mu, 0, mu);
        for (int i = 0; i < R; i++)
            mu[i] /= (double)d;
    }
    fwd_sums(R, x, d, mu, 1, var);
    for (int i = 0; i < R; i++) {
        const double rs = 1 / sqrt(var[i] / (double)d + eps);
        mean[i] = (float)mu[i];
        rstd[i] = (float)rs;
        norm_out(y + i * d, x + i * d, gamma, beta, d, (float)mu[i], (float)rs);
    }
}

/* Every row by norm_row_regs with C chunks (a case of the switch below). */
#define NORM_REGS(C)                                                                             \
    for (size_t r = 0; r < rows; r++)                                                            \
        norm_row_regs(C, y + r * d, mean + r, rstd + r, x + r * d, gamma, beta, d, eps, center); \
    break

/* qkv_norm_rows on AVX-512: rows of up to 64 in registers, longer ones
 * four at a time (whose independent chains overlap: 10% faster at 128,
 * where one row's 16 registers of doubles leave no room for a second). */
void qkv_norm_avx512(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                     const float *beta, size_t rows, size_t d, double eps, int center)
{
    switch ((d + 15) / 16) {
    case 0: return;
    case 1: NORM_REGS(1);
    case 2: NORM_REGS(2);
    case 3: NORM_REGS(3);
    case 4: NORM_REGS(4);
    default: {
        size_t r = 0;
        for (; r + 4 <= rows; r += 4)
            norm_rows_r(4, y + r * d, mean + r, rstd + r, x + r * d, gamma, beta, d, eps, center);
        for (; r < rows; r++)
            norm_rows_r(1, y + r * d, mean + r, rstd + r, x + r * d, gamma, beta, d, eps, center);
    }
    }
}

/* The backward of R rows: first their sums, with dγ and dβ updated in row
 * order (each chunk of them loaded once for the R rows), then dx. */
QKV_ALWAYS_INLINE void norm_backward_r(const int R, float *dx, float *dgamma, float *dbeta,
                                       const float *dy, const float *x, const float *mean,
                                       const float *rstd, const float *gamma, size_t d, int center)
{
    __m512 vm[4], vs[4];
    /* partial j mod 16 in lane j mod 8 of the accumulator for half (j mod 16) / 8 */
    __m512d sg[4][2], sx[4][2];
    for (int i = 0; i < R; i++) {
        vm[i] = _mm512_set1_ps(mean[i]);
        vs[i] = _mm512_set1_ps(rstd[i]);
        sg[i][0] = sg[i][1] = sx[i][0] = sx[i][1] = _mm512_setzero_pd();
    }
    for (size_t j = 0; j < d; j += 16) {
        const __mmask16 mk = lanes(d - j < 16 ? (int)(d - j) : 16);
        const __m512 gv = gamma != NULL ? load16(mk, gamma + j) : _mm512_setzero_ps();
        __m512 dg = dgamma != NULL ? load16(mk, dgamma + j) : _mm512_setzero_ps();
        __m512 db = dbeta != NULL ? load16(mk, dbeta + j) : _mm512_setzero_ps();
        for (int i = 0; i < R; i++) {
            const __m512 dyv = load16(mk, dy + i * d + j); /* 0 past the end, and so is g */
            const __m512 xhat =
                _mm512_maskz_mul_ps(mk, _mm512_sub_ps(load16(mk, x + i * d + j), vm[i]), vs[i]);
            const __m512 g = gamma != NULL ? _mm512_mul_ps(dyv, gv) : dyv;
            const __m512d g0 = cvt_half(g, 0), g1 = cvt_half(g, 1);
            if (center) {
                sg[i][0] = _mm512_add_pd(sg[i][0], g0);
                sg[i][1] = _mm512_add_pd(sg[i][1], g1);
            }
            sx[i][0] = _mm512_add_pd(sx[i][0], _mm512_mul_pd(g0, cvt_half(xhat, 0)));
            sx[i][1] = _mm512_add_pd(sx[i][1], _mm512_mul_pd(g1, cvt_half(xhat, 1)));
            dg = _mm512_add_ps(dg, _mm512_mul_ps(dyv, xhat));
            db = _mm512_add_ps(db, dyv);
        }
        if (dgamma != NULL)
            store16(dgamma + j, mk, dg);
        if (dbeta != NULL)
            store16(dbeta + j, mk, db);
    }
    if (dx == NULL)
        return;
    __m512 fm[4], fx[4];
    for (int i = 0; i < R; i++) {
        /* h = 8: partial l + partial l+8, then the last three levels */
        const double mg = center ? halve8(_mm512_add_pd(sg[i][0], sg[i][1])) / (double)d : 0;
        const double mgx = halve8(_mm512_add_pd(sx[i][0], sx[i][1])) / (double)d;
        fm[i] = _mm512_set1_ps((float)mg);
        fx[i] = _mm512_set1_ps((float)mgx);
    }
    for (size_t j = 0; j < d; j += 16) {
        const __mmask16 mk = lanes(d - j < 16 ? (int)(d - j) : 16);
        const __m512 gv = gamma != NULL ? load16(mk, gamma + j) : _mm512_setzero_ps();
        for (int i = 0; i < R; i++) {
            const __m512 dyv = load16(mk, dy + i * d + j);
            const __m512 xhat =
                _mm512_mul_ps(_mm512_sub_ps(load16(mk, x + i * d + j), vm[i]), vs[i]);
            const __m512 g = gamma != NULL ? _mm512_mul_ps(dyv, gv) : dyv;
            const __m512 t = _mm512_sub_ps(_mm512_sub_ps(g, fm[i]), _mm512_mul_ps(xhat, fx[i]));
            float *dxr = dx + i * d + j;
            store16(dxr, mk, _mm512_add_ps(load16(mk, dxr), _mm512_mul_ps(vs[i], t)));
        }
    }
}

/* qkv_norm_rows_backward on AVX-512: four rows at a time. */
void qkv_norm_backward_avx512(float *dx, float *dgamma, float *dbeta, const float *dy,
                              const float *x, const float *mean, const float *rstd,
                              const float *gamma, size_t rows, size_t d, int center)
{
    size_t r = 0;
    for (; r + 4 <= rows; r += 4)
        norm_backward_r(4, dx != NULL ? dx + r * d : NULL, dgamma, dbeta, dy + r * d, x + r * d,
                        mean + r, rstd + r, gamma, d, center);
    for (; r < rows; r++)
        norm_backward_r(1, dx != NULL ? dx + r * d : NULL, dgamma, dbeta, dy + r * d, x + r * d,
                        mean + r, rstd + r, gamma, d, center);
}
#else
typedef int qkv_no_avx512_norm; /* ISO C wants a declaration */
#endif
