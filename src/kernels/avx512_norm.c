/*
 * avx512_norm.c - layer norm and RMS norm, forward and backward, for
 * AVX-512, giving the portable versions' bits (norm.c defines the order of
 * the sums): the forward's 32 partial sums in the lanes of two float
 * accumulators, the backward's 16 in one per sum, and every operation the
 * portable set's, 16 entries at a time, in the same order. Rows go four at
 * a time, so that their independent chains of adds overlap. Compiled with
 * -mavx512f; runs only after dispatch.c found AVX-512F. A float32 x86-64
 * build only: otherwise this file is empty.
 */
#include "kernels/kernels.h"

#ifdef QKV_HAVE_X86_KERNELS
#include <math.h>

#include "kernels/avx512.h"

/* The pointer p + j, or NULL when p is. */
#define AT(p, j) ((p) != NULL ? (p) + (j) : NULL)

/* The halving tree over 16 partials in the lanes: l + l+8, then l + l+4,
 * l + l+2 and lane 0 + lane 1. */
QKV_ALWAYS_INLINE float halve16(__m512 s)
{
    const __m512d d = _mm512_castps_pd(s);
    const __m256 h = _mm256_add_ps(_mm256_castpd_ps(_mm512_castpd512_pd256(d)),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(d, 1)));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

/* a + x[0..w) (sq = 0) or a + (x[0..w) - mu)² (sq = 1), the lanes past w
 * adding +0. */
QKV_ALWAYS_INLINE __m512 fwd_add(__m512 a, const float *x, int w, int sq, __m512 mu)
{
    const __mmask16 mk = lanes(w);
    __m512 v = load16(mk, x);
    if (sq) {
        v = w >= 16 ? _mm512_sub_ps(v, mu) : _mm512_maskz_sub_ps(mk, v, mu);
        v = _mm512_mul_ps(v, v);
    }
    return _mm512_add_ps(a, v);
}

/* Σ x[j] (sq = 0) or Σ (x[j] - mu[i])² (sq = 1) over each of R rows of d
 * (row i at x + i·d) into out[i], in norm.c's order: partial j mod 32 in
 * lane j mod 16 of accumulator (j mod 32) / 16. */
QKV_ALWAYS_INLINE void fwd_sums(const int R, const float *x, size_t d, const float *mu, int sq,
                                float *out)
{
    __m512 a[4][2], vmu[4];
    for (int i = 0; i < R; i++) {
        vmu[i] = _mm512_set1_ps(sq ? mu[i] : 0);
        a[i][0] = a[i][1] = _mm512_setzero_ps();
    }
    size_t j = 0;
    for (; j + 32 <= d; j += 32)
        for (int q = 0; q < 2; q++)
            for (int i = 0; i < R; i++)
                a[i][q] = fwd_add(a[i][q], x + i * d + j + 16 * q, 16, sq, vmu[i]);
    for (int q = 0; q < 2 && j + 16 * (size_t)q < d; q++) {
        const size_t left = d - j - 16 * (size_t)q;
        for (int i = 0; i < R; i++)
            a[i][q] =
                fwd_add(a[i][q], x + i * d + j + 16 * q, left < 16 ? (int)left : 16, sq, vmu[i]);
    }
    for (int i = 0; i < R; i++) /* h = 16: partial l + partial l+16 */
        out[i] = halve16(_mm512_add_ps(a[i][0], a[i][1]));
}

/* Entries j..j+16 (those in mk) of R rows' output, y = (x - m)·s [·γ]
 * [+ β], with x, y, γ and β at entry j and rows d apart. */
QKV_ALWAYS_INLINE void norm_out(const int R, float *y, const float *x, const float *gamma,
                                const float *beta, size_t d, __mmask16 mk, const __m512 *vm,
                                const __m512 *vs)
{
    const __m512 gv = gamma != NULL ? load16(mk, gamma) : _mm512_setzero_ps();
    const __m512 bv = beta != NULL ? load16(mk, beta) : _mm512_setzero_ps();
    for (int i = 0; i < R; i++) {
        __m512 v = _mm512_mul_ps(_mm512_sub_ps(load16(mk, x + i * d), vm[i]), vs[i]);
        if (gamma != NULL)
            v = _mm512_mul_ps(v, gv);
        if (beta != NULL)
            v = _mm512_add_ps(v, bv);
        store16(y + i * d, mk, v);
    }
}

/* The forward of R rows: y = (x - m)·s [·γ] [+ β]. */
QKV_ALWAYS_INLINE void norm_rows_r(const int R, float *y, float *mean, float *rstd, const float *x,
                                   const float *gamma, const float *beta, size_t d, double eps,
                                   int center)
{
    float mu[4] = {0, 0, 0, 0}, var[4];
    if (center) {
        fwd_sums(R, x, d, mu, 0, mu);
        for (int i = 0; i < R; i++)
            mu[i] /= (float)d;
    }
    fwd_sums(R, x, d, mu, 1, var);
    __m512 vm[4], vs[4];
    for (int i = 0; i < R; i++) {
        const float rs = (float)(1 / sqrt((double)(var[i] / (float)d) + eps));
        mean[i] = mu[i];
        rstd[i] = rs;
        vm[i] = _mm512_set1_ps(mu[i]);
        vs[i] = _mm512_set1_ps(rs);
    }
    size_t j = 0;
    for (; j + 16 <= d; j += 16)
        norm_out(R, y + j, x + j, AT(gamma, j), AT(beta, j), d, 0xFFFF, vm, vs);
    if (j < d)
        norm_out(R, y + j, x + j, AT(gamma, j), AT(beta, j), d, lanes((int)(d - j)), vm, vs);
}

/* qkv_norm_rows on AVX-512: four rows at a time. */
void qkv_norm_avx512(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                     const float *beta, size_t rows, size_t d, double eps, int center)
{
    if (d == 0)
        return;
    size_t r = 0;
    for (; r + 4 <= rows; r += 4)
        norm_rows_r(4, y + r * d, mean + r, rstd + r, x + r * d, gamma, beta, d, eps, center);
    for (; r < rows; r++)
        norm_rows_r(1, y + r * d, mean + r, rstd + r, x + r * d, gamma, beta, d, eps, center);
}

/* The backward's sums over entries j..j+16 (those in mk) of R rows, with
 * dy, x, γ, dγ and dβ at entry j and rows d apart: Σ g into sg and Σ g·x̂
 * into sx (partial j mod 16 in lane j mod 16), and dγ += Σ dy·x̂,
 * dβ += Σ dy in row order (into one buffer, each row's dγ term then its
 * dβ term, when they are the same). */
QKV_ALWAYS_INLINE void bwd_sums(const int R, float *dgamma, float *dbeta, const float *dy,
                                const float *x, const float *gamma, size_t d, __mmask16 mk,
                                int center, const __m512 *vm, const __m512 *vs, __m512 *sg,
                                __m512 *sx)
{
    const __m512 gv = gamma != NULL ? load16(mk, gamma) : _mm512_setzero_ps();
    __m512 dg = dgamma != NULL ? load16(mk, dgamma) : _mm512_setzero_ps();
    __m512 db = dbeta != NULL ? load16(mk, dbeta) : _mm512_setzero_ps();
    const int same = dbeta == dgamma; /* layer_norm(x, p, p): both gradients are p's */
    for (int i = 0; i < R; i++) {
        const __m512 dyv = load16(mk, dy + i * d); /* 0 past the end, and so is g */
        __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(load16(mk, x + i * d), vm[i]), vs[i]);
        if (mk != 0xFFFF)
            xhat = _mm512_maskz_mov_ps(mk, xhat);
        const __m512 g = gamma != NULL ? _mm512_mul_ps(dyv, gv) : dyv;
        if (center)
            sg[i] = _mm512_add_ps(sg[i], g);
        sx[i] = _mm512_add_ps(sx[i], _mm512_mul_ps(g, xhat));
        if (dgamma != NULL)
            dg = _mm512_add_ps(dg, _mm512_mul_ps(dyv, xhat));
        if (dbeta != NULL && same) /* one buffer: the portable order, dγ then dβ */
            dg = _mm512_add_ps(dg, dyv);
        else if (dbeta != NULL)
            db = _mm512_add_ps(db, dyv);
    }
    if (dgamma != NULL)
        store16(dgamma, mk, dg);
    if (dbeta != NULL && !same)
        store16(dbeta, mk, db);
}

/* dx += s·(g - mean(g) - x̂·mean(g·x̂)) over entries j..j+16 (those in
 * mk) of R rows (with store, dx = 0 + that, dx unread), every pointer at
 * entry j and rows d apart. */
QKV_ALWAYS_INLINE void bwd_dx(const int R, float *dx, const float *dy, const float *x,
                              const float *gamma, size_t d, __mmask16 mk, const __m512 *vm,
                              const __m512 *vs, const __m512 *fm, const __m512 *fx, int store)
{
    const __m512 gv = gamma != NULL ? load16(mk, gamma) : _mm512_setzero_ps();
    for (int i = 0; i < R; i++) {
        const __m512 dyv = load16(mk, dy + i * d);
        const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(load16(mk, x + i * d), vm[i]), vs[i]);
        const __m512 g = gamma != NULL ? _mm512_mul_ps(dyv, gv) : dyv;
        const __m512 t = _mm512_sub_ps(_mm512_sub_ps(g, fm[i]), _mm512_mul_ps(xhat, fx[i]));
        const __m512 dx0 = store ? _mm512_setzero_ps() : load16(mk, dx + i * d);
        store16(dx + i * d, mk, _mm512_add_ps(dx0, _mm512_mul_ps(vs[i], t)));
    }
}

/* The backward of R rows: first their sums, with dγ and dβ updated in row
 * order (each chunk of them loaded once for the R rows), then dx. */
QKV_ALWAYS_INLINE void norm_backward_r(const int R, float *dx, float *dgamma, float *dbeta,
                                       const float *dy, const float *x, const float *mean,
                                       const float *rstd, const float *gamma, size_t d, int center,
                                       int store)
{
    __m512 vm[4], vs[4], sg[4], sx[4];
    for (int i = 0; i < R; i++) {
        vm[i] = _mm512_set1_ps(mean[i]);
        vs[i] = _mm512_set1_ps(rstd[i]);
        sg[i] = sx[i] = _mm512_setzero_ps();
    }
    const size_t full = d / 16 * 16;
    const __mmask16 tail = lanes((int)(d - full));
    for (size_t j = 0; j < full; j += 16)
        bwd_sums(R, AT(dgamma, j), AT(dbeta, j), dy + j, x + j, AT(gamma, j), d, 0xFFFF, center, vm,
                 vs, sg, sx);
    if (full < d)
        bwd_sums(R, AT(dgamma, full), AT(dbeta, full), dy + full, x + full, AT(gamma, full), d,
                 tail, center, vm, vs, sg, sx);
    if (dx == NULL)
        return;
    __m512 fm[4], fx[4];
    for (int i = 0; i < R; i++) {
        fm[i] = _mm512_set1_ps(center ? halve16(sg[i]) / (float)d : 0);
        fx[i] = _mm512_set1_ps(halve16(sx[i]) / (float)d);
    }
    for (size_t j = 0; j < full; j += 16)
        bwd_dx(R, dx + j, dy + j, x + j, AT(gamma, j), d, 0xFFFF, vm, vs, fm, fx, store);
    if (full < d)
        bwd_dx(R, dx + full, dy + full, x + full, AT(gamma, full), d, tail, vm, vs, fm, fx, store);
}

/* qkv_norm_rows_backward on AVX-512: four rows at a time. */
void qkv_norm_backward_avx512(float *dx, float *dgamma, float *dbeta, const float *dy,
                              const float *x, const float *mean, const float *rstd,
                              const float *gamma, size_t rows, size_t d, int center, int store)
{
    size_t r = 0;
    for (; r + 4 <= rows; r += 4)
        norm_backward_r(4, dx != NULL ? dx + r * d : NULL, dgamma, dbeta, dy + r * d, x + r * d,
                        mean + r, rstd + r, gamma, d, center, store);
    for (; r < rows; r++)
        norm_backward_r(1, dx != NULL ? dx + r * d : NULL, dgamma, dbeta, dy + r * d, x + r * d,
                        mean + r, rstd + r, gamma, d, center, store);
}
#else
typedef int qkv_no_avx512_norm; /* ISO C wants a declaration */
#endif
