/*
 * avx2.c - the AVX2+FMA kernel set (e^x, softmax rows, fused attention
 * rows; its products are in avx2_gemm.c). Compiled with -mavx2 -mfma; nothing here runs unless
 * dispatch.c found both on this CPU. The norms are in avx2_norm.c, the
 * element-wise maths in avx2_math.c; rows and Adam reuse the portable
 * kernels. A float32 x86-64 build only: otherwise this file is empty.
 */
#include "kernels/kernels.h"

#ifdef QKV_HAVE_X86_KERNELS
#include "kernels/avx2.h"

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

/* The maximum of a row's non-NaN entries, as the generic x[j] > mx loop
 * finds it (-inf when there is none): max_ps(v, acc) gives acc wherever v
 * is NaN, so NaNs are skipped and the accumulators never hold one. */
static float row_max_avx2(size_t n, const float *x)
{
    __m256 mx0 = _mm256_set1_ps(-INFINITY), mx1 = mx0;
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        mx0 = _mm256_max_ps(_mm256_loadu_ps(x + j), mx0);
        mx1 = _mm256_max_ps(_mm256_loadu_ps(x + j + 8), mx1);
    }
    for (; j < n; j += 8)
        mx0 = _mm256_max_ps(load8_ninf(n - j < 8 ? (int)(n - j) : 8, x + j), mx0);
    return hmax8(_mm256_max_ps(mx0, mx1));
}

/* Softmax of rows of n entries (y may be x), with the generic path's
 * arithmetic (vec.c): the row max, then e^(x - max) by exp_avx2 with the
 * lanes past the end -inf (so 0), the sum of the e^x in two double
 * accumulators over the 8-lane chunks and exps_avx2's reduction, then one
 * multiply by (float)(1/sum); zeros for a row with no maximum above -inf,
 * and the exponentials (all 0) for a row whose sum is 0. Rows go in
 * blocks of about 64 chunks, each step for the whole block before the
 * next: the maxima; e^(x - max) into y, four chunks at a time through
 * exp_avx2_k; then row by row the sum of the e^x read back from y (the
 * lanes past the end 0) and the scaling. */
static void softmax_rows_avx2(float *y, const float *x, size_t rows, size_t n)
{
    enum { CHUNKS = 64 };
    if (n == 0)
        return;
    const size_t c = (n + 7) / 8, nb_max = c >= CHUNKS ? 1 : CHUNKS / c;
    const int last = (int)(n - 8 * (c - 1));
    float mx[CHUNKS];
    for (size_t r0 = 0; r0 < rows; r0 += nb_max, x += nb_max * n, y += nb_max * n) {
        const size_t nb = rows - r0 < nb_max ? rows - r0 : nb_max, total = nb * c;
        for (size_t i = 0; i < nb; i++)
            mx[i] = row_max_avx2(n, x + i * n);
        size_t i = 0, row = 0, q = 0; /* chunk i is chunk q of row row */
        for (; i < total; i += 4) {
            const int K = total - i >= 4 ? 4 : (int)(total - i);
            __m256 v[4];
            size_t off[4];
            int w[4];
            for (int k = 0; k < 4; k++) {
                off[k] = row * n + 8 * q;
                w[k] = q == c - 1 ? last : 8;
                v[k] = k < K ? _mm256_sub_ps(load8_ninf(w[k], x + off[k]), _mm256_set1_ps(mx[row]))
                             : _mm256_setzero_ps();
                if (k < K && ++q == c) {
                    q = 0;
                    row++;
                }
            }
            exp_avx2_k(4, v);
            for (int k = 0; k < K; k++)
                store8(y + off[k], w[k], v[k]);
        }
        /* the sums row by row, then (float)(1/sum) four rows at a time (one
         * vector division: the same correctly rounded quotients, off each
         * row's chain), then the scaling */
        _Alignas(32) double sum[CHUNKS + 4];
        _Alignas(32) float inv[CHUNKS + 4];
        for (size_t r = 0; r < nb; r++) {
            const float *yr = y + r * n;
            __m256d s0 = _mm256_setzero_pd(), s1 = s0;
            for (size_t j = 0; j < n; j += 8) {
                if (n - j >= 8) {
                    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm_loadu_ps(yr + j)));
                    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm_loadu_ps(yr + j + 4)));
                } else {
                    const __m256 e = _mm256_maskload_ps(yr + j, lanes8(last));
                    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
                    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
                }
            }
            _Alignas(32) double t[4];
            _mm256_store_pd(t, _mm256_add_pd(s0, s1));
            sum[r] = (t[0] + t[1]) + (t[2] + t[3]);
        }
        for (size_t r = nb; r % 4 != 0; r++)
            sum[r] = 1;
        for (size_t r = 0; r < nb; r += 4)
            _mm_store_ps(inv + r, _mm256_cvtpd_ps(
                                      _mm256_div_pd(_mm256_set1_pd(1), _mm256_load_pd(sum + r))));
        for (size_t r = 0; r < nb; r++) {
            float *yr = y + r * n;
            if (mx[r] == -INFINITY) {
                for (size_t j = 0; j < n; j += 8)
                    store8(yr + j, n - j < 8 ? (int)(n - j) : 8, _mm256_setzero_ps());
                continue;
            }
            if (sum[r] == 0)
                continue;
            const __m256 vi = _mm256_set1_ps(inv[r]);
            for (size_t j = 0; j < n; j += 8) {
                const int wj = n - j < 8 ? (int)(n - j) : 8;
                store8(yr + j, wj,
                       _mm256_mul_ps(wj >= 8 ? _mm256_loadu_ps(yr + j)
                                             : _mm256_maskload_ps(yr + j, lanes8(wj)),
                                     vi));
            }
        }
    }
}

/* Adam as qkv_portable_adam, the same double operations in the same
 * order, four weights a time per half of eight. Finiteness is summed as
 * x - x, 0 for a finite x and NaN for an infinity or a NaN, which stays. */
static int adam_avx2(float *w, const float *grad, double *m, double *v, size_t n,
                     const qkv_adam_coef *c)
{
    __m128 bad_w = _mm_setzero_ps();
    __m256d bad_v = _mm256_setzero_pd();
    const __m256d b1 = _mm256_set1_pd(c->b1), b2 = _mm256_set1_pd(c->b2);
    const __m256d a1 = _mm256_set1_pd(1 - c->b1), a2 = _mm256_set1_pd(1 - c->b2);
    const __m256d step = _mm256_set1_pd(c->step), rs = _mm256_set1_pd(c->rs);
    const __m256d eps = _mm256_set1_pd(c->eps), l2 = _mm256_set1_pd(c->l2);
    const __m256d keep = _mm256_set1_pd(c->keep);
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        __m256d wj = _mm256_cvtps_pd(_mm_loadu_ps(w + j));
        __m256d g = _mm256_add_pd(_mm256_cvtps_pd(_mm_loadu_ps(grad + j)), _mm256_mul_pd(l2, wj));
        __m256d mj = _mm256_add_pd(_mm256_mul_pd(b1, _mm256_loadu_pd(m + j)), _mm256_mul_pd(a1, g));
        __m256d vj = _mm256_add_pd(_mm256_mul_pd(b2, _mm256_loadu_pd(v + j)),
                                   _mm256_mul_pd(_mm256_mul_pd(a2, g), g));
        _mm256_storeu_pd(m + j, mj);
        _mm256_storeu_pd(v + j, vj);
        __m256d den = _mm256_add_pd(_mm256_mul_pd(_mm256_sqrt_pd(vj), rs), eps);
        __m256d upd = _mm256_div_pd(_mm256_mul_pd(step, mj), den);
        __m128 next = _mm256_cvtpd_ps(_mm256_sub_pd(_mm256_mul_pd(keep, wj), upd));
        _mm_storeu_ps(w + j, next);
        bad_w = _mm_add_ps(bad_w, _mm_sub_ps(next, next));
        bad_v = _mm256_add_pd(bad_v, _mm256_sub_pd(vj, vj));
    }
    const int bad = _mm_movemask_ps(_mm_cmpunord_ps(bad_w, bad_w)) |
                    _mm256_movemask_pd(_mm256_cmp_pd(bad_v, bad_v, _CMP_UNORD_Q));
    return qkv_portable_adam(w + j, grad + j, m + j, v + j, n - j, c) | (bad != 0);
}

/* Rows of the table, eight floats at a time, the tail one at a time. */
static void gather_avx2(float *dst, const float *table, const int *ids, size_t n, size_t d)
{
    if (d == 16) { /* two registers a row, no inner loop: the d_k = 16 tables */
        for (size_t i = 0; i < n; i++, dst += 16) {
            const float *src = table + 16 * (size_t)ids[i];
            const __m256 lo = _mm256_loadu_ps(src), hi = _mm256_loadu_ps(src + 8);
            _mm256_storeu_ps(dst, lo);
            _mm256_storeu_ps(dst + 8, hi);
        }
        return;
    }
    if (d == 8) {
        for (size_t i = 0; i < n; i++)
            _mm256_storeu_ps(dst + 8 * i, _mm256_loadu_ps(table + 8 * (size_t)ids[i]));
        return;
    }
    for (size_t i = 0; i < n; i++, dst += d) {
        const float *src = table + (size_t)ids[i] * d;
        size_t j = 0;
        for (; j + 8 <= d; j += 8)
            _mm256_storeu_ps(dst + j, _mm256_loadu_ps(src + j));
        for (; j < d; j++)
            dst[j] = src[j];
    }
}

/* qkv_scatter_add_scaled: a multiply then an add, 8 at a time (the
 * generic loop's two roundings); the tail entry by entry. */
static void scatter_add_scaled_avx2(float *table, const int *ids, const float *coef, size_t n,
                                    const float *x, size_t d, int skip_zero)
{
    for (size_t j = 0; j < n; j++) {
        if (skip_zero && coef[j] == 0)
            continue;
        const __m256 c = _mm256_set1_ps(coef[j]);
        float *y = table + (size_t)ids[j] * d;
        size_t p = 0;
        for (; p + 8 <= d; p += 8)
            _mm256_storeu_ps(y + p, _mm256_add_ps(_mm256_loadu_ps(y + p),
                                                  _mm256_mul_ps(c, _mm256_loadu_ps(x + p))));
        for (; p < d; p++)
            y[p] += coef[j] * x[p];
    }
}

/* The low and the high four lanes of v, in double. */
QKV_ALWAYS_INLINE __m256d lo4_pd(__m256 v)
{
    return _mm256_cvtps_pd(_mm256_castps256_ps128(v));
}

QKV_ALWAYS_INLINE __m256d hi4_pd(__m256 v)
{
    return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}

/* dot[r] = Σ dy[r][j]·y[r][j] over j ascending, in double, for nr <= 8
 * rows of n: the generic loop's sums, 8 rows' chains at a time, a row in
 * each lane of two 4-lane registers (as avx512.c's softmax_bwd_dots, with
 * 8×8 blocks). */
static void softmax_bwd_dots(const float *y, const float *dy, size_t n, int nr, double *dot)
{
    __m256d d0 = _mm256_setzero_pd(), d1 = d0;
    for (size_t j = 0; j < n; j += 8) {
        const int w = n - j < 8 ? (int)(n - j) : 8;
        __m256 a[8], b[8];
        for (int r = 0; r < 8; r++) {
            a[r] = r < nr ? load8(w, y + (size_t)r * n + j) : _mm256_setzero_ps();
            b[r] = r < nr ? load8(w, dy + (size_t)r * n + j) : _mm256_setzero_ps();
        }
        transpose8_regs(a);
        transpose8_regs(b);
        for (int c = 0; c < w; c++) {
            d0 = _mm256_fmadd_pd(lo4_pd(b[c]), lo4_pd(a[c]), d0);
            d1 = _mm256_fmadd_pd(hi4_pd(b[c]), hi4_pd(a[c]), d1);
        }
    }
    _mm256_storeu_pd(dot, d0);
    _mm256_storeu_pd(dot + 4, d1);
}

/* qkv_softmax_backward_rows: dx[j] += (float)(y[j]·(dy[j] - dot)), each
 * step in double as the generic loop takes it, 8 rows' dots at a time. */
static void softmax_bwd_avx2(float *dx, const float *y, const float *dy, size_t rows, size_t n)
{
    for (size_t r0 = 0; r0 < rows; r0 += 8) {
        const int nr = rows - r0 < 8 ? (int)(rows - r0) : 8;
        double dot[8];
        softmax_bwd_dots(y + r0 * n, dy + r0 * n, n, nr, dot);
        for (int r = 0; r < nr; r++) {
            const size_t off = (r0 + (size_t)r) * n;
            const __m256d vd = _mm256_set1_pd(dot[r]);
            for (size_t j = 0; j < n; j += 8) {
                const int w = n - j < 8 ? (int)(n - j) : 8;
                const __m256 yv = load8(w, y + off + j), gv = load8(w, dy + off + j);
                const __m128 l =
                    _mm256_cvtpd_ps(_mm256_mul_pd(lo4_pd(yv), _mm256_sub_pd(lo4_pd(gv), vd)));
                const __m128 h =
                    _mm256_cvtpd_ps(_mm256_mul_pd(hi4_pd(yv), _mm256_sub_pd(hi4_pd(gv), vd)));
                const __m256 t = _mm256_insertf128_ps(_mm256_castps128_ps256(l), h, 1);
                store8(dx + off + j, w, _mm256_add_ps(load8(w, dx + off + j), t));
            }
        }
    }
}

/* Attention's scaling and mask, 8 at a time; the tail entry by entry. */
static void scale_mask_avx2(float *s, float *a, const float *m, size_t n, double c)
{
    const int exact = (double)(float)c == c;
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 y = scale8(_mm256_loadu_ps(s + j), c, exact);
        _mm256_storeu_ps(s + j, y);
        _mm256_storeu_ps(a + j, m != NULL ? _mm256_add_ps(y, _mm256_loadu_ps(m + j)) : y);
    }
    for (; j < n; j++) {
        s[j] = (float)(c * s[j]);
        a[j] = m != NULL ? s[j] + m[j] : s[j];
    }
}

/* Attention's scaling, key mask and softmax of G rows of C registers of 8
 * (G·C <= 8, G <= 4), in registers (attn_rows_c_avx2 stores the scaled scores
 * after): softmax_rows_avx2's steps without going through memory: the
 * maximum (NaNs skipped, as row_max_avx2 skips them), exp_avx2_k, the two double accumulators and
 * exps_avx2's reduction, and one multiply by (float)(1/sum), or zeros for
 * a row with no maximum above -inf. A row with a NaN comes out NaN, as in
 * the generic path. */
QKV_ALWAYS_INLINE void attn_rows_group_avx2(const int C, const int G, const float *s, float *a,
                                            const float *m, size_t m_rs, size_t n, double c,
                                            int exact)
{
    const int last = (int)(n - 8 * (size_t)(C - 1));
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 v[8];
    int empty[8];
    for (int g = 0; g < G; g++) {
        const float *sg = s + (size_t)g * n;
        const float *mr = m != NULL ? m + g * m_rs : NULL;
        __m256 top = ninf;
        for (int q = 0; q < C; q++) {
            const int w = q < C - 1 ? 8 : last;
            const __m256i k = lanes8(w);
            const __m256 y = scale8(
                w >= 8 ? _mm256_loadu_ps(sg + 8 * q) : _mm256_maskload_ps(sg + 8 * q, k), c, exact);
            const __m256 x = mr == NULL
                                 ? y
                                 : _mm256_add_ps(y, w >= 8 ? _mm256_loadu_ps(mr + 8 * q)
                                                           : _mm256_maskload_ps(mr + 8 * q, k));
            v[g * C + q] = w >= 8 ? x : _mm256_blendv_ps(ninf, x, _mm256_castsi256_ps(k));
            top = _mm256_max_ps(v[g * C + q], top);
        }
        const float mxs = hmax8(top);
        empty[g] = mxs == -INFINITY;
        for (int q = 0; q < C; q++)
            v[g * C + q] = _mm256_sub_ps(v[g * C + q], _mm256_set1_ps(mxs));
    }
    for (int k = 0; k < G * C; k += 4)
        exp_avx2_k(G * C - k < 4 ? G * C - k : 4, v + k);
    /* each row's four partials t = s0 + s1; then, the G rows' t as the
     * columns of a 4×4 block, (t0 + t1) + (t2 + t3) for all of them at
     * once, and one division for the G values of (float)(1/sum) */
    __m256d t[4];
    for (int g = 0; g < 4; g++) {
        __m256d s0 = _mm256_setzero_pd(), s1 = s0;
        for (int q = 0; g < G && q < C; q++) {
            s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(v[g * C + q])));
            s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(v[g * C + q], 1)));
        }
        t[g] = g < G ? _mm256_add_pd(s0, s1) : _mm256_set1_pd(0.25); /* a sum of 1 */
    }
    const __m256d lo01 = _mm256_unpacklo_pd(t[0], t[1]), hi01 = _mm256_unpackhi_pd(t[0], t[1]);
    const __m256d lo23 = _mm256_unpacklo_pd(t[2], t[3]), hi23 = _mm256_unpackhi_pd(t[2], t[3]);
    const __m256d sum = /* lane g: row g's (t0 + t1) + (t2 + t3) */
        _mm256_add_pd(_mm256_add_pd(_mm256_permute2f128_pd(lo01, lo23, 0x20),
                                    _mm256_permute2f128_pd(hi01, hi23, 0x20)),
                      _mm256_add_pd(_mm256_permute2f128_pd(lo01, lo23, 0x31),
                                    _mm256_permute2f128_pd(hi01, hi23, 0x31)));
    _Alignas(16) float invs[4]; /* NaN for a row with a NaN entry */
    _mm_store_ps(invs, _mm256_cvtpd_ps(_mm256_div_pd(_mm256_set1_pd(1), sum)));
    for (int g = 0; g < G; g++) {
        const __m256 inv = _mm256_set1_ps(invs[g]);
        for (int q = 0; q < C; q++)
            store8(a + (size_t)g * n + 8 * q, q < C - 1 ? 8 : last,
                   empty[g] ? _mm256_setzero_ps() : _mm256_mul_ps(v[g * C + q], inv));
    }
}

/* Rows of C chunks, G = 8/C at a time. */
QKV_ALWAYS_INLINE void attn_rows_c_avx2(const int C, float *s, float *a, const float *m,
                                        size_t m_rs, size_t rows, size_t n, double c)
{
    const int exact = (double)(float)c == c, G = 8 / C;
    size_t i = 0;
    for (; i + (size_t)G <= rows; i += (size_t)G)
        attn_rows_group_avx2(C, G, s + i * n, a + i * n, m != NULL ? m + i * m_rs : NULL, m_rs, n,
                             c, exact);
    for (; i < rows; i++)
        attn_rows_group_avx2(C, 1, s + i * n, a + i * n, m != NULL ? m + i * m_rs : NULL, m_rs, n,
                             c, exact);
    /* the scaled scores, last and as one array (see avx512.c's attn_rows_c) */
    const size_t total = rows * n;
    size_t j = 0;
    for (; j + 8 <= total; j += 8)
        _mm256_storeu_ps(s + j, scale8(_mm256_loadu_ps(s + j), c, exact));
    if (j < total) {
        const int w = (int)(total - j);
        store8(s + j, w, scale8(_mm256_maskload_ps(s + j, lanes8(w)), c, exact));
    }
}

static int attn_rows_avx2(float *s, float *a, const float *m, size_t m_rs, size_t rows, size_t n,
                          double c)
{
    switch ((n + 7) / 8) {
    case 2: attn_rows_c_avx2(2, s, a, m, m_rs, rows, n, c); return 0;
    case 3: attn_rows_c_avx2(3, s, a, m, m_rs, rows, n, c); return 0;
    case 4: attn_rows_c_avx2(4, s, a, m, m_rs, rows, n, c); return 0;
    default: return -1; /* up to 8 keys, or past 32 */
    }
}

/* Their backward, 8 at a time; the tail entry by entry. */
static void mask_scale_bwd_avx2(float *ds, float *g, const float *m, size_t n, double c)
{
    const int exact = (double)(float)c == c;
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 gv = _mm256_loadu_ps(g + j);
        if (m != NULL) /* 0 where the mask drops the entry */
            gv = _mm256_and_ps(
                gv, _mm256_cmp_ps(_mm256_loadu_ps(m + j), _mm256_set1_ps(-INFINITY), _CMP_NEQ_UQ));
        const __m256 d = _mm256_add_ps(_mm256_loadu_ps(ds + j), gv);
        _mm256_storeu_ps(ds + j, d);
        _mm256_storeu_ps(g + j, scale8(d, c, exact));
    }
    for (; j < n; j++) {
        ds[j] += m != NULL && m[j] == -INFINITY ? 0 : g[j];
        g[j] = (float)(c * ds[j]);
    }
}

const qkv_kernel_set qkv_kernels_avx2 = {
    .name = "avx2",
    .gemm = qkv_gemm_avx2,
    .gemm_pack_b_min = 48,
    .gemm_stores = 1,
    .exps = exps_avx2,
    .gather = gather_avx2,
    .scatter_add = qkv_portable_scatter_add,
    .scatter_add_scaled = scatter_add_scaled_avx2,
    .adam = adam_avx2,
    .zero = qkv_portable_zero,
    .exp = qkv_avx2_exp,
    .log = qkv_avx2_log,
    .tanh = qkv_avx2_tanh,
    .sigmoid = qkv_avx2_sigmoid,
    .gelu = qkv_avx2_gelu,
    .gelu_backward = qkv_avx2_gelu_backward,
    .softmax_rows = softmax_rows_avx2,
    .softmax_bwd = softmax_bwd_avx2,
    .scale_mask = scale_mask_avx2,
    .attn_rows = attn_rows_avx2,
    .mask_scale_bwd = mask_scale_bwd_avx2,
    .attn_bwd = qkv_attn_bwd_avx2,
    .norm = qkv_norm_avx2,
    .norm_backward = qkv_norm_backward_avx2,
};
#else
typedef int qkv_no_avx2_kernels; /* ISO C wants a declaration */
#endif
