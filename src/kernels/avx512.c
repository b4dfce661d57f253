/*
 * avx512.c - the AVX-512 kernel set (e^x, softmax rows, rows, Adam; its
 * products are in avx512_gemm.c). Compiled with -mavx512f; nothing here runs
 * unless dispatch.c found AVX-512F. The fused attention kernels are in
 * avx512_attn.c, the norms in avx512_norm.c, the element-wise maths in
 * avx512_math.c. A float32 x86-64 build only: otherwise this file is empty.
 */
#include "kernels/kernels.h"

#ifdef QKV_HAVE_X86_KERNELS
#include <math.h>
#include <string.h>
#include "kernels/avx512.h"
#include "kernels/vmath.h"

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
    /* the maximum of the entries that are not NaN, as the generic loop's */
    const __mmask16 num = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
    float mx = _mm512_reduce_max_ps(_mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), num, v));
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
    if (n >= 4096) {
        memset(x, 0, n * sizeof *x);
        return;
    }
    for (size_t i = 0; i < n; i += 16)
        store16(x + i, lanes((int)(n - i < 16 ? n - i : 16)), _mm512_setzero_ps());
}

/* The maximum of a row's non-NaN entries, as the generic x[j] > mx loop
 * finds it (-inf when there is none): max_ps(v, acc) gives acc wherever v
 * is NaN, so NaNs are skipped and the accumulators never hold one. */
QKV_ALWAYS_INLINE float row_max_avx512(size_t n, const float *x)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mx0 = ninf, mx1 = ninf;
    size_t j = 0;
    for (; j + 32 <= n; j += 32) {
        mx0 = _mm512_max_ps(_mm512_loadu_ps(x + j), mx0);
        mx1 = _mm512_max_ps(_mm512_loadu_ps(x + j + 16), mx1);
    }
    for (; j < n; j += 16) /* -inf past the end */
        mx0 = _mm512_max_ps(
            _mm512_mask_loadu_ps(ninf, lanes((int)(n - j < 16 ? n - j : 16)), x + j), mx0);
    return _mm512_reduce_max_ps(_mm512_max_ps(mx0, mx1));
}

/* The generic path's softmax (vec.c), step by step: the row max, then
 * e^(x - max) by exp_avx512 with the lanes past the end -inf (so 0), the
 * sum of the e^x in two double accumulators over the 16-lane chunks and
 * the same reduction as exps_avx512, then one multiply by (float)(1/sum);
 * zeros for a row with no maximum above -inf, and the exponentials (all
 * 0) for a row whose sum is 0. These helpers do it for rows of n entries
 * in c chunks, the last one masked by last. */

/* G rows of C chunks (G·C <= 8) in registers: loads, e^(x - max) for all
 * of them at once through exp_avx512_k, stored to y. */
QKV_ALWAYS_INLINE void softmax_group(const int C, const int G, size_t n, const float *mx,
                                     __mmask16 last, const float *x, float *y)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 v[8];
    for (int g = 0; g < G; g++)
        for (int q = 0; q < C; q++)
            v[g * C + q] = _mm512_sub_ps(
                _mm512_mask_loadu_ps(ninf, q < C - 1 ? 0xFFFF : last, x + g * n + 16 * q),
                _mm512_set1_ps(mx[g]));
    exp_avx512_k(G * C, v);
    for (int g = 0; g < G; g++)
        for (int q = 0; q < C; q++)
            store16(y + g * n + 16 * q, q < C - 1 ? 0xFFFF : last, v[g * C + q]);
}

/* The sum of a row's e^x, read back from y: exps_avx512's accumulators (the
 * lanes past the end 0) and reduction. */
QKV_ALWAYS_INLINE double softmax_sum(const int C, const float *y, __mmask16 last)
{
    __m512d s0 = _mm512_setzero_pd(), s1 = s0;
    for (int q = 0; q < C; q++) {
        if (q < C - 1 || last == 0xFFFF) {
            s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm256_loadu_ps(y + 16 * q)));
            s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_loadu_ps(y + 16 * q + 8)));
        } else {
            const __m512 e = _mm512_maskz_loadu_ps(last, y + 16 * q);
            s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
            s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(
                                       _mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
        }
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}

/* The scaling of nb <= 32 rows whose e^x are in y, with maxima mx: the
 * sums row by row, (float)(1/sum) eight rows at a time (one vector
 * division: the same correctly rounded quotients), then the products.
 * No maximum: zeros; a sum of 0: the e^x as they are (all 0). */
QKV_ALWAYS_INLINE void softmax_finish(const int C, float *y, size_t n, size_t nb, const float *mx,
                                      __mmask16 last)
{
    _Alignas(64) double sum[32];
    _Alignas(64) float inv[32];
    for (size_t i = 0; i < nb; i++)
        sum[i] = softmax_sum(C, y + i * n, last);
    for (size_t i = 0; i < nb; i += 8) {
        const __mmask8 m = (__mmask8)(nb - i >= 8 ? 0xFF : (1u << (nb - i)) - 1);
        const __m512d sv = _mm512_mask_loadu_pd(_mm512_set1_pd(1.0), m, sum + i);
        _mm256_store_ps(inv + i, _mm512_cvtpd_ps(_mm512_div_pd(_mm512_set1_pd(1.0), sv)));
    }
    for (size_t i = 0; i < nb; i++) {
        const int empty = mx[i] == -INFINITY; /* zeros (its e^x may be NaN) */
        const __m512 v = sum[i] == 0 ? _mm512_set1_ps(1.0f) : _mm512_set1_ps(inv[i]);
        for (int q = 0; q < C; q++) {
            const __mmask16 m = q < C - 1 ? 0xFFFF : last;
            float *yq = y + i * n + 16 * (size_t)q;
            store16(yq, m, empty ? _mm512_setzero_ps() : _mm512_mul_ps(load16(m, yq), v));
        }
    }
}

/* Rows of C <= 8 chunks, in blocks of B rows, each step for the block
 * before the next: the maxima; e^(x - max) into y, G = 8/C rows at a
 * time; the sums and the scaling, row by row. */
QKV_ALWAYS_INLINE void softmax_rows_regs(const int C, float *y, const float *x, size_t rows,
                                         size_t n)
{
    enum { B = 32 };
    const int G = 8 / C;
    const __mmask16 last = lanes((int)(n - 16 * (size_t)(C - 1)));
    float mx[B];
    for (size_t r0 = 0; r0 < rows; r0 += B, x += B * n, y += B * n) {
        const size_t nb = rows - r0 < B ? rows - r0 : B;
        for (size_t i = 0; i < nb; i++)
            mx[i] = row_max_avx512(n, x + i * n);
        size_t i = 0;
        for (; i + (size_t)G <= nb; i += (size_t)G)
            softmax_group(C, G, n, mx + i, last, x + i * n, y + i * n);
        for (; i < nb; i++)
            softmax_group(C, 1, n, mx + i, last, x + i * n, y + i * n);
        softmax_finish(C, y, n, nb, mx, last);
    }
}

/* Rows of more than 8 chunks, one at a time: the max, e^(x - max) into y
 * eight chunks at a time, then the sum of the e^x read back from y (the
 * lanes past the end 0, as in exps_avx512) and the scaling. */
static void softmax_row_long(size_t n, const float *x, float *y)
{
    const float mx = row_max_avx512(n, x);
    if (mx == -INFINITY) {
        zero_avx512(y, n);
        return;
    }
    const __m512 vmx = _mm512_set1_ps(mx), ninf = _mm512_set1_ps(-INFINITY);
    size_t j = 0;
    for (; j + 128 <= n; j += 128) {
        __m512 v[8];
        for (int k = 0; k < 8; k++)
            v[k] = _mm512_sub_ps(_mm512_loadu_ps(x + j + 16 * k), vmx);
        exp_avx512_k(8, v);
        for (int k = 0; k < 8; k++)
            _mm512_storeu_ps(y + j + 16 * k, v[k]);
    }
    for (; j < n; j += 16) {
        const __mmask16 m = lanes((int)(n - j < 16 ? n - j : 16));
        store16(y + j, m, exp_avx512(_mm512_sub_ps(_mm512_mask_loadu_ps(ninf, m, x + j), vmx)));
    }
    __m512d s0 = _mm512_setzero_pd(), s1 = s0;
    for (j = 0; j < n; j += 16) {
        if (n - j >= 16) {
            s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm256_loadu_ps(y + j)));
            s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_loadu_ps(y + j + 8)));
        } else {
            const __m512 e = _mm512_maskz_loadu_ps(lanes((int)(n - j)), y + j);
            s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
            s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(
                                       _mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
        }
    }
    const double sum = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    if (sum == 0)
        return;
    const __m512 inv = _mm512_set1_ps((float)(1 / sum));
    for (j = 0; j < n; j += 16) {
        const __mmask16 m = lanes((int)(n - j < 16 ? n - j : 16));
        store16(y + j, m, _mm512_mul_ps(load16(m, y + j), inv));
    }
}

/* Softmax of rows of n entries (y may be x): the generic path's bits. */
static void softmax_rows_avx512(float *y, const float *x, size_t rows, size_t n)
{
    switch ((n + 15) / 16) { /* constant chunk counts, so v[] stays in registers */
    case 0: break;
    case 1: softmax_rows_regs(1, y, x, rows, n); break;
    case 2: softmax_rows_regs(2, y, x, rows, n); break;
    case 3: softmax_rows_regs(3, y, x, rows, n); break;
    case 4: softmax_rows_regs(4, y, x, rows, n); break;
    case 5: softmax_rows_regs(5, y, x, rows, n); break;
    case 6: softmax_rows_regs(6, y, x, rows, n); break;
    case 7: softmax_rows_regs(7, y, x, rows, n); break;
    case 8: softmax_rows_regs(8, y, x, rows, n); break;
    default:
        for (size_t r = 0; r < rows; r++)
            softmax_row_long(n, x + r * n, y + r * n);
        break;
    }
}

/* The low and the high eight lanes of v, in double. */
QKV_ALWAYS_INLINE __m512d lo8_pd(__m512 v)
{
    return _mm512_cvtps_pd(_mm512_castps512_ps256(v));
}

QKV_ALWAYS_INLINE __m512d hi8_pd(__m512 v)
{
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

/* dot[r] = Σ dy[r][j]·y[r][j] over j ascending, in double, for nr <= 16
 * rows of n (rows n apart): the generic loop's sums. That loop waits on
 * one chain of double adds a row; here 16 rows' chains advance together,
 * a row in each lane, so each 16×16 block of y and of dy is transposed in
 * registers (rows past nr and entries past n load as 0, and add +0 to a
 * sum that cannot be -0). A float product is exact in double, so one FMA
 * gives the loop's product-then-add. */
static void softmax_bwd_dots(const float *y, const float *dy, size_t n, int nr, double *dot)
{
    __m512d d0 = _mm512_setzero_pd(), d1 = d0;
    for (size_t j = 0; j < n; j += 16) {
        const int w = n - j < 16 ? (int)(n - j) : 16;
        const __mmask16 m = lanes(w);
        __m512 a[16], b[16];
        for (int r = 0; r < 16; r++) {
            a[r] = r < nr ? load16(m, y + (size_t)r * n + j) : _mm512_setzero_ps();
            b[r] = r < nr ? load16(m, dy + (size_t)r * n + j) : _mm512_setzero_ps();
        }
        transpose16_regs(a);
        transpose16_regs(b);
        for (int c = 0; c < w; c++) { /* column c: rows 0-7 in d0, 8-15 in d1 */
            d0 = _mm512_fmadd_pd(lo8_pd(b[c]), lo8_pd(a[c]), d0);
            d1 = _mm512_fmadd_pd(hi8_pd(b[c]), hi8_pd(a[c]), d1);
        }
    }
    _mm512_storeu_pd(dot, d0);
    _mm512_storeu_pd(dot + 8, d1);
}

/* qkv_softmax_backward_rows: dx[j] += (float)(y[j]·(dy[j] - dot)), each
 * step in double as the generic loop takes it, 16 rows' dots at a time. */
static void softmax_bwd_avx512(float *dx, const float *y, const float *dy, size_t rows, size_t n)
{
    for (size_t r0 = 0; r0 < rows; r0 += 16) {
        const int nr = rows - r0 < 16 ? (int)(rows - r0) : 16;
        double dot[16];
        softmax_bwd_dots(y + r0 * n, dy + r0 * n, n, nr, dot);
        for (int r = 0; r < nr; r++) {
            const size_t off = (r0 + (size_t)r) * n;
            const __m512d vd = _mm512_set1_pd(dot[r]);
            for (size_t j = 0; j < n; j += 16) {
                const __mmask16 m = lanes(n - j < 16 ? (int)(n - j) : 16);
                const __m512 yv = load16(m, y + off + j), gv = load16(m, dy + off + j);
                const __m256 l =
                    _mm512_cvtpd_ps(_mm512_mul_pd(lo8_pd(yv), _mm512_sub_pd(lo8_pd(gv), vd)));
                const __m256 h =
                    _mm512_cvtpd_ps(_mm512_mul_pd(hi8_pd(yv), _mm512_sub_pd(hi8_pd(gv), vd)));
                const __m512 t = _mm512_castpd_ps(_mm512_insertf64x4(
                    _mm512_castps_pd(_mm512_castps256_ps512(l)), _mm256_castps_pd(h), 1));
                store16(dx + off + j, m, _mm512_add_ps(load16(m, dx + off + j), t));
            }
        }
    }
}

/* Attention's scaling and mask, 16 at a time. */
static void scale_mask_avx512(float *s, float *a, const float *m, size_t n, double c)
{
    const int exact = scale_is_float(c);
    for (size_t j = 0; j < n; j += 16) {
        const __mmask16 k = lanes(n - j < 16 ? (int)(n - j) : 16);
        const __m512 y = scale16(load16(k, s + j), c, exact);
        store16(s + j, k, y);
        store16(a + j, k, m != NULL ? _mm512_add_ps(y, load16(k, m + j)) : y);
    }
}

/* A row's 8 double partials from its C chunks of e^x: softmax_sum's two
 * accumulators (lanes 0-7 and 8-15 of each chunk), added. */
QKV_ALWAYS_INLINE __m512d row_partials(const int C, const __m512 *e)
{
    __m512d s0 = _mm512_setzero_pd(), s1 = s0;
    for (int q = 0; q < C; q++) {
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e[q])));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(
                                   _mm512_extractf64x4_pd(_mm512_castps_pd(e[q]), 1))));
    }
    return _mm512_add_pd(s0, s1);
}

/* attn_rows for G rows of C chunks (G·C <= 8) in registers, but for the
 * scaled scores, which attn_rows_c stores: the scaling and the mask,
 * chunk by chunk; then
 * softmax_rows_regs's steps without going through memory: the row
 * maximum (NaNs skipped, as row_max_avx512 skips them), exp_avx512_k,
 * softmax_sum's accumulators and reduction, and one multiply by
 * (float)(1/sum), or zeros for a row with no maximum above -inf. A row
 * with a NaN comes out NaN, as in the generic path. */
QKV_ALWAYS_INLINE void attn_rows_group(const int C, const int G, const float *s, float *a,
                                       const float *m, size_t m_rs, size_t n, double c, int exact,
                                       __mmask16 last)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 v[8];
    int empty[8];
    for (int g = 0; g < G; g++) {
        __m512 top = ninf;
        for (int q = 0; q < C; q++) {
            const __mmask16 k = q < C - 1 ? (__mmask16)0xFFFF : last;
            const __m512 y = scale16(load16(k, s + (size_t)g * n + 16 * q), c, exact);
            const __m512 x = m != NULL ? _mm512_add_ps(y, load16(k, m + g * m_rs + 16 * q)) : y;
            v[g * C + q] = _mm512_mask_mov_ps(ninf, k, x); /* -inf past the end */
            top = _mm512_max_ps(v[g * C + q], top);
        }
        const float mxs = _mm512_reduce_max_ps(top);
        empty[g] = mxs == -INFINITY;
        for (int q = 0; q < C; q++)
            v[g * C + q] = _mm512_sub_ps(v[g * C + q], _mm512_set1_ps(mxs));
    }
    exp_avx512_k(G * C, v);
    for (int g = 0; g < G; g++) {
        const double sum = _mm512_reduce_add_pd(row_partials(C, v + g * C));
        const __m512 inv = _mm512_set1_ps((float)(1 / sum)); /* NaN for a NaN entry */
        for (int q = 0; q < C; q++)
            store16(a + (size_t)g * n + 16 * q, q < C - 1 ? (__mmask16)0xFFFF : last,
                    empty[g] ? _mm512_setzero_ps() : _mm512_mul_ps(v[g * C + q], inv));
    }
}

/* The maxima of four rows from their lane-wise maxima t[0..3], row g's in
 * every lane of block g (lanes 4g..4g+3). The t hold no NaN (max_ps keeps
 * its second operand), and a maximum is exact in any order; only the sign
 * of a zero maximum may differ from _mm512_reduce_max_ps's, and neither
 * x - max nor its e^ sees it. */
QKV_ALWAYS_INLINE __m512 max4_rows(const __m512 *t)
{
    const __m512 a = _mm512_max_ps(_mm512_shuffle_f32x4(t[0], t[1], 0x44),
                                   _mm512_shuffle_f32x4(t[0], t[1], 0xEE));
    const __m512 b = _mm512_max_ps(_mm512_shuffle_f32x4(t[2], t[3], 0x44),
                                   _mm512_shuffle_f32x4(t[2], t[3], 0xEE));
    /* blocks: row 0's two halves' maxima, row 1's, row 2's, row 3's */
    __m512 q = _mm512_max_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
    q = _mm512_max_ps(q, _mm512_permute_ps(q, 0x4E));
    return _mm512_max_ps(q, _mm512_permute_ps(q, 0xB1));
}

/* The sums of four rows' 8 double partials s[0..3], in lanes 2g and 2g+1
 * for row g, by _mm512_reduce_add_pd's tree: (l + l+4), then (l + l+2),
 * then lane 0 + lane 1; the four rows' adds share each instruction. */
QKV_ALWAYS_INLINE __m512d sum4_rows(const __m512d *s)
{
    const __m512d a = _mm512_add_pd(_mm512_shuffle_f64x2(s[0], s[1], 0x44),
                                    _mm512_shuffle_f64x2(s[0], s[1], 0xEE));
    const __m512d b = _mm512_add_pd(_mm512_shuffle_f64x2(s[2], s[3], 0x44),
                                    _mm512_shuffle_f64x2(s[2], s[3], 0xEE));
    const __m512d q =
        _mm512_add_pd(_mm512_shuffle_f64x2(a, b, 0x88), _mm512_shuffle_f64x2(a, b, 0xDD));
    return _mm512_add_pd(q, _mm512_permute_pd(q, 0x55));
}

/* attn_rows_group for four rows, the same bits: each step's horizontal
 * work (the maxima, the sums, 1/sum) done once for the four rows, not row
 * by row, which had left a long chain of dependent shuffles per row. */
QKV_ALWAYS_INLINE void attn_rows_group4(const int C, const float *s, float *a, const float *m,
                                        size_t m_rs, size_t n, double c, int exact, __mmask16 last)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 v[8], top[4];
    for (int g = 0; g < 4; g++) {
        top[g] = ninf;
        for (int q = 0; q < C; q++) {
            const __mmask16 k = q < C - 1 ? (__mmask16)0xFFFF : last;
            const __m512 y = scale16(load16(k, s + (size_t)g * n + 16 * q), c, exact);
            const __m512 x = m != NULL ? _mm512_add_ps(y, load16(k, m + g * m_rs + 16 * q)) : y;
            v[g * C + q] = _mm512_mask_mov_ps(ninf, k, x); /* -inf past the end */
            top[g] = _mm512_max_ps(v[g * C + q], top[g]);
        }
    }
    const __m512 mx = max4_rows(top);
    /* bit g: row g has no maximum above -inf, and comes out zeros */
    const unsigned empty = _mm512_cmp_ps_mask(mx, ninf, _CMP_EQ_OQ);
    for (int g = 0; g < 4; g++) {
        const __m512 mg = _mm512_permutexvar_ps(_mm512_set1_epi32(4 * g), mx);
        for (int q = 0; q < C; q++)
            v[g * C + q] = _mm512_sub_ps(v[g * C + q], mg);
    }
    exp_avx512_k(4 * C, v);
    __m512d sums[4];
    for (int g = 0; g < 4; g++) {
        sums[g] = row_partials(C, v + g * C);
    }
    /* (float)(1/sum) of row g in lane 2g: NaN for a NaN entry */
    const __m512 inv = _mm512_castps256_ps512(
        _mm512_cvtpd_ps(_mm512_div_pd(_mm512_set1_pd(1.0), sum4_rows(sums))));
    for (int g = 0; g < 4; g++) {
        const __m512 ig = _mm512_permutexvar_ps(_mm512_set1_epi32(2 * g), inv);
        for (int q = 0; q < C; q++)
            store16(a + (size_t)g * n + 16 * q, q < C - 1 ? (__mmask16)0xFFFF : last,
                    (empty >> (4 * g)) & 1 ? _mm512_setzero_ps() : _mm512_mul_ps(v[g * C + q], ig));
    }
}

/* attn_rows for rows of C <= 2 chunks: four at a time, then one by one. */
QKV_ALWAYS_INLINE void attn_rows_c(const int C, float *s, float *a, const float *m, size_t m_rs,
                                   size_t rows, size_t n, double c)
{
    const int exact = scale_is_float(c);
    const __mmask16 last = lanes((int)(n - 16 * (size_t)(C - 1)));
    size_t i = 0;
    for (; i + 4 <= rows; i += 4)
        attn_rows_group4(C, s + i * n, a + i * n, m != NULL ? m + i * m_rs : NULL, m_rs, n, c,
                         exact, last);
    for (; i < rows; i++) /* the last rows, one at a time */
        attn_rows_group(C, 1, s + i * n, a + i * n, m != NULL ? m + i * m_rs : NULL, m_rs, n, c,
                        exact, last);
    /* The scaled scores, stored last and as one array: stored row by row,
     * a masked store's lanes past the row's end (masked off, but in its
     * range) overlapped the next row's load, which then waited for the
     * store to retire. R's step took 1.2x longer. */
    const size_t total = rows * n;
    for (size_t j = 0; j < total; j += 16) {
        const __mmask16 k = lanes(total - j < 16 ? (int)(total - j) : 16);
        store16(s + j, k, scale16(load16(k, s + j), c, exact));
    }
}

/* Rows of 17 to 32 keys (shorter ones take the fused path of
 * avx512_attn.c, longer ones the steps one by one). */
static int attn_rows_avx512(float *s, float *a, const float *m, size_t m_rs, size_t rows, size_t n,
                            double c)
{
    if (n <= 16 || n > 32)
        return -1;
    attn_rows_c(2, s, a, m, m_rs, rows, n, c);
    return 0;
}

/* Their backward, 16 at a time. */
static void mask_scale_bwd_avx512(float *ds, float *g, const float *m, size_t n, double c)
{
    const int exact = scale_is_float(c);
    for (size_t j = 0; j < n; j += 16) {
        const __mmask16 k = lanes(n - j < 16 ? (int)(n - j) : 16);
        __m512 gv = load16(k, g + j);
        if (m != NULL) /* 0 where the mask drops the entry */
            gv = _mm512_maskz_mov_ps(
                _mm512_cmp_ps_mask(load16(k, m + j), _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ), gv);
        const __m512 d = _mm512_add_ps(load16(k, ds + j), gv);
        store16(ds + j, k, d);
        store16(g + j, k, scale16(d, c, exact));
    }
}

/* qkv_scatter_add_scaled: a multiply then an add, 16 at a time (the
 * generic loop's two roundings), the tail masked. */
static void scatter_add_scaled_avx512(float *table, const int *ids, const float *coef, size_t n,
                                      const float *x, size_t d, int skip_zero)
{
    for (size_t j = 0; j < n; j++) {
        if (skip_zero && coef[j] == 0)
            continue;
        const __m512 c = _mm512_set1_ps(coef[j]);
        float *y = table + (size_t)ids[j] * d;
        for (size_t p = 0; p < d; p += 16) {
            const __mmask16 m = lanes(d - p < 16 ? (int)(d - p) : 16);
            store16(y + p, m, _mm512_add_ps(load16(m, y + p), _mm512_mul_ps(c, load16(m, x + p))));
        }
    }
}

/* AVX-512 rows: 16 lanes at a time, the last chunk masked. */
static void gather_avx512(float *dst, const float *table, const int *ids, size_t n, size_t d)
{
    if (d == 16) { /* one register a row: the per-head and d_k = 16 tables */
        for (size_t i = 0; i < n; i++)
            _mm512_storeu_ps(dst + 16 * i, _mm512_loadu_ps(table + 16 * (size_t)ids[i]));
        return;
    }
    if (d % 16 == 0) { /* whole registers: no masks */
        for (size_t i = 0; i < n; i++, dst += d) {
            const float *src = table + (size_t)ids[i] * d;
            for (size_t j = 0; j < d; j += 16)
                _mm512_storeu_ps(dst + j, _mm512_loadu_ps(src + j));
        }
        return;
    }
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
 * one for one (mul, add, sqrt, div; no FMA), so the same bits. Finiteness
 * is summed as x - x, as adam_avx2 does. */
static int adam_avx512(float *w, const float *grad, double *m, double *v, size_t n,
                       const qkv_adam_coef *c)
{
    __m256 bad_w = _mm256_setzero_ps();
    __m512d bad_v = _mm512_setzero_pd();
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
        __m256 next = _mm512_cvtpd_ps(_mm512_sub_pd(_mm512_mul_pd(keep, wj), upd));
        _mm256_storeu_ps(w + j, next);
        bad_w = _mm256_add_ps(bad_w, _mm256_sub_ps(next, next));
        bad_v = _mm512_add_pd(bad_v, _mm512_sub_pd(vj, vj));
    }
    const int bad = _mm256_movemask_ps(_mm256_cmp_ps(bad_w, bad_w, _CMP_UNORD_Q)) |
                    _mm512_cmp_pd_mask(bad_v, bad_v, _CMP_UNORD_Q);
    return qkv_portable_adam(w + j, grad + j, m + j, v + j, n - j, c) | (bad != 0);
}
const qkv_kernel_set qkv_kernels_avx512 = {
    .name = "avx512",
    .gemm = qkv_gemm_avx512,
    .gemm_pack_b_min = 48,
    .gemm_stores = 1,
    .exps = exps_avx512,
    .softmax16 = softmax16_avx512,
    .attn_fwd = qkv_attn_fwd_avx512,
    .attn_bwd = qkv_attn_bwd_avx512,
    .gather = gather_avx512,
    .scatter_add = scatter_add_avx512,
    .scatter_add_scaled = scatter_add_scaled_avx512,
    .adam = adam_avx512,
    .zero = zero_avx512,
    .exp = qkv_avx512_exp,
    .log = qkv_avx512_log,
    .tanh = qkv_avx512_tanh,
    .sigmoid = qkv_avx512_sigmoid,
    .gelu = qkv_avx512_gelu,
    .gelu_backward = qkv_avx512_gelu_backward,
    .softmax_rows = softmax_rows_avx512,
    .softmax_bwd = softmax_bwd_avx512,
    .scale_mask = scale_mask_avx512,
    .attn_rows = attn_rows_avx512,
    .mask_scale_bwd = mask_scale_bwd_avx512,
    .norm = qkv_norm_avx512,
    .norm_backward = qkv_norm_backward_avx512,
};
#else
typedef int qkv_no_avx512_kernels; /* ISO C wants a declaration */
#endif
