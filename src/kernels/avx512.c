/*
 * avx512.c - the AVX-512 kernel set (GEMM micro-kernel, direct path, e^x,
 * short softmax rows, rows, Adam). Compiled with -mavx512f; nothing here
 * runs unless dispatch.c found AVX-512F. The fused attention kernels are in
 * avx512_attn.c, the element-wise maths in avx512_math.c. A float32 x86-64
 * build only: otherwise this file is empty.
 */
#include "kernels/kernels.h"

#ifdef QKV_HAVE_X86_KERNELS
#include <math.h>
#include "kernels/avx512.h"
#include "kernels/vmath.h"

/* AVX-512 micro-kernel: a 12×32 tile in 24 zmm accumulators. */
static void ukernel_avx512(int kc, const float *ap, const float *bp, float *c, int ldc, int mr,
                           int nr)
{
    __m512 acc[24];
    for (int i = 0; i < 24; i++)
        acc[i] = _mm512_setzero_ps();
    for (int p = 0; p < kc; p++, ap += 12, bp += 32) {
        __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);
        for (int i = 0; i < 12; i++) {
            __m512 a = _mm512_set1_ps(ap[i]);
            acc[2 * i] = _mm512_fmadd_ps(a, b0, acc[2 * i]);
            acc[2 * i + 1] = _mm512_fmadd_ps(a, b1, acc[2 * i + 1]);
        }
    }
    if (mr == 12 && nr == 32) {
        for (int i = 0; i < 12; i++) {
            float *row = c + (size_t)i * ldc;
            _mm512_storeu_ps(row, _mm512_add_ps(_mm512_loadu_ps(row), acc[2 * i]));
            _mm512_storeu_ps(row + 16, _mm512_add_ps(_mm512_loadu_ps(row + 16), acc[2 * i + 1]));
        }
        return;
    }
    _Alignas(64) float t[12 * 32];
    for (int i = 0; i < 24; i++)
        _mm512_store_ps(t + 16 * i, acc[i]);
    qkv_gemm_add_tile(t, 32, c, ldc, mr, nr);
}

/* AVX-512 direct path: rows i0..i0+R of C, up to four zmm chunks (64
 * columns) each, held in registers while p runs; R independent rows keep
 * the FMA pipeline busy. Masks cover a ragged right edge. */
QKV_ALWAYS_INLINE void rows_avx512_block(int R, int nch, int i0, int ta, int m, int n, int k,
                                         int j0, __mmask16 last, const float *A, const float *B,
                                         float *C)
{
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int q = 0; q < nch; q++)
            acc[r][q] =
                load16(q == nch - 1 ? last : 0xFFFF, C + (size_t)(i0 + r) * n + j0 + 16 * q);
    for (int p = 0; p < k; p++) {
        const float *b = B + (size_t)p * n + j0;
        __m512 bv[4];
        for (int q = 0; q < nch; q++)
            bv[q] = load16(q == nch - 1 ? last : 0xFFFF, b + 16 * q);
        for (int r = 0; r < R; r++) {
            int i = i0 + r;
            __m512 a = _mm512_set1_ps(ta ? A[(size_t)p * m + i] : A[(size_t)i * k + p]);
            for (int q = 0; q < nch; q++)
                acc[r][q] = _mm512_fmadd_ps(a, bv[q], acc[r][q]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int q = 0; q < nch; q++)
            store16(C + (size_t)(i0 + r) * n + j0 + 16 * q, q == nch - 1 ? last : 0xFFFF,
                    acc[r][q]);
}

QKV_ALWAYS_INLINE void rows_avx512_chunks(int nch, int ta, int m, int n, int k, int j0,
                                          __mmask16 last, const float *A, const float *B, float *C)
{
    int i = 0;
    for (; i + 4 <= m; i += 4)
        rows_avx512_block(4, nch, i, ta, m, n, k, j0, last, A, B, C);
    for (; i < m; i++)
        rows_avx512_block(1, nch, i, ta, m, n, k, j0, last, A, B, C);
}
static void direct_avx512(int ta, int tb, int m, int n, int k, const float *A, const float *B,
                          float *C)
{
    const float *Bk;
    if (tb && n <= 16 && k <= 16) {
        transpose16_avx512(B, (size_t)k, n, k, qkv_direct_scratch, (size_t)n);
        Bk = qkv_direct_scratch;
    } else {
        Bk = qkv_gemm_b_rows(tb, n, k, B);
    }
    if (Bk == NULL) {
        qkv_gemm_dots(ta, m, n, k, A, B, C);
        return;
    }
    for (int j0 = 0; j0 < n; j0 += 64) {
        int w = n - j0 < 64 ? n - j0 : 64, nch = (w + 15) / 16, tail = w - 16 * (nch - 1);
        __mmask16 last = (__mmask16)(tail == 16 ? 0xFFFF : (1u << tail) - 1);
        switch (nch) { /* constant chunk counts, so acc[] stays in registers */
        case 1: rows_avx512_chunks(1, ta, m, n, k, j0, last, A, Bk, C); break;
        case 2: rows_avx512_chunks(2, ta, m, n, k, j0, last, A, Bk, C); break;
        case 3: rows_avx512_chunks(3, ta, m, n, k, j0, last, A, Bk, C); break;
        default: rows_avx512_chunks(4, ta, m, n, k, j0, last, A, Bk, C); break;
        }
    }
}
/* y[j] = e^(x[j] - mx); returns Σ y[j], accumulated in double. */
static double exps_avx512(size_t n, const float *x, float mx, float *y)
{
    __m512 vmx = _mm512_set1_ps(mx);
    __m512d s0 = _mm512_setzero_pd(), s1 = s0;
    for (size_t j = 0; j < n; j += 16) {
        __mmask16 m = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1);
        __m512 v = _mm512_sub_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + j), vmx);
        __m512 e = exp_avx512(v); /* lanes past the end are e^-inf = 0 */
        store16(y + j, m, e);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(
            s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}
/* Softmax of the first lanes (m) of v in the register: the max, the
 * exponentials, their sum (in double) and the scaling without touching
 * memory. An all -inf row gives zeros. */
QKV_ALWAYS_INLINE __m512 softmax16_reg(__mmask16 m, __m512 v)
{
    v = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), m, v);
    float mx = _mm512_reduce_max_ps(v);
    if (mx == -INFINITY)
        return _mm512_setzero_ps();
    __m512 e = exp_avx512(_mm512_sub_ps(v, _mm512_set1_ps(mx)));
    __m512d s = _mm512_add_pd(
        _mm512_cvtps_pd(_mm512_castps512_ps256(e)),
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    /* s[m] = e[m] + e[m+8]; then the tree (s[m] + s[m+4]), (+2), (+1),
     * spelled out so that the lanes-as-rows path below can repeat it */
    __m256d h = _mm256_add_pd(_mm512_extractf64x4_pd(s, 1), _mm512_castpd512_pd256(s));
    __m128d g = _mm_add_pd(_mm256_extractf128_pd(h, 1), _mm256_castpd256_pd128(h));
    float inv = (float)(1 / (_mm_cvtsd_f64(g) + _mm_cvtsd_f64(_mm_unpackhi_pd(g, g))));
    return _mm512_mul_ps(e, _mm512_set1_ps(inv));
}

/* Softmax of a row of at most 16 entries held in one register. */
static void softmax16_avx512(size_t n, const float *x, float *y)
{
    __mmask16 m = (__mmask16)((1u << n) - 1);
    store16(y, m, softmax16_reg(m, load16(m, x)));
}
static void zero_avx512(float *x, size_t n)
{
    for (size_t i = 0; i < n; i += 16)
        store16(x + i, lanes((int)(n - i < 16 ? n - i : 16)), _mm512_setzero_ps());
}

/* AVX-512 rows: 16 lanes at a time, the last chunk masked. */
static void gather_avx512(float *dst, const float *table, const int *ids, size_t n, size_t d)
{
    for (size_t i = 0; i < n; i++, dst += d) {
        const float *src = table + (size_t)ids[i] * d;
        for (size_t j = 0; j < d; j += 16) {
            __mmask16 m = lanes((int)(d - j < 16 ? d - j : 16));
            store16(dst + j, m, load16(m, src + j));
        }
    }
}

static void scatter_add_avx512(float *table, const float *src, const int *ids, size_t n, size_t d)
{
    for (size_t i = 0; i < n; i++, src += d) {
        if (!row_live(src, (int)d))
            continue; /* a zero row */
        float *dst = table + (size_t)ids[i] * d;
        for (size_t j = 0; j < d; j += 16) {
            __mmask16 m = lanes((int)(d - j < 16 ? d - j : 16));
            store16(dst + j, m, _mm512_add_ps(load16(m, dst + j), load16(m, src + j)));
        }
    }
}

/* Adam, eight weights per step in double: the portable loop's operations
 * one for one (mul, add, sqrt, div; no FMA), so the same bits. */
static void adam_avx512(float *w, const float *grad, double *m, double *v, size_t n,
                        const qkv_adam_coef *c)
{
    const __m512d b1 = _mm512_set1_pd(c->b1), b2 = _mm512_set1_pd(c->b2);
    const __m512d a1 = _mm512_set1_pd(1 - c->b1), a2 = _mm512_set1_pd(1 - c->b2);
    const __m512d step = _mm512_set1_pd(c->step), rs = _mm512_set1_pd(c->rs);
    const __m512d eps = _mm512_set1_pd(c->eps), l2 = _mm512_set1_pd(c->l2);
    const __m512d keep = _mm512_set1_pd(c->keep);
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m512d wj = _mm512_cvtps_pd(_mm256_loadu_ps(w + j));
        __m512d g =
            _mm512_add_pd(_mm512_cvtps_pd(_mm256_loadu_ps(grad + j)), _mm512_mul_pd(l2, wj));
        __m512d mj = _mm512_add_pd(_mm512_mul_pd(b1, _mm512_loadu_pd(m + j)), _mm512_mul_pd(a1, g));
        __m512d vj = _mm512_add_pd(_mm512_mul_pd(b2, _mm512_loadu_pd(v + j)),
                                   _mm512_mul_pd(_mm512_mul_pd(a2, g), g));
        _mm512_storeu_pd(m + j, mj);
        _mm512_storeu_pd(v + j, vj);
        __m512d den = _mm512_add_pd(_mm512_mul_pd(_mm512_sqrt_pd(vj), rs), eps);
        __m512d upd = _mm512_div_pd(_mm512_mul_pd(step, mj), den);
        _mm256_storeu_ps(w + j, _mm512_cvtpd_ps(_mm512_sub_pd(_mm512_mul_pd(keep, wj), upd)));
    }
    qkv_portable_adam(w + j, grad + j, m + j, v + j, n - j, c);
}
const qkv_kernel_set qkv_kernels_avx512 = {
    .name = "avx512",
    .mr = 12,
    .nr = 32,
    .ukernel = ukernel_avx512,
    .direct = direct_avx512,
    .exps = exps_avx512,
    .softmax16 = softmax16_avx512,
    .attn_fwd = qkv_attn_fwd_avx512,
    .attn_bwd = qkv_attn_bwd_avx512,
    .gather = gather_avx512,
    .scatter_add = scatter_add_avx512,
    .adam = adam_avx512,
    .zero = zero_avx512,
    .exp = qkv_avx512_exp,
    .log = qkv_avx512_log,
    .tanh = qkv_avx512_tanh,
    .sigmoid = qkv_avx512_sigmoid,
    .gelu = qkv_avx512_gelu,
    .gelu_backward = qkv_avx512_gelu_backward,
};
#else
typedef int qkv_no_avx512_kernels; /* ISO C wants a declaration */
#endif
