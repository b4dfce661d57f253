/*
 * avx512_attn.c - fused attention for AVX-512, keys in one register
 * (tk <= 16; backward of the embedded form's one live row, in two up to
 * 32); other shapes return nonzero and take the generic path of
 * attention.c. Compiled with -mavx512f; runs only after dispatch.c found
 * AVX-512F.
 *
 * Whose order of additions it repeats: every step is the arithmetic of the
 * unfused ops in the same order, so the results are bit for bit those of
 * qkv_gemm's chain order (one FMA chain per element, depth ascending),
 * the scaling op's rounding (c·x in double, then to float), the mask,
 * softmax16 (max, e^x, the sum in double in the same tree, 1/sum)
 * and, backward, softmax's backward with its dot product summed in order.
 * What changes is that an item's S and A rows never leave the registers
 * between the steps, and that backward skips rows of zeros.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

#ifdef QKV_HAVE_X86_KERNELS
#include "kernels/avx512.h"

#define ATTN_MAXD 1024
static _Thread_local _Alignas(64) float attn_kt[ATTN_MAXD * 16];

/* Xᵀ for the tk <= 16·C rows of X (d columns) into dst, row stride 16·C:
 * keys 16h.. in lanes of block h. */
static void transpose_keys_c(const int C, const float *X, int tk, int d, float *dst)
{
    for (int h = 0; h < C && 16 * h < tk; h++)
        for (int c0 = 0; c0 < d; c0 += 16)
            transpose16_avx512(X + (size_t)16 * h * d + c0, (size_t)d,
                               tk - 16 * h < 16 ? tk - 16 * h : 16, d - c0 < 16 ? d - c0 : 16,
                               dst + (size_t)c0 * 16 * C + 16 * h, (size_t)16 * C);
}

/* Lanes 0-7 (hf = 0) or 8-15 (hf = 1) of x. */
QKV_ALWAYS_INLINE __m256 half_ps(__m512 x, int hf)
{
    __m512d d = _mm512_castps_pd(x);
    return _mm256_castpd_ps(hf == 0 ? _mm512_castpd512_pd256(d) : _mm512_extractf64x4_pd(d, 1));
}

/* The mask's row i from key j0 on, as lanes (0 beyond tk). */
QKV_ALWAYS_INLINE __m512 mask_row(const qkv_attn_shape *sh, int i, int j0, __mmask16 km)
{
    const float *mr = sh->mask + (size_t)i * sh->mask_rs;
    return sh->mask_cs == 0 ? _mm512_maskz_mov_ps(km, _mm512_set1_ps(mr[0]))
                            : load16(km, mr + (size_t)j0 * sh->mask_cs);
}

/* Rows i0..i0+nq (nq <= 16) of S, A and O with the rows in the lanes:
 * register j holds column j (key j) for all the rows, so the softmax of 16
 * rows is a handful of vertical operations instead of 16 latency-bound
 * horizontal reductions. NJ (a multiple of 4, >= tk) is the number of key
 * registers; K has NJ rows (zero past tk). */
QKV_ALWAYS_INLINE void attn_fwd_block(const int NJ, int i0, int nq, const qkv_attn_shape *sh,
                                      const float *q, const float *kr, const float *v, float *s,
                                      float *a, float *o)
{
    const int tk = sh->tk, dk = sh->dk, dv = sh->dv;
    const __mmask16 qm = lanes(nq), km = lanes(tk);
    __m512 st[16], t[16];
    /* S[i,j] = Σ_p Q[i,p]·K[j,p], one FMA chain per (i,j), p ascending */
    transpose_keys_c(1, q + (size_t)i0 * dk, nq, dk, attn_kt); /* Qᵀ of the block */
    for (int j = 0; j < NJ; j++)
        st[j] = _mm512_setzero_ps();
    for (int p = 0; p < dk; p++) {
        __m512 qp = _mm512_maskz_load_ps(qm, attn_kt + (size_t)p * 16);
        for (int j = 0; j < NJ; j++)
            st[j] = _mm512_fmadd_ps(_mm512_set1_ps(kr[(size_t)j * dk + p]), qp, st[j]);
    }
    const int exact = scale_is_float(sh->scale);
    for (int j = 0; j < 16; j++)
        t[j] = st[j] = j >= NJ ? _mm512_setzero_ps() : scale16(st[j], sh->scale, exact);
    transpose16_regs(t);
    for (int i = 0; i < nq; i++)
        store16(s + (size_t)(i0 + i) * tk, km, t[i]);
    /* + mask, and -inf for the padding keys past tk; a mask that differs by
     * row is gathered a column at a time, from row i0 + lane */
    const __m512i mrows = _mm512_mullo_epi32(
        _mm512_add_epi32(_mm512_set1_epi32(i0),
                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)),
        _mm512_set1_epi32((int)sh->mask_rs));
    for (int j = 0; j < NJ; j++) {
        if (j >= tk) {
            st[j] = _mm512_set1_ps(-INFINITY);
        } else if (sh->mask != NULL) {
            const float *mc = sh->mask + (size_t)j * sh->mask_cs;
            __m512 col = sh->mask_rs == 0
                             ? _mm512_set1_ps(mc[0])
                             : _mm512_mask_i32gather_ps(_mm512_setzero_ps(), qm, mrows, mc, 4);
            st[j] = _mm512_add_ps(st[j], col);
        }
    }
    /* softmax down the registers: the max, e^(x - max), the sum in double
     * in softmax16_reg's tree, 1/sum, the scaling; all-masked rows give 0 */
    __m512 mx = _mm512_set1_ps(-INFINITY); /* NaNs skipped, as the generic max skips them */
    for (int j = 0; j < NJ; j++)
        mx = _mm512_max_ps(st[j], mx);
    const __mmask16 live = _mm512_cmp_ps_mask(mx, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
    for (int j = 0; j < 16; j++)
        st[j] = j < NJ ? exp_avx512(_mm512_sub_ps(st[j], mx)) : _mm512_setzero_ps();
    __m512d half[2];
    for (int hf = 0; hf < 2; hf++) {
        /* registers from NJ on hold +0, and x + 0 is x for the sums here
         * (never -0): those terms are left out, the bits unchanged */
        __m512d d[8];
        for (int m = 0; m < 8; m++) {
            if (m >= NJ) {
                d[m] = _mm512_setzero_pd();
                continue;
            }
            d[m] = _mm512_cvtps_pd(half_ps(st[m], hf));
            if (m + 8 < NJ)
                d[m] = _mm512_add_pd(d[m], _mm512_cvtps_pd(half_ps(st[m + 8], hf)));
        }
        for (int m = 0; m < 4; m++)
            if (m + 4 < NJ)
                d[m] = _mm512_add_pd(d[m + 4], d[m]);
        for (int m = 0; m < 2; m++)
            d[m] = _mm512_add_pd(d[m + 2], d[m]);
        half[hf] = _mm512_div_pd(_mm512_set1_pd(1), _mm512_add_pd(d[0], d[1]));
    }
    const __m512 inv = _mm512_castpd_ps(
        _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(half[0]))),
                           _mm256_castps_pd(_mm512_cvtpd_ps(half[1])), 1));
    _Alignas(64) float pa[16 * 16]; /* A's columns, read back by the O loop */
    for (int j = 0; j < 16; j++) {
        t[j] = _mm512_maskz_mul_ps(live, st[j], inv);
        _mm512_store_ps(pa + 16 * j, t[j]);
    }
    transpose16_regs(t);
    for (int i = 0; i < nq; i++)
        store16(a + (size_t)(i0 + i) * tk, km, t[i]);
    /* O[i,c] = Σ_j A[i,j]·V[j,c], j ascending, 16 columns at a time: row
     * i's chain takes A[i,j] from lane i of A's column j (pa) and V's row
     * j from a register, and O's rows need no transpose */
    for (int c0 = 0; c0 < dv; c0 += 16) {
        const __mmask16 cm = lanes(dv - c0);
        __m512 vr[16];
        for (int j = 0; j < NJ; j++)
            vr[j] = j < tk ? load16(cm, v + (size_t)j * dv + c0) : _mm512_setzero_ps();
        for (int i = 0; i < nq; i += 4) { /* four chains at a time */
            __m512 acc[4];
            for (int r = 0; r < 4; r++)
                acc[r] = _mm512_setzero_ps();
            for (int j = 0; j < NJ; j++)
                if (j < tk)
                    for (int r = 0; r < 4; r++) /* lanes past nq: rows not stored */
                        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(pa[16 * j + i + r]), vr[j], acc[r]);
            for (int r = 0; r < 4 && i + r < nq; r++)
                store16(o + (size_t)(i0 + i + r) * dv + c0, cm, acc[r]);
        }
    }
}

static _Thread_local _Alignas(64) float attn_kp[ATTN_MAXD * 16];

int qkv_attn_fwd_avx512(const qkv_attn_shape *sh, const float *q, const float *k, const float *v,
                        float *s, float *a, float *o)
{
    const int tk = sh->tk, dk = sh->dk, NJ = (tk + 3) & ~3;
    if (tk > 16 || dk > ATTN_MAXD ||
        (sh->mask != NULL && (size_t)(sh->tq + 15) * sh->mask_rs > 0x7fffffff))
        return -1;
    const float *kr = k;
    if (NJ != tk) { /* K with zero rows up to NJ */
        memcpy(attn_kp, k, sizeof(float) * (size_t)tk * dk);
        memset(attn_kp + (size_t)tk * dk, 0, sizeof(float) * (size_t)(NJ - tk) * dk);
        kr = attn_kp;
    }
    for (int i0 = 0; i0 < sh->tq; i0 += 16) {
        int nq = sh->tq - i0 < 16 ? sh->tq - i0 : 16;
        switch (NJ) { /* constant key counts, so st[] stays in registers */
        case 4: attn_fwd_block(4, i0, nq, sh, q, kr, v, s, a, o); break;
        case 8: attn_fwd_block(8, i0, nq, sh, q, kr, v, s, a, o); break;
        case 12: attn_fwd_block(12, i0, nq, sh, q, kr, v, s, a, o); break;
        default: attn_fwd_block(16, i0, nq, sh, q, kr, v, s, a, o); break;
        }
    }
    return 0;
}

/* y[c0..) = fma(x, row[c0..), y[c0..)) over d columns: y += x·row. */
QKV_ALWAYS_INLINE void axpy_row(float x, const float *row, float *y, int d)
{
    const __m512 xv = _mm512_set1_ps(x);
    for (int c0 = 0; c0 < d; c0 += 16) {
        const __mmask16 cm = lanes(d - c0);
        store16(y + c0, cm, _mm512_fmadd_ps(xv, load16(cm, row + c0), load16(cm, y + c0)));
    }
}

/* y[0..d) += x·row, as one rounded product added: what adding a gradient
 * row made by one FMA from zero into a table row comes to. */
QKV_ALWAYS_INLINE void add_scaled_row(float x, const float *row, float *y, int d)
{
    const __m512 xv = _mm512_set1_ps(x);
    for (int c0 = 0; c0 < d; c0 += 16) {
        const __mmask16 cm = lanes(d - c0);
        store16(y + c0, cm,
                _mm512_add_ps(load16(cm, y + c0), _mm512_mul_ps(xv, load16(cm, row + c0))));
    }
}

/* The backward pass of one item whose tk <= 16·C keys fill C registers.
 * With rows (NULL otherwise) dq, dk and dv are tables and at most one row
 * of dO is live and nothing flows into A or S from elsewhere, so each row
 * of the item's dK and dV is one product, and goes straight into its table
 * row. */
QKV_ALWAYS_INLINE void attn_bwd_item_c(const int C, const qkv_attn_shape *sh, const float *q,
                                       const float *k, const float *v, const float *a,
                                       const float *dout, float *ds, float *da, float *dq,
                                       float *dk, float *dv, const int *rows)
{
    const int tq = sh->tq, tk = sh->tk, d_k = sh->dk, d_v = sh->dv;
    __mmask16 km[2];
    for (int h = 0; h < C; h++)
        km[h] = lanes(tk - 16 * h);
    const int exact = scale_is_float(sh->scale);
    if (da != NULL)
        transpose_keys_c(C, v, tk, d_v, attn_kt); /* Vᵀ */
    for (int i = 0; i < tq; i++) {
        const float *go = dout + (size_t)i * d_v, *ai = a + (size_t)i * tk;
        const int live = row_live(go, d_v);
        if (live && dv != NULL) /* dV[j,:] += A[i,j]·dO[i,:] (rows i ascending) */
            for (int j = 0; j < tk; j++) {
                if (rows != NULL)
                    add_scaled_row(ai[j], go, dv + (size_t)rows[j] * d_v, d_v);
                else
                    axpy_row(ai[j], go, dv + (size_t)j * d_v, d_v);
            }
        if (da == NULL)
            continue;
        /* dA[i,:] += dO[i,:]·Vᵀ */
        float *dai = da + (size_t)i * tk, *dsi = ds + (size_t)i * tk;
        __m512 g[2], sg[2];
        __mmask16 nz = 0;
        for (int h = 0; h < C; h++)
            g[h] = load16(km[h], dai + 16 * h);
        if (live) {
            for (int p = 0; p < d_v; p++)
                for (int h = 0; h < C; h++)
                    g[h] = _mm512_fmadd_ps(
                        _mm512_set1_ps(go[p]),
                        _mm512_maskz_load_ps(km[h], attn_kt + (size_t)p * 16 * C + 16 * h), g[h]);
            for (int h = 0; h < C; h++)
                store16(dai + 16 * h, km[h], g[h]);
        }
        for (int h = 0; h < C; h++) {
            sg[h] = load16(km[h], dsi + 16 * h);
            nz |= _mm512_cmp_ps_mask(g[h], _mm512_setzero_ps(), _CMP_NEQ_UQ) & km[h];
        }
        /* dSs[i,:] += mask-kept A ⊙ (dA - Σ dA·A), the dot summed in order */
        if (nz) {
            _Alignas(64) float gv[32];
            for (int h = 0; h < C; h++)
                _mm512_store_ps(gv + 16 * h, g[h]);
            double dot = 0;
            for (int j = 0; j < tk; j++)
                dot += (double)gv[j] * ai[j];
            const __m512d dd = _mm512_set1_pd(dot);
            for (int h = 0; h < C; h++) {
                const __m512 ar = load16(km[h], ai + 16 * h);
                const __m256 lo = _mm512_cvtpd_ps(
                    _mm512_mul_pd(_mm512_cvtps_pd(half_ps(ar, 0)),
                                  _mm512_sub_pd(_mm512_cvtps_pd(half_ps(g[h], 0)), dd)));
                const __m256 hi = _mm512_cvtpd_ps(
                    _mm512_mul_pd(_mm512_cvtps_pd(half_ps(ar, 1)),
                                  _mm512_sub_pd(_mm512_cvtps_pd(half_ps(g[h], 1)), dd)));
                __m512 dx = _mm512_castpd_ps(_mm512_insertf64x4(
                    _mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
                if (sh->mask != NULL) {
                    const __mmask16 drop = _mm512_cmp_ps_mask(
                        mask_row(sh, i, 16 * h, km[h]), _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
                    dx = _mm512_maskz_mov_ps((__mmask16)~drop, dx);
                }
                sg[h] = _mm512_add_ps(sg[h], dx);
                store16(dsi + 16 * h, km[h], sg[h]);
            }
        }
        nz = 0;
        for (int h = 0; h < C; h++)
            nz |= _mm512_cmp_ps_mask(sg[h], _mm512_setzero_ps(), _CMP_NEQ_UQ) & km[h];
        if (!nz)
            continue;
        /* dS = scale·dSs; dQ[i,:] += Σ_j dS[j]·K[j,:]; dK[j,:] += dS[j]·Q[i,:] */
        _Alignas(64) float d[32];
        for (int h = 0; h < C; h++)
            _mm512_store_ps(d + 16 * h, scale16(sg[h], sh->scale, exact));
        if (dq != NULL)
            for (int c0 = 0; c0 < d_k; c0 += 16) {
                const __mmask16 cm = lanes(d_k - c0);
                float *dst = dq + (size_t)(rows != NULL ? rows[i] : i) * d_k + c0;
                __m512 acc = rows != NULL ? _mm512_setzero_ps() : load16(cm, dst);
                for (int j = 0; j < tk; j++)
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(d[j]),
                                          load16(cm, k + (size_t)j * d_k + c0), acc);
                store16(dst, cm, rows != NULL ? _mm512_add_ps(load16(cm, dst), acc) : acc);
            }
        if (dk != NULL)
            for (int j = 0; j < tk; j++) {
                if (rows != NULL)
                    add_scaled_row(d[j], q + (size_t)i * d_k, dk + (size_t)rows[j] * d_k, d_k);
                else
                    axpy_row(d[j], q + (size_t)i * d_k, dk + (size_t)j * d_k, d_k);
            }
    }
}

/* One item, its keys in one register or (with rows only) in two. */
static void attn_bwd_item_avx512(const qkv_attn_shape *sh, const float *q, const float *k,
                                 const float *v, const float *a, const float *dout, float *ds,
                                 float *da, float *dq, float *dk, float *dv, const int *rows)
{
    if (sh->tk <= 16)
        attn_bwd_item_c(1, sh, q, k, v, a, dout, ds, da, dq, dk, dv, rows);
    else
        attn_bwd_item_c(2, sh, q, k, v, a, dout, ds, da, dq, dk, dv, rows);
}

int qkv_attn_bwd_avx512(const qkv_attn_shape *sh, const float *q, const float *k, const float *v,
                        const float *a, const float *dout, float *ds, float *da, float *dq,
                        float *dk, float *dv, float *scratch)
{
    const int tq = sh->tq, tk = sh->tk;
    /* past 16 keys only the one-row scatter form, whose generic order is
     * per-row chains too; Vᵀ then takes 32 floats a row */
    if (tk > QKV_ATTN_FUSED_KEYS || (tk > 16 && sh->row_index == NULL) ||
        (da != NULL && sh->dv > (tk > 16 ? ATTN_MAXD / 2 : ATTN_MAXD)))
        return -1;
    if (sh->row_index == NULL) {
        attn_bwd_item_avx512(sh, q, k, v, a, dout, ds, da, dq, dk, dv, NULL);
        return 0;
    }
    int live = 0;
    for (int i = 0; i < tq && live < 2; i++)
        live += row_live(dout + (size_t)i * sh->dv, sh->dv);
    if (live < 2 &&
        (da == NULL || sh->sa_zero || (!row_live(da, tq * tk) && !row_live(ds, tq * tk))))
        attn_bwd_item_avx512(sh, q, k, v, a, dout, ds, da, dq, dk, dv, sh->row_index);
    else
        qkv_attention_backward_scatter(sh, q, k, v, a, dout, ds, da, dq, dk, dv, scratch);
    return 0;
}
#else
typedef int qkv_no_avx512_attention; /* ISO C wants a declaration */
#endif
