/*
 * avx512_math.c - the AVX-512 set's element-wise maths: exp, log, tanh,
 * sigmoid, GELU and GELU's backward, 16 floats at a time, a ragged tail in
 * masked loads and stores. The methods and constants are in vmath.h.
 * Compiled with -mavx512f; runs only after dispatch.c has seen AVX-512F.
 * A float32 x86-64 build only: otherwise this file is empty.
 */
#include "kernels/kernels.h"

#ifdef QKV_HAVE_X86_KERNELS
#include <math.h>

#include "kernels/avx512.h"
#include "kernels/vmath.h"

#define SET1 _mm512_set1_ps

/* The mask of the lanes left from i on, for a loop over n. */
QKV_ALWAYS_INLINE __mmask16 tail16(size_t i, size_t n)
{
    return n - i >= 16 ? (__mmask16)0xFFFF : lanes((int)(n - i));
}

/* |x|. */
QKV_ALWAYS_INLINE __m512 abs16(__m512 x)
{
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));
}

/* -|x|: the sign bit set. */
QKV_ALWAYS_INLINE __m512 neg_abs16(__m512 x)
{
    return _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
}

/* y (whose sign bit is clear) with the sign of x. */
QKV_ALWAYS_INLINE __m512 with_sign16(__m512 y, __m512 x)
{
    __m512i s = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(y), s));
}

/* e^r - 1 = r + r²·Q(r) for |r| <= ln2/2 (plus a rounding error of lo). */
QKV_ALWAYS_INLINE __m512 expm1_poly16(__m512 r)
{
    __m512 r2 = _mm512_mul_ps(r, r);
    __m512 p01 = _mm512_fmadd_ps(SET1(VM_EXP_Q1), r, SET1(VM_EXP_Q0));
    __m512 p23 = _mm512_fmadd_ps(SET1(VM_EXP_Q3), r, SET1(VM_EXP_Q2));
    __m512 q = _mm512_fmadd_ps(_mm512_fmadd_ps(SET1(VM_EXP_Q4), r2, p23), r2, p01);
    return _mm512_fmadd_ps(q, r2, r);
}

/* e^(x + lo) = p·2^t for x in [-150, 89] (or NaN) and |lo| well below
 * ulp(x), lo NULL for 0 (an add of zero saved: the compiler may not drop
 * it, as -0 + 0 is +0): returns p, in [0.70, 1.42], within about 0.6 ulp;
 * sets *t, a whole number. */
QKV_ALWAYS_INLINE __m512 exp_parts16(__m512 x, const __m512 *lo, __m512 *t)
{
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, SET1(VM_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, SET1(VM_LN2_HI), x); /* exact */
    r = _mm512_fnmadd_ps(k, SET1(VM_LN2_LO), r);
    if (lo != NULL)
        r = _mm512_add_ps(r, *lo);
    *t = k;
    return _mm512_add_ps(SET1(1.0f), expm1_poly16(r));
}

/* e^x, with the edges of qkv_vexp. */
QKV_ALWAYS_INLINE __m512 exp16(__m512 x)
{
    /* max and min return their second operand for a NaN: x stays NaN */
    x = _mm512_min_ps(SET1(VM_EXP_HI), _mm512_max_ps(SET1(VM_EXP_LO), x));
    __m512 t, p = exp_parts16(x, NULL, &t);
    return _mm512_scalef_ps(p, t);
}

/* log x, with the edges of qkv_vlog. */
QKV_ALWAYS_INLINE __m512 log16(__m512 x)
{
    __mmask16 sub = _mm512_cmp_ps_mask(x, SET1(1.17549435e-38f), _CMP_LT_OQ);
    __m512 xs = _mm512_mask_mul_ps(x, sub, x, SET1(33554432.0f)); /* 2^25 */
    /* x = 2^k·m with m in [√½, √2): k from the bits of x less those of √½ */
    __m512i ix = _mm512_sub_epi32(_mm512_castps_si512(xs), _mm512_set1_epi32(VM_SQRT_HALF_BITS));
    __m512 k = _mm512_cvtepi32_ps(_mm512_srai_epi32(ix, 23));
    k = _mm512_mask_sub_ps(k, sub, k, SET1(25.0f));
    __m512i mi = _mm512_add_epi32(_mm512_and_si512(ix, _mm512_set1_epi32(0x007fffff)),
                                  _mm512_set1_epi32(VM_SQRT_HALF_BITS));
    __m512 f = _mm512_sub_ps(_mm512_castsi512_ps(mi), SET1(1.0f)); /* exact */
    __m512 s = _mm512_div_ps(f, _mm512_add_ps(SET1(2.0f), f));
    __m512 z = _mm512_mul_ps(s, s);
    __m512 r = _mm512_fmadd_ps(SET1(VM_LOG_R4), z, SET1(VM_LOG_R3));
    r = _mm512_fmadd_ps(r, z, SET1(VM_LOG_R2));
    r = _mm512_fmadd_ps(r, z, SET1(VM_LOG_R1));
    r = _mm512_mul_ps(r, z);
    __m512 hfsq = _mm512_mul_ps(_mm512_mul_ps(SET1(0.5f), f), f);
    __m512 lo = _mm512_fmadd_ps(s, _mm512_add_ps(hfsq, r), _mm512_mul_ps(k, SET1(VM_LOG_LN2_LO)));
    __m512 y = _mm512_fmadd_ps(k, SET1(VM_LOG_LN2_HI), _mm512_sub_ps(f, _mm512_sub_ps(hfsq, lo)));
    /* log 0 = -inf, log(x < 0) = NaN (and NaN stays NaN), log inf = inf */
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ),
                           SET1(-INFINITY));
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NGE_UQ), SET1(NAN));
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, SET1(INFINITY), _CMP_EQ_OQ), x);
}

/* tanh x, with the edges of qkv_vtanh: E/(E + 2) with E = e^(2|x|) - 1
 * (as 2^t·(e^r - 1) + (2^t - 1), so no cancellation near 0), 2|x| capped
 * at VM_TANH_CAP; the sign of x copied back (-0 stays -0). */
QKV_ALWAYS_INLINE __m512 tanh16(__m512 x)
{
    __m512 ax = abs16(x);
    __m512 w = _mm512_min_ps(SET1(VM_TANH_CAP), _mm512_add_ps(ax, ax)); /* NaN stays */
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(w, SET1(VM_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, SET1(VM_LN2_HI), w); /* exact; ln 2's low part left out */
    __m512 tk = _mm512_scalef_ps(SET1(1.0f), k);
    __m512 e = _mm512_fmadd_ps(expm1_poly16(r), tk, _mm512_sub_ps(tk, SET1(1.0f)));
    return with_sign16(_mm512_div_ps(e, _mm512_add_ps(e, SET1(2.0f))), x);
}

/* σ(x) = 1/(1 + e^-x) = s/(s + p), with the edges of qkv_vsigmoid: x
 * clamped to [VM_EXP_LO, VM_SIGMOID_HI] (NaN stays), t = round(x·log2 e),
 * s = 2^t and e^-x = p·2^-t (vmath.h). */
QKV_ALWAYS_INLINE __m512 sigmoid16(__m512 x)
{
    x = _mm512_min_ps(SET1(VM_SIGMOID_HI), _mm512_max_ps(SET1(VM_EXP_LO), x));
    __m512 t = _mm512_roundscale_ps(_mm512_mul_ps(x, SET1(VM_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* -r = (t·ln2 - x), its first part exact */
    __m512 nr = _mm512_fmadd_ps(t, SET1(VM_LN2_LO), _mm512_fmsub_ps(t, SET1(VM_LN2_HI), x));
    __m512 p = _mm512_add_ps(SET1(1.0f), expm1_poly16(nr));
    __m512 s = _mm512_scalef_ps(SET1(1.0f), t);
    return _mm512_div_ps(s, _mm512_add_ps(s, p));
}

/* v = x·K2·(1 + C·x²) as *hi + *lo, in float with the error-free products
 * of vmath.h's GELU comment. */
QKV_ALWAYS_INLINE void gelu_arg16(__m512 x, __m512 *hi, __m512 *lo)
{
    __m512 a = _mm512_mul_ps(x, x), ea = _mm512_fmsub_ps(x, x, a);
    __m512 u = _mm512_fmadd_ps(SET1(VM_GELU_CH), a, SET1(1.0f));
    __m512 eu = _mm512_fmsub_ps(SET1(VM_GELU_CH), a, _mm512_sub_ps(u, SET1(1.0f)));
    eu = _mm512_fmadd_ps(SET1(VM_GELU_CL), a, _mm512_fmadd_ps(SET1(VM_GELU_CH), ea, eu));
    __m512 w = _mm512_mul_ps(SET1(VM_GELU_K2F), x);
    __m512 ew = _mm512_fmadd_ps(SET1(VM_GELU_K2L), x, _mm512_fmsub_ps(SET1(VM_GELU_K2F), x, w));
    __m512 h = _mm512_mul_ps(w, u);
    *lo = _mm512_fmadd_ps(w, eu, _mm512_fmadd_ps(ew, u, _mm512_fmsub_ps(w, u, h)));
    *hi = h;
}

/* GELU's shared start: x clamped to ±VM_GELU_BIG (in *xc), -|v| =
 * -|x|·K2·(1 + C·x²) as two floats (the arithmetic is odd, so these are
 * exactly the negated parts of v), carried into e^(-|v|) = p·2^t, that
 * as *z (its exponent raised to at least VM_EXP_SUM_MIN) and 1 + *z in
 * *d. Sets *pos where v >= 0, which is where x >= 0; returns p.
 *
 * Fewer operations than exp_parts16, as GELU is bound by them (about 45
 * a register): t rounded by adding and taking away 1.5·2^23 (two
 * operations, against a multiply and a two-operation roundscale), and
 * -|v| formed from -|x| (one sign operation, against two). */
QKV_ALWAYS_INLINE __m512 gelu_parts16(__m512 x, __m512 *xc, __mmask16 *pos, __m512 *t, __m512 *z,
                                      __m512 *d)
{
    const __m512 round = SET1(12582912.0f); /* 1.5·2^23 */
    __m512 c = _mm512_min_ps(SET1(VM_GELU_BIG), _mm512_max_ps(SET1(-VM_GELU_BIG), x));
    __m512 hi, lo;
    gelu_arg16(neg_abs16(c), &hi, &lo);
    *pos = _mm512_cmp_ps_mask(c, _mm512_setzero_ps(), _CMP_GE_OQ);
    *xc = c;
    __m512 k = _mm512_sub_ps(_mm512_fmadd_ps(hi, SET1(VM_LOG2E), round), round);
    __m512 r = _mm512_fnmadd_ps(k, SET1(VM_LN2_HI), hi); /* exact */
    r = _mm512_add_ps(_mm512_fnmadd_ps(k, SET1(VM_LN2_LO), r), lo);
    __m512 p = _mm512_add_ps(SET1(1.0f), expm1_poly16(r));
    *t = k;
    *z = _mm512_scalef_ps(p, _mm512_max_ps(SET1(VM_EXP_SUM_MIN), k));
    *d = _mm512_add_ps(SET1(1.0f), *z);
    return p;
}

/* gelu x = x·σ(v): x/(1 + z) for v >= 0, (xc·p/(1 + z))·2^t below. Beyond
 * VM_GELU_BIG z is below 2^(VM_EXP_SUM_MIN + 1), so 1 + z is 1 and the result
 * x itself (inf too). */
QKV_ALWAYS_INLINE __m512 gelu16(__m512 x)
{
    __m512 xc, t, z, d;
    __mmask16 pos;
    __m512 p = gelu_parts16(x, &xc, &pos, &t, &z, &d);
    __m512 q = _mm512_div_ps(_mm512_mask_mov_ps(_mm512_mul_ps(xc, p), pos, x), d);
    return _mm512_scalef_ps(q, _mm512_maskz_mov_ps((__mmask16)~pos, t));
}

/* gelu'(x) = σ(v)·(1 + x·(1 - σ(v))·K2·(1 + 3C·x²)), with σ(v) as m·2^t
 * (t = 0 for v >= 0), so a σ below FLT_MIN keeps its precision. */
QKV_ALWAYS_INLINE __m512 gelu_grad16(__m512 x)
{
    __m512 xc, t, z, d;
    __mmask16 pos;
    __m512 p = gelu_parts16(x, &xc, &pos, &t, &z, &d);
    __m512 rd = _mm512_div_ps(SET1(1.0f), d);
    __m512 m = _mm512_mask_mov_ps(_mm512_mul_ps(p, rd), pos, rd);
    /* 1 - σ(v): z/(1 + z) for v >= 0, 1/(1 + z) below */
    __m512 sc = _mm512_mask_mov_ps(rd, pos, _mm512_mul_ps(z, rd));
    __m512 k = _mm512_fmadd_ps(_mm512_mul_ps(xc, xc), SET1(VM_GELU_K2C3F), SET1(VM_GELU_K2F));
    __m512 inner = _mm512_fmadd_ps(_mm512_mul_ps(xc, sc), k, SET1(1.0f));
    return _mm512_scalef_ps(_mm512_mul_ps(m, inner), _mm512_maskz_mov_ps((__mmask16)~pos, t));
}

/* y[i] = F(x[i]) for i < n: four registers a turn while 64 floats are
 * left (four chains in flight, one loop test: exp, tanh and sigmoid took
 * 5 to 6% less time, best of six runs each), then one at a time, the last
 * masked. Each register's arithmetic is the same either way, and the
 * loads of a turn come before its stores, so y may be x. */
#define MAP16(F)                                                                                   \
    do {                                                                                           \
        size_t i = 0;                                                                              \
        for (; i + 64 <= n; i += 64) {                                                             \
            const __m512 v0 = F(_mm512_loadu_ps(x + i)), v1 = F(_mm512_loadu_ps(x + i + 16));      \
            const __m512 v2 = F(_mm512_loadu_ps(x + i + 32)), v3 = F(_mm512_loadu_ps(x + i + 48)); \
            _mm512_storeu_ps(y + i, v0);                                                           \
            _mm512_storeu_ps(y + i + 16, v1);                                                      \
            _mm512_storeu_ps(y + i + 32, v2);                                                      \
            _mm512_storeu_ps(y + i + 48, v3);                                                      \
        }                                                                                          \
        for (; i < n; i += 16) {                                                                   \
            const __mmask16 m = tail16(i, n);                                                      \
            store16(y + i, m, F(load16(m, x + i)));                                                \
        }                                                                                          \
    } while (0)

void qkv_avx512_exp(float *y, const float *x, size_t n)
{
    MAP16(exp16);
}

void qkv_avx512_log(float *y, const float *x, size_t n)
{
    MAP16(log16);
}

void qkv_avx512_tanh(float *y, const float *x, size_t n)
{
    MAP16(tanh16);
}

void qkv_avx512_sigmoid(float *y, const float *x, size_t n)
{
    MAP16(sigmoid16);
}

/* GELU's ~35 operations a register gain nothing from four at a time
 * (396.8 against 391.7 µs for 1M floats, best of six runs each). */
void qkv_avx512_gelu(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail16(i, n);
        store16(y + i, m, gelu16(load16(m, x + i)));
    }
}

void qkv_avx512_gelu_backward(float *dx, const float *x, const float *dy, size_t n, int store)
{
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = tail16(i, n);
        __m512 g = gelu_grad16(load16(m, x + i));
        __m512 d = store ? _mm512_setzero_ps() : load16(m, dx + i);
        store16(dx + i, m, _mm512_fmadd_ps(load16(m, dy + i), g, d));
    }
}
#else
typedef int qkv_no_avx512_math; /* ISO C wants a declaration */
#endif
