/*
 * avx512.h - register helpers shared by the AVX-512 kernel files, which are
 * compiled with -mavx512f and run only after dispatch.c has seen AVX-512F
 * on this CPU. Include from nowhere else.
 */
#ifndef QKV_AVX512_H
#define QKV_AVX512_H

#include <immintrin.h>

#include "kernels/kernels.h"

/* The first n of 16 lanes. */
static inline __mmask16 lanes(int n)
{
    return (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1);
}

/* Masked load and store that use the plain instructions for a full mask: a
 * load of data just stored gets it forwarded from the store only when
 * neither is masked. */
QKV_ALWAYS_INLINE __m512 load16(__mmask16 m, const float *p)
{
    return m == 0xFFFF ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}

QKV_ALWAYS_INLINE void store16(float *p, __mmask16 m, __m512 x)
{
    if (m == 0xFFFF)
        _mm512_storeu_ps(p, x);
    else
        _mm512_mask_storeu_ps(p, m, x);
}
/* Transposes the 16×16 matrix held in r[0..15] (row i in r[i]) in place,
 * in four shuffle stages. */
QKV_ALWAYS_INLINE void transpose16_regs(__m512 *r)
{
    __m512 t[16];
    for (int j = 0; j < 16; j += 2) { /* pairs of rows interleaved */
        t[j] = _mm512_unpacklo_ps(r[j], r[j + 1]);
        t[j + 1] = _mm512_unpackhi_ps(r[j], r[j + 1]);
    }
    for (int j = 0; j < 16; j += 4) { /* then fours: column p of rows j..j+3 per lane */
        __m512d a = _mm512_castps_pd(t[j]), b = _mm512_castps_pd(t[j + 1]);
        __m512d c = _mm512_castps_pd(t[j + 2]), d = _mm512_castps_pd(t[j + 3]);
        r[j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[j + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[j + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int q = 0; q < 4; q++) { /* 128-bit lanes of rows 0-7, then of rows 8-15 */
        t[q] = _mm512_shuffle_f32x4(r[q], r[q + 4], 0x88);
        t[q + 4] = _mm512_shuffle_f32x4(r[q], r[q + 4], 0xdd);
        t[q + 8] = _mm512_shuffle_f32x4(r[q + 8], r[q + 12], 0x88);
        t[q + 12] = _mm512_shuffle_f32x4(r[q + 8], r[q + 12], 0xdd);
    }
    for (int q = 0; q < 8; q++) { /* column q and column q + 8 */
        r[q] = _mm512_shuffle_f32x4(t[q], t[q + 8], 0x88);
        r[q + 8] = _mm512_shuffle_f32x4(t[q], t[q + 8], 0xdd);
    }
}

/* dst (k×n, row stride ldd) = Bᵀ for B n×k (row stride ldb) with n, k <=
 * 16, in registers. */
static inline void transpose16_avx512(const float *B, size_t ldb, int n, int k, float *dst,
                                      size_t ldd)
{
    __m512 r[16];
    __mmask16 km = (__mmask16)((1u << k) - 1), nm = (__mmask16)((1u << n) - 1);
    for (int j = 0; j < 16; j++)
        r[j] = j < n ? load16(km, B + (size_t)j * ldb) : _mm512_setzero_ps();
    transpose16_regs(r);
    for (int p = 0; p < k; p++)
        store16(dst + (size_t)p * ldd, nm, r[p]);
}
/* c·x rounded once to float, as the scaling op rounds (c·x in double):
 * in float when c is a float (1/√d_k for d_k a power of 4), where the
 * float product rounds the same exact product; else in double, 8 lanes
 * per half. exact is scale_is_float(c). */
QKV_ALWAYS_INLINE __m512 scale16(__m512 x, double c, int exact)
{
    if (exact)
        return _mm512_mul_ps(x, _mm512_set1_ps((float)c));
    const __m512d cv = _mm512_set1_pd(c);
    const __m512d xh =
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    const __m256 lo =
        _mm512_cvtpd_ps(_mm512_mul_pd(cv, _mm512_cvtps_pd(_mm512_castps512_ps256(x))));
    const __m256 hi = _mm512_cvtpd_ps(_mm512_mul_pd(cv, xh));
    return _mm512_castpd_ps(
        _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

/* Nonzero when c is a float: then scale16 multiplies in float. */
static inline int scale_is_float(double c)
{
    return (double)(float)c == c;
}

static inline __m512 exp_avx512(__m512 v)
{
    /* 0 below QKV_EXP_MIN; a NaN stays live and comes out NaN (max_ps
     * returns its second operand for a NaN) */
    __mmask16 live = _mm512_cmp_ps_mask(v, _mm512_set1_ps(QKV_EXP_MIN), _CMP_NLT_UQ);
    v = _mm512_max_ps(_mm512_set1_ps(QKV_EXP_MIN), v);
    __m512 t = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(t, _mm512_set1_ps(QKV_EXP_LN2_HI), v);
    r = _mm512_fnmadd_ps(t, _mm512_set1_ps(QKV_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps(live, _mm512_scalef_ps(p, t));
}

/* exp_avx512 of v[0..K) in place (K a constant, at most 8), each step for
 * all K registers before the next, so that K independent chains are in
 * flight where one alone waits on each step's latency. The same bits as
 * exp_avx512 on every input: the lanes it keeps (v >= QKV_EXP_MIN, or NaN) go
 * through the same operations (its clamp leaves them as they are), and
 * the others are 0 in both; the zeroing is folded into the scaling. */
QKV_ALWAYS_INLINE void exp_avx512_k(const int K, __m512 *v)
{
    __mmask16 live[8];
    __m512 t[8], r[8], p[8];
    for (int k = 0; k < K; k++)
        live[k] = _mm512_cmp_ps_mask(v[k], _mm512_set1_ps(QKV_EXP_MIN), _CMP_NLT_UQ);
    for (int k = 0; k < K; k++)
        t[k] = _mm512_roundscale_ps(_mm512_mul_ps(v[k], _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    for (int k = 0; k < K; k++)
        r[k] = _mm512_fnmadd_ps(t[k], _mm512_set1_ps(QKV_EXP_LN2_HI), v[k]);
    for (int k = 0; k < K; k++)
        r[k] = _mm512_fnmadd_ps(t[k], _mm512_set1_ps(QKV_EXP_LN2_LO), r[k]);
    for (int k = 0; k < K; k++)
        p[k] = _mm512_fmadd_ps(_mm512_set1_ps(1.0f / 5040), r[k], _mm512_set1_ps(1.0f / 720));
    for (int k = 0; k < K; k++)
        p[k] = _mm512_fmadd_ps(p[k], r[k], _mm512_set1_ps(1.0f / 120));
    for (int k = 0; k < K; k++)
        p[k] = _mm512_fmadd_ps(p[k], r[k], _mm512_set1_ps(1.0f / 24));
    for (int k = 0; k < K; k++)
        p[k] = _mm512_fmadd_ps(p[k], r[k], _mm512_set1_ps(1.0f / 6));
    for (int k = 0; k < K; k++)
        p[k] = _mm512_fmadd_ps(p[k], r[k], _mm512_set1_ps(0.5f));
    for (int k = 0; k < K; k++)
        p[k] = _mm512_fmadd_ps(p[k], r[k], _mm512_set1_ps(1.0f));
    for (int k = 0; k < K; k++)
        p[k] = _mm512_fmadd_ps(p[k], r[k], _mm512_set1_ps(1.0f));
    for (int k = 0; k < K; k++)
        v[k] = _mm512_maskz_scalef_ps(live[k], p[k], t[k]);
}

/* Nonzero when any of x[0..n) is nonzero (or NaN). */
static inline int row_live(const float *x, int n)
{
    for (int c0 = 0; c0 < n; c0 += 16)
        if (_mm512_cmp_ps_mask(load16(lanes(n - c0), x + c0), _mm512_setzero_ps(), _CMP_NEQ_UQ))
            return 1;
    return 0;
}

/* Fused attention of one item (avx512_attn.c): the kernel set's attn_fwd
 * and attn_bwd. */
int qkv_attn_fwd_avx512(const qkv_attn_shape *sh, const float *q, const float *k, const float *v,
                        float *s, float *a, float *o);
int qkv_attn_bwd_avx512(const qkv_attn_shape *sh, const float *q, const float *k, const float *v,
                        const float *a, const float *dout, float *ds, float *da, float *dq,
                        float *dk, float *dv, float *scratch);

/* The set's matrix product (avx512_gemm.c): its gemm. */
void qkv_gemm_avx512(const qkv_gemm_args *g);

#endif
