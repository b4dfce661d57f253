/*
 * avx2_math.c - the AVX2 set's element-wise maths: exp, log, tanh, sigmoid,
 * GELU and GELU's backward, 8 floats at a time, a ragged tail in masked
 * loads and stores. The same methods and constants as the AVX-512 ones
 * (vmath.h); where those scale by 2^t in one instruction, these multiply
 * by two powers of two, the second rounding once. Compiled with -mavx2
 * -mfma; runs only after dispatch.c has seen both. A float32 x86-64 build
 * only: otherwise this file is empty.
 */
#include "kernels/kernels.h"

#ifdef QKV_HAVE_X86_KERNELS
#include <immintrin.h>
#include <math.h>

#include "kernels/vmath.h"

#define SET1 _mm256_set1_ps

/* The lanes left from i on in a loop over n, as a mask of whole lanes. */
QKV_ALWAYS_INLINE __m256i tail8(size_t i, size_t n)
{
    int w = n - i >= 8 ? 8 : (int)(n - i);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(w), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Load and store the lanes of mask m, with the plain instructions for a
 * whole vector (full says which). */
QKV_ALWAYS_INLINE __m256 load8(int full, __m256i m, const float *p)
{
    return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m);
}

QKV_ALWAYS_INLINE void store8(float *p, int full, __m256i m, __m256 x)
{
    if (full)
        _mm256_storeu_ps(p, x);
    else
        _mm256_maskstore_ps(p, m, x);
}

/* The sign bit of every lane. */
QKV_ALWAYS_INLINE __m256 sign8(void)
{
    return _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
}

/* |x|. */
QKV_ALWAYS_INLINE __m256 abs8(__m256 x)
{
    return _mm256_andnot_ps(sign8(), x);
}

/* -|x|: the sign bit set. */
QKV_ALWAYS_INLINE __m256 neg_abs8(__m256 x)
{
    return _mm256_or_ps(x, sign8());
}

/* Where mask is set, b; elsewhere a. */
QKV_ALWAYS_INLINE __m256 pick8(__m256 mask, __m256 a, __m256 b)
{
    return _mm256_blendv_ps(a, b, mask);
}

/* p·2^t for |p| < 2^10 and a whole t in [-252, 254]: 2^t in two normal
 * halves, so a result below FLT_MIN is rounded once (the first product is
 * exact). For t <= -160 the result is ±0, given without a multiplication
 * that would underflow: those take a slow path on some CPUs. */
QKV_ALWAYS_INLINE __m256 scale8_edges(__m256 p, __m256 t)
{
    __m256 zero = _mm256_cmp_ps(t, SET1(-160.0f), _CMP_LE_OQ);
    __m256i k = _mm256_cvtps_epi32(_mm256_andnot_ps(zero, t));
    __m256i k1 = _mm256_srai_epi32(k, 1), k2 = _mm256_sub_epi32(k, k1);
    __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    return pick8(zero, y, _mm256_and_ps(p, sign8()));
}

/* 2^t for a whole t in [-126, 127]: built from its bits. */
QKV_ALWAYS_INLINE __m256 pow2_8(__m256 t)
{
    __m256i k = _mm256_add_epi32(_mm256_cvtps_epi32(t), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(k, 23));
}

/* p·2^t as scale8_edges gives it; one multiplication when every t is in
 * [-125, 127], where p·2^t is a normal float (or 0) for p in [0.5, 2). */
QKV_ALWAYS_INLINE __m256 scale8(__m256 p, __m256 t)
{
    __m256 out = _mm256_or_ps(_mm256_cmp_ps(t, SET1(-125.0f), _CMP_NGE_UQ),
                              _mm256_cmp_ps(t, SET1(127.0f), _CMP_GT_OQ));
    if (_mm256_movemask_ps(out) != 0)
        return scale8_edges(p, t);
    return _mm256_mul_ps(p, pow2_8(t));
}

/* e^r - 1 = r + r²·Q(r) for |r| <= ln2/2 (plus a rounding error of lo). */
QKV_ALWAYS_INLINE __m256 expm1_poly8(__m256 r)
{
    __m256 r2 = _mm256_mul_ps(r, r);
    __m256 p01 = _mm256_fmadd_ps(SET1(VM_EXP_Q1), r, SET1(VM_EXP_Q0));
    __m256 p23 = _mm256_fmadd_ps(SET1(VM_EXP_Q3), r, SET1(VM_EXP_Q2));
    __m256 q = _mm256_fmadd_ps(_mm256_fmadd_ps(SET1(VM_EXP_Q4), r2, p23), r2, p01);
    return _mm256_fmadd_ps(q, r2, r);
}

/* e^(x + lo) = p·2^t for x in [-150, 89] (or NaN) and |lo| well below
 * ulp(x), lo NULL for 0: returns p, in [0.70, 1.42], within about 0.6 ulp; sets *t, a
 * whole number. */
QKV_ALWAYS_INLINE __m256 exp_parts8(__m256 x, const __m256 *lo, __m256 *t)
{
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, SET1(VM_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, SET1(VM_LN2_HI), x); /* exact */
    r = _mm256_fnmadd_ps(k, SET1(VM_LN2_LO), r);
    if (lo != NULL) /* NULL for 0, as in exp_parts16 */
        r = _mm256_add_ps(r, *lo);
    *t = k;
    return _mm256_add_ps(SET1(1.0f), expm1_poly8(r));
}

/* e^x, with the edges of qkv_vexp. */
QKV_ALWAYS_INLINE __m256 exp8(__m256 x)
{
    /* max and min return their second operand for a NaN: x stays NaN */
    x = _mm256_min_ps(SET1(VM_EXP_HI), _mm256_max_ps(SET1(VM_EXP_LO), x));
    __m256 t, p = exp_parts8(x, NULL, &t);
    return scale8(p, t);
}

/* e^(x + lo) = p·2^t (exp_parts8) with its exponent raised to at least
 * VM_EXP_SUM_MIN (no subnormal; the same beside 1), for t <= 127. */
QKV_ALWAYS_INLINE __m256 exp_beside1_8(__m256 p, __m256 t)
{
    return _mm256_mul_ps(p, pow2_8(_mm256_max_ps(SET1(VM_EXP_SUM_MIN), t)));
}

/* log x, with the edges of qkv_vlog. */
QKV_ALWAYS_INLINE __m256 log8(__m256 x)
{
    __m256 sub = _mm256_cmp_ps(x, SET1(1.17549435e-38f), _CMP_LT_OQ);
    __m256 xs = pick8(sub, x, _mm256_mul_ps(x, SET1(33554432.0f))); /* 2^25 */
    /* x = 2^k·m with m in [√½, √2): k from the bits of x less those of √½ */
    __m256i ix = _mm256_sub_epi32(_mm256_castps_si256(xs), _mm256_set1_epi32(VM_SQRT_HALF_BITS));
    __m256 k = _mm256_cvtepi32_ps(_mm256_srai_epi32(ix, 23));
    k = _mm256_sub_ps(k, _mm256_and_ps(sub, SET1(25.0f)));
    __m256i mi = _mm256_add_epi32(_mm256_and_si256(ix, _mm256_set1_epi32(0x007fffff)),
                                  _mm256_set1_epi32(VM_SQRT_HALF_BITS));
    __m256 f = _mm256_sub_ps(_mm256_castsi256_ps(mi), SET1(1.0f)); /* exact */
    __m256 s = _mm256_div_ps(f, _mm256_add_ps(SET1(2.0f), f));
    __m256 z = _mm256_mul_ps(s, s);
    __m256 r = _mm256_fmadd_ps(SET1(VM_LOG_R4), z, SET1(VM_LOG_R3));
    r = _mm256_fmadd_ps(r, z, SET1(VM_LOG_R2));
    r = _mm256_fmadd_ps(r, z, SET1(VM_LOG_R1));
    r = _mm256_mul_ps(r, z);
    __m256 hfsq = _mm256_mul_ps(_mm256_mul_ps(SET1(0.5f), f), f);
    __m256 lo = _mm256_fmadd_ps(s, _mm256_add_ps(hfsq, r), _mm256_mul_ps(k, SET1(VM_LOG_LN2_LO)));
    __m256 y = _mm256_fmadd_ps(k, SET1(VM_LOG_LN2_HI), _mm256_sub_ps(f, _mm256_sub_ps(hfsq, lo)));
    /* log 0 = -inf, log(x < 0) = NaN (and NaN stays NaN), log inf = inf */
    y = pick8(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ), y, SET1(-INFINITY));
    y = pick8(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NGE_UQ), y, SET1(NAN));
    return pick8(_mm256_cmp_ps(x, SET1(INFINITY), _CMP_EQ_OQ), y, x);
}

/* tanh x, with the edges of qkv_vtanh: E/(E + 2) with E = e^(2|x|) - 1
 * (as 2^t·(e^r - 1) + (2^t - 1), so no cancellation near 0), 2|x| capped
 * at VM_TANH_CAP; the sign of x copied back (-0 stays -0). */
QKV_ALWAYS_INLINE __m256 tanh8(__m256 x)
{
    __m256 ax = abs8(x);
    __m256 w = _mm256_min_ps(SET1(VM_TANH_CAP), _mm256_add_ps(ax, ax)); /* NaN stays */
    __m256 k = _mm256_round_ps(_mm256_mul_ps(w, SET1(VM_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, SET1(VM_LN2_HI), w); /* exact; ln 2's low part left out */
    __m256 tk = pow2_8(k);
    __m256 e = _mm256_fmadd_ps(expm1_poly8(r), tk, _mm256_sub_ps(tk, SET1(1.0f)));
    __m256 y = _mm256_div_ps(e, _mm256_add_ps(e, SET1(2.0f)));
    return _mm256_or_ps(y, _mm256_and_ps(x, sign8()));
}

/* σ(x) = 1/(1 + e^-x) = s/(s + p), as sigmoid16 computes it (the same
 * bits: scale8 of 1 is 2^t rounded once, as scalef gives it). */
QKV_ALWAYS_INLINE __m256 sigmoid8(__m256 x)
{
    x = _mm256_min_ps(SET1(VM_SIGMOID_HI), _mm256_max_ps(SET1(VM_EXP_LO), x));
    __m256 t = _mm256_round_ps(_mm256_mul_ps(x, SET1(VM_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* -r = (t·ln2 - x), its first part exact */
    __m256 nr = _mm256_fmadd_ps(t, SET1(VM_LN2_LO), _mm256_fmsub_ps(t, SET1(VM_LN2_HI), x));
    __m256 p = _mm256_add_ps(SET1(1.0f), expm1_poly8(nr));
    __m256 s = scale8(SET1(1.0f), t);
    return _mm256_div_ps(s, _mm256_add_ps(s, p));
}

/* v = x·K2·(1 + C·x²) as *hi + *lo, in float with the error-free products
 * of vmath.h's GELU comment (the AVX-512 set's steps, in its order). */
QKV_ALWAYS_INLINE void gelu_arg8(__m256 x, __m256 *hi, __m256 *lo)
{
    __m256 a = _mm256_mul_ps(x, x), ea = _mm256_fmsub_ps(x, x, a);
    __m256 u = _mm256_fmadd_ps(SET1(VM_GELU_CH), a, SET1(1.0f));
    __m256 eu = _mm256_fmsub_ps(SET1(VM_GELU_CH), a, _mm256_sub_ps(u, SET1(1.0f)));
    eu = _mm256_fmadd_ps(SET1(VM_GELU_CL), a, _mm256_fmadd_ps(SET1(VM_GELU_CH), ea, eu));
    __m256 w = _mm256_mul_ps(SET1(VM_GELU_K2F), x);
    __m256 ew = _mm256_fmadd_ps(SET1(VM_GELU_K2L), x, _mm256_fmsub_ps(SET1(VM_GELU_K2F), x, w));
    __m256 h = _mm256_mul_ps(w, u);
    *lo = _mm256_fmadd_ps(w, eu, _mm256_fmadd_ps(ew, u, _mm256_fmsub_ps(w, u, h)));
    *hi = h;
}

/* GELU's shared start: x clamped to ±VM_GELU_BIG (in *xc), -|v| =
 * -|x|·K2·(1 + C·x²) as two floats, carried into e^(-|v|) = p·2^t, that
 * as *z (its exponent raised to at least VM_EXP_SUM_MIN) and 1 + *z in
 * *d. Sets *pos (lanes where v >= 0, which is where x >= 0); returns p.
 * The AVX-512 set's gelu_parts16, with its savings over exp_parts8. */
QKV_ALWAYS_INLINE __m256 gelu_parts8(__m256 x, __m256 *xc, __m256 *pos, __m256 *t, __m256 *z,
                                     __m256 *d)
{
    const __m256 round = SET1(12582912.0f); /* 1.5·2^23 */
    __m256 c = _mm256_min_ps(SET1(VM_GELU_BIG), _mm256_max_ps(SET1(-VM_GELU_BIG), x));
    __m256 hi, lo;
    gelu_arg8(neg_abs8(c), &hi, &lo);
    *pos = _mm256_cmp_ps(c, _mm256_setzero_ps(), _CMP_GE_OQ);
    *xc = c;
    __m256 k = _mm256_sub_ps(_mm256_fmadd_ps(hi, SET1(VM_LOG2E), round), round);
    __m256 r = _mm256_fnmadd_ps(k, SET1(VM_LN2_HI), hi); /* exact */
    r = _mm256_add_ps(_mm256_fnmadd_ps(k, SET1(VM_LN2_LO), r), lo);
    __m256 p = _mm256_add_ps(SET1(1.0f), expm1_poly8(r));
    *t = k;
    *z = exp_beside1_8(p, k);
    *d = _mm256_add_ps(SET1(1.0f), *z);
    return p;
}

/* gelu x = x·σ(v): x/(1 + z) for v >= 0, (xc·p/(1 + z))·2^t below. Beyond
 * VM_GELU_BIG, 1 + z is 1 and the result x itself (inf too). */
QKV_ALWAYS_INLINE __m256 gelu8(__m256 x)
{
    __m256 xc, pos, t, z, d;
    __m256 p = gelu_parts8(x, &xc, &pos, &t, &z, &d);
    __m256 q = _mm256_div_ps(pick8(pos, _mm256_mul_ps(xc, p), x), d);
    return scale8(q, _mm256_andnot_ps(pos, t));
}

/* gelu'(x) = σ(v)·(1 + x·(1 - σ(v))·K2·(1 + 3C·x²)), with σ(v) as m·2^t
 * (t = 0 for v >= 0), so a σ below FLT_MIN keeps its precision. */
QKV_ALWAYS_INLINE __m256 gelu_grad8(__m256 x)
{
    __m256 xc, pos, t, z, d;
    __m256 p = gelu_parts8(x, &xc, &pos, &t, &z, &d);
    __m256 rd = _mm256_div_ps(SET1(1.0f), d);
    __m256 m = pick8(pos, _mm256_mul_ps(p, rd), rd);
    __m256 sc = pick8(pos, rd, _mm256_mul_ps(z, rd)); /* 1 - σ(v) */
    __m256 k = _mm256_fmadd_ps(_mm256_mul_ps(xc, xc), SET1(VM_GELU_K2C3F), SET1(VM_GELU_K2F));
    __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(xc, sc), k, SET1(1.0f));
    return scale8(_mm256_mul_ps(m, inner), _mm256_andnot_ps(pos, t));
}

/* y[i] = F(x[i]) for i < n: four registers a turn while 32 floats are
 * left, then one at a time, the last masked (avx512_math.c's MAP16). */
#define MAP8(F)                                                                                    \
    do {                                                                                           \
        size_t i = 0;                                                                              \
        for (; i + 32 <= n; i += 32) {                                                             \
            const __m256 v0 = F(_mm256_loadu_ps(x + i)), v1 = F(_mm256_loadu_ps(x + i + 8));       \
            const __m256 v2 = F(_mm256_loadu_ps(x + i + 16)), v3 = F(_mm256_loadu_ps(x + i + 24)); \
            _mm256_storeu_ps(y + i, v0);                                                           \
            _mm256_storeu_ps(y + i + 8, v1);                                                       \
            _mm256_storeu_ps(y + i + 16, v2);                                                      \
            _mm256_storeu_ps(y + i + 24, v3);                                                      \
        }                                                                                          \
        for (; i < n; i += 8) {                                                                    \
            const int full = n - i >= 8;                                                           \
            const __m256i m = tail8(i, n);                                                         \
            store8(y + i, full, m, F(load8(full, m, x + i)));                                      \
        }                                                                                          \
    } while (0)

void qkv_avx2_exp(float *y, const float *x, size_t n)
{
    MAP8(exp8);
}

void qkv_avx2_log(float *y, const float *x, size_t n)
{
    MAP8(log8);
}

void qkv_avx2_tanh(float *y, const float *x, size_t n)
{
    MAP8(tanh8);
}

void qkv_avx2_sigmoid(float *y, const float *x, size_t n)
{
    MAP8(sigmoid8);
}

void qkv_avx2_gelu(float *y, const float *x, size_t n)
{
    MAP8(gelu8);
}

void qkv_avx2_gelu_backward(float *dx, const float *x, const float *dy, size_t n, int store)
{
    for (size_t i = 0; i < n; i += 8) {
        int full = n - i >= 8;
        __m256i m = tail8(i, n);
        __m256 g = gelu_grad8(load8(full, m, x + i));
        __m256 d = store ? _mm256_setzero_ps() : load8(full, m, dx + i);
        __m256 r = _mm256_fmadd_ps(load8(full, m, dy + i), g, d);
        store8(dx + i, full, m, r);
    }
}
#else
typedef int qkv_no_avx2_math; /* ISO C wants a declaration */
#endif
