/*
 * avx2.h - register helpers shared by the AVX2 kernel files, which are
 * compiled with -mavx2 -mfma and run only after dispatch.c has seen both
 * on this CPU. Include from nowhere else.
 */
#ifndef QKV_AVX2_H
#define QKV_AVX2_H

#include <immintrin.h>
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/vmath.h"

/* Lane mask for AVX2 masked loads and stores: the first w of 8 lanes. */
static inline __m256i lanes8(int w)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(w), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The 8×8 transpose of r[0..8) in place: r[i] lane j becomes r[j] lane i. */
QKV_ALWAYS_INLINE void transpose8_regs(__m256 *r)
{
    __m256 t[8];
    for (int j = 0; j < 8; j += 2) { /* pairs of rows interleaved */
        t[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
        t[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
    }
    for (int j = 0; j < 8; j += 4) { /* then quads */
        r[j] = _mm256_shuffle_ps(t[j], t[j + 2], 0x44);
        r[j + 1] = _mm256_shuffle_ps(t[j], t[j + 2], 0xEE);
        r[j + 2] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0x44);
        r[j + 3] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0xEE);
    }
    for (int h = 0; h < 4; h++) { /* then the 128-bit halves */
        t[h] = _mm256_permute2f128_ps(r[h], r[h + 4], 0x20);
        t[h + 4] = _mm256_permute2f128_ps(r[h], r[h + 4], 0x31);
    }
    for (int j = 0; j < 8; j++)
        r[j] = t[j];
}

/* x[0..w) of 8 lanes, zeros past them: a plain load when w is 8. */
QKV_ALWAYS_INLINE __m256 load8(int w, const float *x)
{
    return w >= 8 ? _mm256_loadu_ps(x) : _mm256_maskload_ps(x, lanes8(w));
}

/* Entries x[0..w) of 8, -inf past them; a plain load when w is 8. */
QKV_ALWAYS_INLINE __m256 load8_ninf(int w, const float *x)
{
    if (w >= 8)
        return _mm256_loadu_ps(x);
    const __m256i m = lanes8(w);
    return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_maskload_ps(x, m),
                            _mm256_castsi256_ps(m));
}

/* y[0..w) = v's first w lanes; a plain store when w is 8 (a masked store
 * costs many more micro-ops on some CPUs). */
QKV_ALWAYS_INLINE void store8(float *y, int w, __m256 v)
{
    if (w >= 8)
        _mm256_storeu_ps(y, v);
    else
        _mm256_maskstore_ps(y, lanes8(w), v);
}

/* The largest of the 8 lanes of v, which holds no NaN. */
static inline float hmax8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

static inline __m256 exp_avx2(__m256 v)
{
    /* 0 below QKV_EXP_MIN; a NaN stays live and comes out NaN (max_ps
     * returns its second operand for a NaN) */
    __m256 live = _mm256_cmp_ps(v, _mm256_set1_ps(QKV_EXP_MIN), _CMP_NLT_UQ);
    v = _mm256_max_ps(_mm256_set1_ps(QKV_EXP_MIN), v);
    __m256 t = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(t, _mm256_set1_ps(QKV_EXP_LN2_HI), v);
    r = _mm256_fnmadd_ps(t, _mm256_set1_ps(QKV_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* 2^t by building the exponent bits; t >= -126 after the clamp */
    __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(t), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(live, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

/* exp_avx2 of v[0..K) in place (K a constant, at most 4), each step for
 * all K registers before the next, so that K independent chains are in
 * flight where one alone waits on each step's latency. The same bits as
 * exp_avx2 on every input: the lanes it keeps (v >= QKV_EXP_MIN, or NaN) go
 * through the same operations (its clamp leaves them as they are), and
 * the others are 0 in both, whatever the exponent bits built for them. */
QKV_ALWAYS_INLINE void exp_avx2_k(const int K, __m256 *v)
{
    __m256 live[4], t[4], r[4], p[4];
    for (int k = 0; k < K; k++)
        live[k] = _mm256_cmp_ps(v[k], _mm256_set1_ps(QKV_EXP_MIN), _CMP_NLT_UQ);
    for (int k = 0; k < K; k++)
        t[k] = _mm256_round_ps(_mm256_mul_ps(v[k], _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    for (int k = 0; k < K; k++)
        r[k] = _mm256_fnmadd_ps(t[k], _mm256_set1_ps(QKV_EXP_LN2_HI), v[k]);
    for (int k = 0; k < K; k++)
        r[k] = _mm256_fnmadd_ps(t[k], _mm256_set1_ps(QKV_EXP_LN2_LO), r[k]);
    for (int k = 0; k < K; k++)
        p[k] = _mm256_fmadd_ps(_mm256_set1_ps(1.0f / 5040), r[k], _mm256_set1_ps(1.0f / 720));
    for (int k = 0; k < K; k++)
        p[k] = _mm256_fmadd_ps(p[k], r[k], _mm256_set1_ps(1.0f / 120));
    for (int k = 0; k < K; k++)
        p[k] = _mm256_fmadd_ps(p[k], r[k], _mm256_set1_ps(1.0f / 24));
    for (int k = 0; k < K; k++)
        p[k] = _mm256_fmadd_ps(p[k], r[k], _mm256_set1_ps(1.0f / 6));
    for (int k = 0; k < K; k++)
        p[k] = _mm256_fmadd_ps(p[k], r[k], _mm256_set1_ps(0.5f));
    for (int k = 0; k < K; k++)
        p[k] = _mm256_fmadd_ps(p[k], r[k], _mm256_set1_ps(1.0f));
    for (int k = 0; k < K; k++)
        p[k] = _mm256_fmadd_ps(p[k], r[k], _mm256_set1_ps(1.0f));
    for (int k = 0; k < K; k++) {
        const __m256i bits = _mm256_slli_epi32(
            _mm256_add_epi32(_mm256_cvtps_epi32(t[k]), _mm256_set1_epi32(127)), 23);
        v[k] = _mm256_and_ps(live[k], _mm256_mul_ps(p[k], _mm256_castsi256_ps(bits)));
    }
}

/* c·x rounded once to float, as the scaling op rounds (c·x in double):
 * in float when c is a float, where the float product rounds the same
 * exact product; else in double, four lanes per half. */
QKV_ALWAYS_INLINE __m256 scale8(__m256 x, double c, int exact)
{
    if (exact)
        return _mm256_mul_ps(x, _mm256_set1_ps((float)c));
    const __m256d cv = _mm256_set1_pd(c);
    const __m128 lo =
        _mm256_cvtpd_ps(_mm256_mul_pd(cv, _mm256_cvtps_pd(_mm256_castps256_ps128(x))));
    const __m128 hi =
        _mm256_cvtpd_ps(_mm256_mul_pd(cv, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
    return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
}

/* The fused attention backward of one item (avx2_attn.c): the kernel
 * set's attn_bwd. */
int qkv_attn_bwd_avx2(const qkv_attn_shape *sh, const float *q, const float *k, const float *v,
                      const float *a, const float *dout, float *ds, float *da, float *dq, float *dk,
                      float *dv, float *scratch);

#endif
