/*
 * avx2_attn.c - the fused attention backward for AVX2, the structure of
 * avx512_attn.c's in 8-lane registers: a row at a time with the keys in
 * the lanes (tk <= 16; the embedded form's one live row up to 32). Other
 * shapes return nonzero and take the generic path of attention.c. There is
 * no fused forward: with rows in the lanes, as AVX-512 has them, each FMA
 * of the products needs a broadcast of its own in 8 lanes, and the
 * transposes cost more than the steps through memory that fusing saves
 * (measured 20 µs against 15 for the S step's forward); the generic path's
 * tiled products and rows pass are faster here. Compiled with -mavx2
 * -mfma; runs only after dispatch.c found both.
 *
 * Whose order of additions it repeats: every step is the arithmetic of the
 * unfused backward on this set, in the same order, so the results are bit
 * for bit those of qkv_gemm's chain order (one FMA chain per element,
 * depth ascending), softmax's backward with its dot product summed in
 * order, the mask and the scaling op's rounding (scale8). What changes is
 * that an item's rows of dA and dS stay in registers between the steps,
 * and that rows of zeros in dO are skipped (a -0 may come out +0).
 */
#include "kernels/kernels.h"

#ifdef QKV_HAVE_X86_KERNELS
#include "kernels/avx2.h"

#define ATTN_MAXD 1024
static _Thread_local _Alignas(32) float attn_t8[ATTN_MAXD * 16]; /* Vᵀ, 8·C floats a row */

/* Xᵀ for the n <= 8·C rows of X (d columns) into dst, row stride 8·C: rows
 * 8h.. in the lanes of block h, zeros for rows past n. */
static void transpose_rows8(const int C, const float *X, int n, int d, float *dst)
{
    for (int h = 0; h < C; h++)
        for (int c0 = 0; c0 < d; c0 += 8) {
            const int w = d - c0 < 8 ? d - c0 : 8;
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = 8 * h + i < n ? load8(w, X + (size_t)(8 * h + i) * d + c0)
                                     : _mm256_setzero_ps();
            transpose8_regs(r);
            for (int p = 0; p < w; p++)
                _mm256_store_ps(dst + (size_t)(c0 + p) * 8 * C + 8 * h, r[p]);
        }
}

/* Nonzero when any of x[0..n) is nonzero (or NaN). */
static inline int row_live8(const float *x, int n)
{
    for (int c0 = 0; c0 < n; c0 += 8) {
        const __m256 c =
            _mm256_cmp_ps(load8(n - c0 < 8 ? n - c0 : 8, x + c0), _mm256_setzero_ps(), _CMP_NEQ_UQ);
        if (_mm256_movemask_ps(c))
            return 1;
    }
    return 0;
}

/* y[0..d) = fma(x, row, y): y += x·row. */
QKV_ALWAYS_INLINE void axpy_row8(float x, const float *row, float *y, int d)
{
    const __m256 xv = _mm256_set1_ps(x);
    for (int c0 = 0; c0 < d; c0 += 8) {
        const int w = d - c0 < 8 ? d - c0 : 8;
        store8(y + c0, w, _mm256_fmadd_ps(xv, load8(w, row + c0), load8(w, y + c0)));
    }
}

/* y[0..d) += x·row, as one rounded product added: what adding a gradient
 * row made by one FMA from zero into a table row comes to. */
QKV_ALWAYS_INLINE void add_scaled_row8(float x, const float *row, float *y, int d)
{
    const __m256 xv = _mm256_set1_ps(x);
    for (int c0 = 0; c0 < d; c0 += 8) {
        const int w = d - c0 < 8 ? d - c0 : 8;
        store8(y + c0, w, _mm256_add_ps(load8(w, y + c0), _mm256_mul_ps(xv, load8(w, row + c0))));
    }
}

/* The backward pass of one item whose tk <= 8·C keys fill C registers.
 * With rows (NULL otherwise) dq, dk and dv are tables and at most one row
 * of dO is live and nothing flows into A or S from elsewhere, so each row
 * of the item's dK and dV is one product, and goes straight into its table
 * row. */
QKV_ALWAYS_INLINE void attn_bwd_item8(const int C, const qkv_attn_shape *sh, const float *q,
                                      const float *k, const float *v, const float *a,
                                      const float *dout, float *ds, float *da, float *dq, float *dk,
                                      float *dv, const int *rows)
{
    const int tq = sh->tq, tk = sh->tk, d_k = sh->dk, d_v = sh->dv;
    int w[4];
    for (int h = 0; h < C; h++) /* keys in register h: 1 to 8 */
        w[h] = tk - 8 * h >= 8 ? 8 : tk - 8 * h;
    const int exact = (double)(float)sh->scale == sh->scale;
    float *vt = attn_t8; /* the thread's buffer, looked up once */
    if (da != NULL)
        transpose_rows8(C, v, tk, d_v, vt); /* Vᵀ, zeros past tk */
    for (int i = 0; i < tq; i++) {
        const float *go = dout + (size_t)i * d_v, *ai = a + (size_t)i * tk;
        const int live = row_live8(go, d_v);
        if (live && dv != NULL) /* dV[j,:] += A[i,j]·dO[i,:] (rows i ascending) */
            for (int j = 0; j < tk; j++) {
                if (rows != NULL)
                    add_scaled_row8(ai[j], go, dv + (size_t)rows[j] * d_v, d_v);
                else
                    axpy_row8(ai[j], go, dv + (size_t)j * d_v, d_v);
            }
        if (da == NULL)
            continue;
        /* dA[i,:] += dO[i,:]·Vᵀ */
        float *dai = da + (size_t)i * tk, *dsi = ds + (size_t)i * tk;
        __m256 g[4], sg[4];
        int nz = 0;
        for (int h = 0; h < C; h++)
            g[h] = load8(w[h], dai + 8 * h); /* 0 past tk */
        if (live) {
            for (int p = 0; p < d_v; p++)
                for (int h = 0; h < C; h++)
                    g[h] = _mm256_fmadd_ps(_mm256_set1_ps(go[p]),
                                           _mm256_load_ps(vt + (size_t)p * 8 * C + 8 * h), g[h]);
            for (int h = 0; h < C; h++)
                store8(dai + 8 * h, w[h], g[h]);
        }
        for (int h = 0; h < C; h++) {
            sg[h] = load8(w[h], dsi + 8 * h);
            nz |= _mm256_movemask_ps(
                _mm256_and_ps(_mm256_castsi256_ps(lanes8(w[h])),
                              _mm256_cmp_ps(g[h], _mm256_setzero_ps(), _CMP_NEQ_UQ)));
        }
        /* dSs[i,:] += mask-kept A ⊙ (dA - Σ dA·A), the dot summed in order */
        if (nz) {
            _Alignas(32) float gv[32];
            for (int h = 0; h < C; h++)
                _mm256_store_ps(gv + 8 * h, g[h]);
            double dot = 0;
            for (int j = 0; j < tk; j++)
                dot += (double)gv[j] * ai[j];
            const __m256d dd = _mm256_set1_pd(dot);
            const float *mr = sh->mask != NULL ? sh->mask + (size_t)i * sh->mask_rs : NULL;
            for (int h = 0; h < C; h++) {
                const __m256 ar = load8(w[h], ai + 8 * h);
                const __m128 lo = _mm256_cvtpd_ps(_mm256_mul_pd(
                    _mm256_cvtps_pd(_mm256_castps256_ps128(ar)),
                    _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(g[h])), dd)));
                const __m128 hi = _mm256_cvtpd_ps(_mm256_mul_pd(
                    _mm256_cvtps_pd(_mm256_extractf128_ps(ar, 1)),
                    _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(g[h], 1)), dd)));
                __m256 dx = _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
                if (mr != NULL) { /* 0 where the mask drops the key */
                    const __m256 m = sh->mask_cs == 0
                                         ? _mm256_set1_ps(mr[0])
                                         : load8(w[h], mr + (size_t)8 * h * sh->mask_cs);
                    dx =
                        _mm256_and_ps(dx, _mm256_cmp_ps(m, _mm256_set1_ps(-INFINITY), _CMP_NEQ_UQ));
                }
                sg[h] = _mm256_add_ps(sg[h], dx);
                store8(dsi + 8 * h, w[h], sg[h]);
            }
        }
        nz = 0;
        for (int h = 0; h < C; h++) {
            const __m256 kept = _mm256_castsi256_ps(lanes8(w[h]));
            nz |= _mm256_movemask_ps(
                _mm256_and_ps(kept, _mm256_cmp_ps(sg[h], _mm256_setzero_ps(), _CMP_NEQ_UQ)));
        }
        if (!nz)
            continue;
        /* dS = scale·dSs; dQ[i,:] += Σ_j dS[j]·K[j,:]; dK[j,:] += dS[j]·Q[i,:] */
        _Alignas(32) float d[32];
        for (int h = 0; h < C; h++)
            _mm256_store_ps(d + 8 * h, scale8(sg[h], sh->scale, exact));
        if (dq != NULL)
            for (int c0 = 0; c0 < d_k; c0 += 8) {
                const int cw = d_k - c0 < 8 ? d_k - c0 : 8;
                float *dst = dq + (size_t)(rows != NULL ? rows[i] : i) * d_k + c0;
                __m256 acc = rows != NULL ? _mm256_setzero_ps() : load8(cw, dst);
                for (int j = 0; j < tk; j++)
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(d[j]), load8(cw, k + (size_t)j * d_k + c0),
                                          acc);
                store8(dst, cw, rows != NULL ? _mm256_add_ps(load8(cw, dst), acc) : acc);
            }
        if (dk != NULL)
            for (int j = 0; j < tk; j++) {
                if (rows != NULL)
                    add_scaled_row8(d[j], q + (size_t)i * d_k, dk + (size_t)rows[j] * d_k, d_k);
                else
                    axpy_row8(d[j], q + (size_t)i * d_k, dk + (size_t)j * d_k, d_k);
            }
    }
}

/* One item, its keys in C = ⌈tk/8⌉ registers. */
static void attn_bwd_item_avx2(const qkv_attn_shape *sh, const float *q, const float *k,
                               const float *v, const float *a, const float *dout, float *ds,
                               float *da, float *dq, float *dk, float *dv, const int *rows)
{
    switch ((sh->tk + 7) / 8) {
    case 1: attn_bwd_item8(1, sh, q, k, v, a, dout, ds, da, dq, dk, dv, rows); break;
    case 2: attn_bwd_item8(2, sh, q, k, v, a, dout, ds, da, dq, dk, dv, rows); break;
    case 3: attn_bwd_item8(3, sh, q, k, v, a, dout, ds, da, dq, dk, dv, rows); break;
    default: attn_bwd_item8(4, sh, q, k, v, a, dout, ds, da, dq, dk, dv, rows); break;
    }
}

int qkv_attn_bwd_avx2(const qkv_attn_shape *sh, const float *q, const float *k, const float *v,
                      const float *a, const float *dout, float *ds, float *da, float *dq, float *dk,
                      float *dv, float *scratch)
{
    const int tq = sh->tq, tk = sh->tk, C = (tk + 7) / 8;
    /* past 16 keys only the one-row scatter form, whose generic order is
     * per-row chains too; Vᵀ takes 8·C floats a row */
    if (tk > QKV_ATTN_FUSED_KEYS || (tk > 16 && sh->row_index == NULL) ||
        (da != NULL && (size_t)sh->dv * 8 * C > (size_t)ATTN_MAXD * 16))
        return -1;
    if (sh->row_index == NULL) {
        attn_bwd_item_avx2(sh, q, k, v, a, dout, ds, da, dq, dk, dv, NULL);
        return 0;
    }
    int live = 0;
    for (int i = 0; i < tq && live < 2; i++)
        live += row_live8(dout + (size_t)i * sh->dv, sh->dv);
    if (live < 2 &&
        (da == NULL || sh->sa_zero || (!row_live8(da, tq * tk) && !row_live8(ds, tq * tk))))
        attn_bwd_item_avx2(sh, q, k, v, a, dout, ds, da, dq, dk, dv, sh->row_index);
    else
        qkv_attention_backward_scatter(sh, q, k, v, a, dout, ds, da, dq, dk, dv, scratch);
    return 0;
}
#else
typedef int qkv_no_avx2_attention; /* ISO C wants a declaration */
#endif
