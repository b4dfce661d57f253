/*
 * avx2_norm.c - layer norm and RMS norm, forward and backward, for AVX2,
 * giving the portable versions' bits (norm.c defines the order of the
 * sums): the forward's 32 partial sums in the lanes of eight double
 * accumulators, the backward's 16 in four per sum, and the float
 * arithmetic 8 entries at a time, the same operations in the same order.
 * Compiled with -mavx2 -mfma (no FMA is used); runs only after dispatch.c
 * found both. A float32 x86-64 build only: otherwise this file is empty.
 */
#include "kernels/kernels.h"

#ifdef QKV_HAVE_X86_KERNELS
#include <immintrin.h>
#include <math.h>

/* The first w of 8 float lanes, for masked loads and stores. */
static inline __m256i lanes8(int w)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(w), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* x[0..w) of 8 lanes, zeros past them: plain loads and stores when w is
 * 8, as a masked store costs many more micro-ops on some CPUs. */
QKV_ALWAYS_INLINE __m256 load8(int w, const float *x)
{
    return w >= 8 ? _mm256_loadu_ps(x) : _mm256_maskload_ps(x, lanes8(w));
}

QKV_ALWAYS_INLINE void store8(float *y, int w, __m256 v)
{
    if (w >= 8)
        _mm256_storeu_ps(y, v);
    else
        _mm256_maskstore_ps(y, lanes8(w), v);
}

/* The first w of 4 double lanes, all ones, for an and. */
static inline __m256d dlanes4(int w)
{
    return _mm256_castsi256_pd(
        _mm256_cmpgt_epi64(_mm256_set1_epi64x(w), _mm256_setr_epi64x(0, 1, 2, 3)));
}

/* The halving tree's last two levels, from 4 partials in the lanes:
 * (l + l+2), then lane 0 + lane 1. */
static inline double halve4(__m256d s)
{
    const __m128d g = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(g) + _mm_cvtsd_f64(_mm_unpackhi_pd(g, g));
}

/* Adds entries x[j..j+4) of a row into a (partials 4q..4q+3 of 32 when
 * j = 32i + 4q): x itself, or (x - mu)² when sq; w < 4 entries left are a
 * tail, with the lanes past it adding nothing. */
QKV_ALWAYS_INLINE __m256d fwd_add(__m256d a, const float *x, int w, int sq, __m256d mu)
{
    __m256d v = w >= 4 ? _mm256_cvtps_pd(_mm_loadu_ps(x))
                       : _mm256_cvtps_pd(_mm_maskload_ps(
                             x, _mm_cmpgt_epi32(_mm_set1_epi32(w), _mm_setr_epi32(0, 1, 2, 3))));
    if (sq) {
        v = _mm256_sub_pd(v, mu);
        if (w < 4)
            v = _mm256_and_pd(v, dlanes4(w));
        v = _mm256_mul_pd(v, v);
    }
    return _mm256_add_pd(a, v);
}

/* Σ x[j] (sq = 0) or Σ (x[j] - mu)² (sq = 1) over a row of d, in norm.c's
 * order: partial j mod 32 in lane j mod 4 of accumulator (j mod 32) / 4. */
QKV_ALWAYS_INLINE double fwd_sum(const float *x, size_t d, double mu, int sq)
{
    const __m256d vmu = _mm256_set1_pd(mu);
    __m256d b[8];
    for (int q = 0; q < 8; q++)
        b[q] = _mm256_setzero_pd();
    size_t j = 0;
    for (; j + 32 <= d; j += 32)
        for (int q = 0; q < 8; q++)
            b[q] = fwd_add(b[q], x + j + 4 * q, 4, sq, vmu);
    if (j < d) {
        const int w = (int)(d - j);
        for (int q = 0; q < 8 && 4 * q < w; q++)
            b[q] = fwd_add(b[q], x + j + 4 * q, w - 4 * q, sq, vmu);
    }
    /* h = 16: partial l + partial l+16; h = 8: l + l+8; h = 4: l + l+4 */
    for (int q = 0; q < 4; q++)
        b[q] = _mm256_add_pd(b[q], b[q + 4]);
    for (int q = 0; q < 2; q++)
        b[q] = _mm256_add_pd(b[q], b[q + 2]);
    return halve4(_mm256_add_pd(b[0], b[1]));
}

/* qkv_norm_rows on AVX2, a row at a time. */
void qkv_norm_avx2(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                   const float *beta, size_t rows, size_t d, double eps, int center)
{
    for (size_t r = 0; r < rows; r++, x += d, y += d) {
        const double mu = center ? fwd_sum(x, d, 0, 0) / (double)d : 0;
        const double var = fwd_sum(x, d, mu, 1) / (double)d;
        const double rs = 1 / sqrt(var + eps);
        mean[r] = (float)mu;
        rstd[r] = (float)rs;
        const __m256 vm = _mm256_set1_ps((float)mu), vs = _mm256_set1_ps((float)rs);
        for (size_t j = 0; j < d; j += 8) {
            const int w = d - j >= 8 ? 8 : (int)(d - j);
            __m256 v = _mm256_mul_ps(_mm256_sub_ps(load8(w, x + j), vm), vs);
            if (gamma != NULL)
                v = _mm256_mul_ps(v, load8(w, gamma + j));
            if (beta != NULL)
                v = _mm256_add_ps(v, load8(w, beta + j));
            store8(y + j, w, v);
        }
    }
}

/* qkv_norm_rows_backward on AVX2, a row at a time: the sums with dγ and
 * dβ, then dx. */
void qkv_norm_backward_avx2(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                            const float *mean, const float *rstd, const float *gamma, size_t rows,
                            size_t d, int center)
{
    for (size_t r = 0; r < rows; r++, x += d, dy += d) {
        const __m256 vm = _mm256_set1_ps(mean[r]), vs = _mm256_set1_ps(rstd[r]);
        /* partial j mod 16 in lane j mod 4 of accumulator (j mod 16) / 4 */
        __m256d sg[4], sx[4];
        for (int q = 0; q < 4; q++)
            sg[q] = sx[q] = _mm256_setzero_pd();
        for (size_t j = 0; j < d; j += 16)
            for (int c = 0; c < 2; c++) {
                const size_t jc = j + 8 * (size_t)c;
                if (jc >= d)
                    break;
                const int w = d - jc >= 8 ? 8 : (int)(d - jc);
                const __m256 dyv = load8(w, dy + jc); /* 0 past the end, and so is g */
                __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(load8(w, x + jc), vm), vs);
                if (w < 8)
                    xhat = _mm256_and_ps(xhat, _mm256_castsi256_ps(lanes8(w)));
                const __m256 g = gamma != NULL ? _mm256_mul_ps(dyv, load8(w, gamma + jc)) : dyv;
                const __m256d g0 = _mm256_cvtps_pd(_mm256_castps256_ps128(g));
                const __m256d g1 = _mm256_cvtps_pd(_mm256_extractf128_ps(g, 1));
                if (center) {
                    sg[2 * c] = _mm256_add_pd(sg[2 * c], g0);
                    sg[2 * c + 1] = _mm256_add_pd(sg[2 * c + 1], g1);
                }
                sx[2 * c] = _mm256_add_pd(
                    sx[2 * c], _mm256_mul_pd(g0, _mm256_cvtps_pd(_mm256_castps256_ps128(xhat))));
                sx[2 * c + 1] = _mm256_add_pd(
                    sx[2 * c + 1],
                    _mm256_mul_pd(g1, _mm256_cvtps_pd(_mm256_extractf128_ps(xhat, 1))));
                if (dgamma != NULL)
                    store8(dgamma + jc, w,
                           _mm256_add_ps(load8(w, dgamma + jc), _mm256_mul_ps(dyv, xhat)));
                if (dbeta != NULL)
                    store8(dbeta + jc, w, _mm256_add_ps(load8(w, dbeta + jc), dyv));
            }
        if (dx == NULL)
            continue;
        /* h = 8: partial l + partial l+8; h = 4: l + l+4; then the last two levels */
        const double mg =
            center
                ? halve4(_mm256_add_pd(_mm256_add_pd(sg[0], sg[2]), _mm256_add_pd(sg[1], sg[3]))) /
                      (double)d
                : 0;
        const double mgx =
            halve4(_mm256_add_pd(_mm256_add_pd(sx[0], sx[2]), _mm256_add_pd(sx[1], sx[3]))) /
            (double)d;
        const __m256 fm = _mm256_set1_ps((float)mg), fx = _mm256_set1_ps((float)mgx);
        float *dxr = dx + r * d;
        for (size_t j = 0; j < d; j += 8) {
            const int w = d - j >= 8 ? 8 : (int)(d - j);
            const __m256 dyv = load8(w, dy + j);
            const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(load8(w, x + j), vm), vs);
            const __m256 g = gamma != NULL ? _mm256_mul_ps(dyv, load8(w, gamma + j)) : dyv;
            const __m256 t = _mm256_sub_ps(_mm256_sub_ps(g, fm), _mm256_mul_ps(xhat, fx));
            store8(dxr + j, w, _mm256_add_ps(load8(w, dxr + j), _mm256_mul_ps(vs, t)));
        }
    }
}
#else
typedef int qkv_no_avx2_norm; /* ISO C wants a declaration */
#endif
