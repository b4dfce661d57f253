/*
 * avx2.c - the AVX2+FMA kernel set (GEMM micro-kernel, direct path, e^x;
 * the element-wise maths are in avx2_math.c). Compiled with -mavx2 -mfma;
 * nothing here runs unless dispatch.c found both on this CPU. Rows and
 * Adam reuse the portable kernels. A float32 x86-64 build only: otherwise
 * this file is empty.
 */
#include "kernels/kernels.h"

#ifdef QKV_HAVE_X86_KERNELS
#include <math.h>
#include <immintrin.h>

#include "kernels/vmath.h"

/* AVX2+FMA micro-kernel: a 6×16 tile in 12 ymm accumulators. */
static void ukernel_avx2(int kc, const float *ap, const float *bp, float *c, int ldc, int mr,
                         int nr)
{
    __m256 acc[12];
    for (int i = 0; i < 12; i++)
        acc[i] = _mm256_setzero_ps();
    for (int p = 0; p < kc; p++, ap += 6, bp += 16) {
        __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);
        for (int i = 0; i < 6; i++) {
            __m256 a = _mm256_broadcast_ss(ap + i);
            acc[2 * i] = _mm256_fmadd_ps(a, b0, acc[2 * i]);
            acc[2 * i + 1] = _mm256_fmadd_ps(a, b1, acc[2 * i + 1]);
        }
    }
    if (mr == 6 && nr == 16) {
        for (int i = 0; i < 6; i++) {
            float *row = c + (size_t)i * ldc;
            _mm256_storeu_ps(row, _mm256_add_ps(_mm256_loadu_ps(row), acc[2 * i]));
            _mm256_storeu_ps(row + 8, _mm256_add_ps(_mm256_loadu_ps(row + 8), acc[2 * i + 1]));
        }
        return;
    }
    _Alignas(32) float t[6 * 16];
    for (int i = 0; i < 12; i++)
        _mm256_store_ps(t + 8 * i, acc[i]);
    qkv_gemm_add_tile(t, 16, c, ldc, mr, nr);
}
/* Lane mask for AVX2 masked loads and stores: the first w of 8 lanes. */
static inline __m256i lanes8(int w)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(w), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* AVX2 direct path: as the AVX-512 one with ymm chunks (up to 32
 * columns), a ragged right edge in a masked last chunk. */
QKV_ALWAYS_INLINE void rows_avx2_block(int R, int nch, int i0, int ta, int m, int n, int k, int j0,
                                       __m256i last, const float *A, const float *B, float *C)
{
    __m256 acc[4][4];
    const __m256i all = _mm256_set1_epi32(-1);
    for (int r = 0; r < R; r++)
        for (int q = 0; q < nch; q++)
            acc[r][q] = _mm256_maskload_ps(C + (size_t)(i0 + r) * n + j0 + 8 * q,
                                           q == nch - 1 ? last : all);
    for (int p = 0; p < k; p++) {
        const float *b = B + (size_t)p * n + j0;
        __m256 bv[4];
        for (int q = 0; q < nch; q++)
            bv[q] = _mm256_maskload_ps(b + 8 * q, q == nch - 1 ? last : all);
        for (int r = 0; r < R; r++) {
            int i = i0 + r;
            __m256 a = _mm256_set1_ps(ta ? A[(size_t)p * m + i] : A[(size_t)i * k + p]);
            for (int q = 0; q < nch; q++)
                acc[r][q] = _mm256_fmadd_ps(a, bv[q], acc[r][q]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int q = 0; q < nch; q++)
            _mm256_maskstore_ps(C + (size_t)(i0 + r) * n + j0 + 8 * q, q == nch - 1 ? last : all,
                                acc[r][q]);
}

QKV_ALWAYS_INLINE void rows_avx2_chunks(int nch, int ta, int m, int n, int k, int j0, __m256i last,
                                        const float *A, const float *B, float *C)
{
    int i = 0;
    for (; i + 3 <= m; i += 3)
        rows_avx2_block(3, nch, i, ta, m, n, k, j0, last, A, B, C);
    for (; i < m; i++)
        rows_avx2_block(1, nch, i, ta, m, n, k, j0, last, A, B, C);
}

static void direct_avx2(int ta, int tb, int m, int n, int k, const float *A, const float *B,
                        float *C)
{
    const float *Bk = qkv_gemm_b_rows(tb, n, k, B);
    if (Bk == NULL) {
        qkv_gemm_dots(ta, m, n, k, A, B, C);
        return;
    }
    for (int j0 = 0; j0 < n; j0 += 32) { /* up to four ymm chunks, the last masked */
        int w = n - j0 < 32 ? n - j0 : 32, nch = (w + 7) / 8;
        const __m256i last = lanes8(w - 8 * (nch - 1));
        switch (nch) { /* constant chunk counts, so acc[] stays in registers */
        case 1: rows_avx2_chunks(1, ta, m, n, k, j0, last, A, Bk, C); break;
        case 2: rows_avx2_chunks(2, ta, m, n, k, j0, last, A, Bk, C); break;
        case 3: rows_avx2_chunks(3, ta, m, n, k, j0, last, A, Bk, C); break;
        default: rows_avx2_chunks(4, ta, m, n, k, j0, last, A, Bk, C); break;
        }
    }
}
static inline __m256 exp_avx2(__m256 v)
{
    __m256 live = _mm256_cmp_ps(v, _mm256_set1_ps(QKV_EXP_MIN), _CMP_GE_OQ);
    v = _mm256_max_ps(v, _mm256_set1_ps(QKV_EXP_MIN));
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

static double exps_avx2(size_t n, const float *x, float mx, float *y)
{
    __m256 vmx = _mm256_set1_ps(mx);
    __m256d s0 = _mm256_setzero_pd(), s1 = s0;
    for (size_t j = 0; j < n; j += 8) {
        const __m256i m = lanes8(n - j < 8 ? (int)(n - j) : 8);
        __m256 v = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_maskload_ps(x + j, m),
                                    _mm256_castsi256_ps(m)); /* -inf past the end */
        __m256 e = exp_avx2(_mm256_sub_ps(v, vmx));
        _mm256_maskstore_ps(y + j, m, e);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    _Alignas(32) double t[4];
    _mm256_store_pd(t, _mm256_add_pd(s0, s1));
    return (t[0] + t[1]) + (t[2] + t[3]);
}
const qkv_kernel_set qkv_kernels_avx2 = {
    .name = "avx2",
    .mr = 6,
    .nr = 16,
    .ukernel = ukernel_avx2,
    .direct = direct_avx2,
    .exps = exps_avx2,
    .gather = qkv_portable_gather,
    .scatter_add = qkv_portable_scatter_add,
    .adam = qkv_portable_adam,
    .zero = qkv_portable_zero,
    .exp = qkv_avx2_exp,
    .log = qkv_avx2_log,
    .tanh = qkv_avx2_tanh,
    .sigmoid = qkv_avx2_sigmoid,
    .gelu = qkv_avx2_gelu,
    .gelu_backward = qkv_avx2_gelu_backward,
};
#else
typedef int qkv_no_avx2_kernels; /* ISO C wants a declaration */
#endif
