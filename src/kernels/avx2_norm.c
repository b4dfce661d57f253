/*
 * avx2_norm.c - layer norm and RMS norm, forward and backward, for AVX2,
 * giving the portable versions' bits (norm.c defines the order of the
 * sums): the forward's 32 partial sums in the lanes of four float
 * accumulators, the backward's 16 in two per sum, and every operation the
 * portable set's, 8 entries at a time, in the same order. Rows go two at a
 * time, so that their independent chains of adds overlap. Compiled with
 * -mavx2 -mfma (no FMA is used); runs only after dispatch.c found both. A
 * float32 x86-64 build only: otherwise this file is empty.
 */
#include "kernels/kernels.h"

#ifdef QKV_HAVE_X86_KERNELS
#include "kernels/avx2.h"

/* The pointer p + j, or NULL when p is. */
#define AT(p, j) ((p) != NULL ? (p) + (j) : NULL)

/* The halving tree's last three levels, over 8 partials in the lanes:
 * l + l+4, then l + l+2 and lane 0 + lane 1. */
QKV_ALWAYS_INLINE float halve8(__m256 s)
{
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

/* a + x[0..w) (sq = 0) or a + (x[0..w) - mu)² (sq = 1), the lanes past w
 * adding +0. */
QKV_ALWAYS_INLINE __m256 fwd_add(__m256 a, const float *x, int w, int sq, __m256 mu)
{
    __m256 v = load8(w, x);
    if (sq) {
        v = _mm256_sub_ps(v, mu);
        if (w < 8)
            v = _mm256_and_ps(v, _mm256_castsi256_ps(lanes8(w)));
        v = _mm256_mul_ps(v, v);
    }
    return _mm256_add_ps(a, v);
}

/* Σ x[j] (sq = 0) or Σ (x[j] - mu[i])² (sq = 1) over each of R rows of d
 * (row i at x + i·d) into out[i], in norm.c's order: partial j mod 32 in
 * lane j mod 8 of accumulator (j mod 32) / 8. */
QKV_ALWAYS_INLINE void fwd_sums(const int R, const float *x, size_t d, const float *mu, int sq,
                                float *out)
{
    __m256 a[2][4], vmu[2];
    for (int i = 0; i < R; i++) {
        vmu[i] = _mm256_set1_ps(sq ? mu[i] : 0);
        for (int q = 0; q < 4; q++)
            a[i][q] = _mm256_setzero_ps();
    }
    size_t j = 0;
    for (; j + 32 <= d; j += 32)
        for (int q = 0; q < 4; q++)
            for (int i = 0; i < R; i++)
                a[i][q] = fwd_add(a[i][q], x + i * d + j + 8 * q, 8, sq, vmu[i]);
    for (int q = 0; q < 4 && j + 8 * (size_t)q < d; q++) {
        const size_t left = d - j - 8 * (size_t)q;
        for (int i = 0; i < R; i++)
            a[i][q] = fwd_add(a[i][q], x + i * d + j + 8 * q, left < 8 ? (int)left : 8, sq, vmu[i]);
    }
    /* h = 16: partial l + partial l+16; h = 8: l + l+8 */
    for (int i = 0; i < R; i++)
        out[i] =
            halve8(_mm256_add_ps(_mm256_add_ps(a[i][0], a[i][2]), _mm256_add_ps(a[i][1], a[i][3])));
}

/* Entries j..j+w of R rows' output, y = (x - m)·s [·γ] [+ β], with x, y,
 * γ and β at entry j and rows d apart. */
QKV_ALWAYS_INLINE void norm_out(const int R, float *y, const float *x, const float *gamma,
                                const float *beta, size_t d, int w, const __m256 *vm,
                                const __m256 *vs)
{
    const __m256 gv = gamma != NULL ? load8(w, gamma) : _mm256_setzero_ps();
    const __m256 bv = beta != NULL ? load8(w, beta) : _mm256_setzero_ps();
    for (int i = 0; i < R; i++) {
        __m256 v = _mm256_mul_ps(_mm256_sub_ps(load8(w, x + i * d), vm[i]), vs[i]);
        if (gamma != NULL)
            v = _mm256_mul_ps(v, gv);
        if (beta != NULL)
            v = _mm256_add_ps(v, bv);
        store8(y + i * d, w, v);
    }
}

/* The forward of R rows. */
QKV_ALWAYS_INLINE void norm_rows_r(const int R, float *y, float *mean, float *rstd, const float *x,
                                   const float *gamma, const float *beta, size_t d, double eps,
                                   int center)
{
    float mu[2] = {0, 0}, var[2];
    if (center) {
        fwd_sums(R, x, d, mu, 0, mu);
        for (int i = 0; i < R; i++)
            mu[i] /= (float)d;
    }
    fwd_sums(R, x, d, mu, 1, var);
    __m256 vm[2], vs[2];
    for (int i = 0; i < R; i++) {
        const float rs = (float)(1 / sqrt((double)(var[i] / (float)d) + eps));
        mean[i] = mu[i];
        rstd[i] = rs;
        vm[i] = _mm256_set1_ps(mu[i]);
        vs[i] = _mm256_set1_ps(rs);
    }
    size_t j = 0;
    for (; j + 8 <= d; j += 8)
        norm_out(R, y + j, x + j, AT(gamma, j), AT(beta, j), d, 8, vm, vs);
    if (j < d)
        norm_out(R, y + j, x + j, AT(gamma, j), AT(beta, j), d, (int)(d - j), vm, vs);
}

/* qkv_norm_rows on AVX2: two rows at a time. */
void qkv_norm_avx2(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                   const float *beta, size_t rows, size_t d, double eps, int center)
{
    if (d == 0)
        return;
    size_t r = 0;
    for (; r + 2 <= rows; r += 2)
        norm_rows_r(2, y + r * d, mean + r, rstd + r, x + r * d, gamma, beta, d, eps, center);
    for (; r < rows; r++)
        norm_rows_r(1, y + r * d, mean + r, rstd + r, x + r * d, gamma, beta, d, eps, center);
}

/* The backward's sums over entries j..j+w of R rows, with dy, x, γ, dγ and
 * dβ at entry j and rows d apart: Σ g into sg and Σ g·x̂ into sx (partial
 * j mod 16 in lane j mod 8 of accumulator (j mod 16) / 8, q here), and
 * dγ += Σ dy·x̂, dβ += Σ dy in row order (into one buffer, each row's
 * dγ term then its dβ term, when they are the same). */
QKV_ALWAYS_INLINE void bwd_sums(const int R, float *dgamma, float *dbeta, const float *dy,
                                const float *x, const float *gamma, size_t d, int w, int q,
                                int center, const __m256 *vm, const __m256 *vs, __m256 (*sg)[2],
                                __m256 (*sx)[2])
{
    const __m256 gv = gamma != NULL ? load8(w, gamma) : _mm256_setzero_ps();
    __m256 dg = dgamma != NULL ? load8(w, dgamma) : _mm256_setzero_ps();
    __m256 db = dbeta != NULL ? load8(w, dbeta) : _mm256_setzero_ps();
    const int same = dbeta == dgamma; /* layer_norm(x, p, p): both gradients are p's */
    for (int i = 0; i < R; i++) {
        const __m256 dyv = load8(w, dy + i * d); /* 0 past the end, and so is g */
        __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(load8(w, x + i * d), vm[i]), vs[i]);
        if (w < 8)
            xhat = _mm256_and_ps(xhat, _mm256_castsi256_ps(lanes8(w)));
        const __m256 g = gamma != NULL ? _mm256_mul_ps(dyv, gv) : dyv;
        if (center)
            sg[i][q] = _mm256_add_ps(sg[i][q], g);
        sx[i][q] = _mm256_add_ps(sx[i][q], _mm256_mul_ps(g, xhat));
        if (dgamma != NULL)
            dg = _mm256_add_ps(dg, _mm256_mul_ps(dyv, xhat));
        if (dbeta != NULL && same) /* one buffer: the portable order, dγ then dβ */
            dg = _mm256_add_ps(dg, dyv);
        else if (dbeta != NULL)
            db = _mm256_add_ps(db, dyv);
    }
    if (dgamma != NULL)
        store8(dgamma, w, dg);
    if (dbeta != NULL && !same)
        store8(dbeta, w, db);
}

/* dx += s·(g - mean(g) - x̂·mean(g·x̂)) over entries j..j+w of R rows
 * (with store, dx = 0 + that, dx unread), every pointer at entry j and
 * rows d apart. */
QKV_ALWAYS_INLINE void bwd_dx(const int R, float *dx, const float *dy, const float *x,
                              const float *gamma, size_t d, int w, const __m256 *vm,
                              const __m256 *vs, const __m256 *fm, const __m256 *fx, int store)
{
    const __m256 gv = gamma != NULL ? load8(w, gamma) : _mm256_setzero_ps();
    for (int i = 0; i < R; i++) {
        const __m256 dyv = load8(w, dy + i * d);
        const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(load8(w, x + i * d), vm[i]), vs[i]);
        const __m256 g = gamma != NULL ? _mm256_mul_ps(dyv, gv) : dyv;
        const __m256 t = _mm256_sub_ps(_mm256_sub_ps(g, fm[i]), _mm256_mul_ps(xhat, fx[i]));
        const __m256 dx0 = store ? _mm256_setzero_ps() : load8(w, dx + i * d);
        store8(dx + i * d, w, _mm256_add_ps(dx0, _mm256_mul_ps(vs[i], t)));
    }
}

/* The backward of R rows: first their sums, with dγ and dβ updated in row
 * order, then dx. */
QKV_ALWAYS_INLINE void norm_backward_r(const int R, float *dx, float *dgamma, float *dbeta,
                                       const float *dy, const float *x, const float *mean,
                                       const float *rstd, const float *gamma, size_t d, int center,
                                       int store)
{
    __m256 vm[2], vs[2], sg[2][2], sx[2][2];
    for (int i = 0; i < R; i++) {
        vm[i] = _mm256_set1_ps(mean[i]);
        vs[i] = _mm256_set1_ps(rstd[i]);
        sg[i][0] = sg[i][1] = sx[i][0] = sx[i][1] = _mm256_setzero_ps();
    }
    size_t j = 0;
    for (; j + 16 <= d; j += 16)
        for (int q = 0; q < 2; q++)
            bwd_sums(R, AT(dgamma, j + 8 * q), AT(dbeta, j + 8 * q), dy + j + 8 * q, x + j + 8 * q,
                     AT(gamma, j + 8 * q), d, 8, q, center, vm, vs, sg, sx);
    for (int q = 0; q < 2 && j + 8 * (size_t)q < d; q++) {
        const size_t at = j + 8 * (size_t)q, left = d - at;
        bwd_sums(R, AT(dgamma, at), AT(dbeta, at), dy + at, x + at, AT(gamma, at), d,
                 left < 8 ? (int)left : 8, q, center, vm, vs, sg, sx);
    }
    if (dx == NULL)
        return;
    __m256 fm[2], fx[2];
    for (int i = 0; i < R; i++) { /* h = 8: partial l + partial l+8 */
        fm[i] = _mm256_set1_ps(center ? halve8(_mm256_add_ps(sg[i][0], sg[i][1])) / (float)d : 0);
        fx[i] = _mm256_set1_ps(halve8(_mm256_add_ps(sx[i][0], sx[i][1])) / (float)d);
    }
    for (j = 0; j + 8 <= d; j += 8)
        bwd_dx(R, dx + j, dy + j, x + j, AT(gamma, j), d, 8, vm, vs, fm, fx, store);
    if (j < d)
        bwd_dx(R, dx + j, dy + j, x + j, AT(gamma, j), d, (int)(d - j), vm, vs, fm, fx, store);
}

/* qkv_norm_rows_backward on AVX2: two rows at a time. */
void qkv_norm_backward_avx2(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                            const float *mean, const float *rstd, const float *gamma, size_t rows,
                            size_t d, int center, int store)
{
    size_t r = 0;
    for (; r + 2 <= rows; r += 2)
        norm_backward_r(2, dx != NULL ? dx + r * d : NULL, dgamma, dbeta, dy + r * d, x + r * d,
                        mean + r, rstd + r, gamma, d, center, store);
    for (; r < rows; r++)
        norm_backward_r(1, dx != NULL ? dx + r * d : NULL, dgamma, dbeta, dy + r * d, x + r * d,
                        mean + r, rstd + r, gamma, d, center, store);
}
#else
typedef int qkv_no_avx2_norm; /* ISO C wants a declaration */
#endif
