/*
 * attention_online.c - attention of one batch item at any length, without
 * its T×T matrices: FlashAttention's online softmax (Dao et al., 2022),
 * on any kernel set.
 *
 * Forward, for each block of query rows: O = 0, m = -inf, l = 0; for each
 * block of keys, S = Q·Kᵀ (qkv_gemm), x = scale·S + mask, m' = max(m,
 * max x), P = e^(x - m'), l = l·e^(m - m') + Σ P, O = O·e^(m - m') + P·V;
 * then O /= l, and m and 1/l are all that backward keeps of a row.
 * Backward recomputes each block's P = e^(x - m)/l and, with D = Σ dO∘O
 * (which is Σ_j P_ij·dP_ij), dS = scale·P∘(dP - D) for dP = dO·Vᵀ.
 *
 * FlashAttention keeps lse = m + ln l instead, one number a row; but in
 * qkv_real that sum loses the low bits of ln l when m is large (at m =
 * 300 a float's ulp is 2^-15), and e^(x - lse) then moves each weight of
 * the row by up to half that, relatively: the gradients' error grew with
 * the largest score. m is a score, exact in qkv_real, and e^(x - m) is
 * what forward computed in its last block. The factor 1/l costs no pass
 * over the block: it goes into the constant of dS's loop (scale/l) and
 * into a copy of the block's dO rows for dV (dV += e^(x - m)ᵀ·(dO/l)).
 *
 * Only blocks of bq×bk scores exist at a time, so memory is O(T), not
 * O(T²). The sums differ from the unfused ops' in order and in the
 * rescalings, so the results differ from qkv_attention's by rounding: the
 * bound is in test_attention.c.
 */
#include <math.h>

#include "kernels/kernels.h"

/* The block sizes (rows of Q, keys), set smaller by the tests so that
 * small shapes cross blocks. Read once per op (qkv_attention_online). */
static int online_bq = QKV_ONLINE_BQ, online_bk = QKV_ONLINE_BK;

void qkv_attention_online_blocks(int bq, int bk)
{
    online_bq = bq < 1 ? 1 : bq > QKV_ONLINE_BQ ? QKV_ONLINE_BQ : bq;
    online_bk = bk < 1 ? 1 : bk;
}

void qkv_attention_online_block_sizes(int tq, int tk, int *bq, int *bk)
{
    *bq = tq < online_bq ? tq : online_bq;
    *bk = tk < online_bk ? tk : online_bk;
}

/* Row i's logits for keys j0..j0+n, in place over its scores x: c·x
 * plus the mask, by the set's loop where it has one; -inf past the
 * diagonal when causal. */
static void online_logits(const qkv_attn_shape *sh, int i, int j0, int n, qkv_real *x)
{
    const qkv_real *mr =
        sh->mask != NULL ? sh->mask + (size_t)i * sh->mask_rs + (size_t)j0 * sh->mask_cs : NULL;
    const qkv_kernel_set *im = qkv_kernels();
    if (im->scale_mask != NULL && (mr == NULL || sh->mask_cs == 1)) {
        im->scale_mask(x, x, mr, (size_t)n, sh->scale);
    } else {
        const double c = sh->scale;
        for (int j = 0; j < n; j++)
            x[j] = (qkv_real)(c * x[j]) + (mr != NULL ? mr[(size_t)j * sh->mask_cs] : 0);
    }
    if (sh->causal) /* keys j0 + j > i */
        for (int j = i + 1 - j0 > 0 ? i + 1 - j0 : 0; j < n; j++)
            x[j] = -INFINITY;
}

/* Nonzero when every key j0..j0+nk of rows i0..i0+nq is dropped, by the
 * causal flag (read from the indices alone) or by the mask (a causal
 * mask's blocks above the diagonal): such a block adds nothing. */
static int online_block_masked(const qkv_attn_shape *sh, int i0, int nq, int j0, int nk)
{
    if (sh->causal && j0 > i0 + nq - 1)
        return 1;
    if (sh->mask == NULL)
        return 0;
    for (int i = i0; i < i0 + nq; i++)
        for (int j = j0; j < j0 + nk; j++)
            if (!(sh->mask[(size_t)i * sh->mask_rs + (size_t)j * sh->mask_cs] == -INFINITY))
                return 0;
    return 1;
}

/* Nonzero when x[0..n) holds a NaN. */
static int any_nan(const qkv_real *x, int n)
{
    for (int j = 0; j < n; j++)
        if (isnan(x[j]))
            return 1;
    return 0;
}

static void scale_row(qkv_real *x, size_t n, double f)
{
    for (size_t p = 0; p < n; p++)
        x[p] = (qkv_real)(x[p] * f);
}

void qkv_attention_online_forward(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                                  const qkv_real *v, qkv_real *o, qkv_real *ml, qkv_real *scratch)
{
    const int tq = sh->tq, tk = sh->tk, d_k = sh->dk, d_v = sh->dv;
    const int bq = sh->bq, bk = sh->bk;
    const qkv_kernel_set *im = qkv_kernels();
    double m[QKV_ONLINE_BQ], l[QKV_ONLINE_BQ];
    int nan[QKV_ONLINE_BQ]; /* a NaN score met while m was -inf */
    for (int i0 = 0; i0 < tq; i0 += bq) {
        const int nq = tq - i0 < bq ? tq - i0 : bq;
        qkv_real *ob = o + (size_t)i0 * d_v;
        qkv_zero(ob, (size_t)nq * d_v);
        for (int i = 0; i < nq; i++)
            m[i] = -INFINITY, l[i] = 0, nan[i] = 0;
        for (int j0 = 0; j0 < tk; j0 += bk) {
            const int nk = tk - j0 < bk ? tk - j0 : bk;
            if (online_block_masked(sh, i0, nq, j0, nk))
                continue;
            qkv_gemm(0, 1, nq, nk, d_k, q + (size_t)i0 * d_k, k + (size_t)j0 * d_k, scratch, 0);
            for (int i = 0; i < nq; i++) {
                qkv_real *x = scratch + (size_t)i * nk;
                online_logits(sh, i0 + i, j0, nk, x);
                const double mx = qkv_row_max(x, (size_t)nk), top = mx > m[i] ? mx : m[i];
                if (top == -INFINITY) { /* every key so far masked: no weight, but a
                                         * NaN, which the maximum skips, makes the
                                         * row NaN if a later key is not masked */
                    nan[i] |= any_nan(x, nk);
                    qkv_zero(x, (size_t)nk);
                    continue;
                }
                const double sum = im->exps((size_t)nk, x, (qkv_real)top, x);
                if (m[i] != top) { /* rescale what the earlier blocks gave, if any */
                    if (m[i] != -INFINITY) {
                        const double f = exp(m[i] - top);
                        l[i] *= f;
                        scale_row(ob + (size_t)i * d_v, (size_t)d_v, f);
                    }
                    m[i] = top;
                }
                l[i] += sum;
            }
            qkv_gemm(0, 0, nq, d_v, nk, scratch, v + (size_t)j0 * d_v, ob, 1);
        }
        for (int i = 0; i < nq; i++) {
            if (nan[i] && l[i] > 0)
                l[i] = NAN;
            if (!(l[i] == 0)) /* else a row with every key masked: O = 0 */
                scale_row(ob + (size_t)i * d_v, (size_t)d_v, 1 / l[i]);
            if (ml != NULL) { /* m (a score, so exact), then 1/l (1 for a row with
                               * every key masked: m = -inf, P = 0) */
                ml[i0 + i] = (qkv_real)m[i];
                ml[tq + i0 + i] = (qkv_real)(l[i] > 0 ? 1 / l[i] : l[i] == 0 ? 1 : NAN);
            }
        }
    }
}

void qkv_attention_online_backward(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                                   const qkv_real *v, const qkv_real *o, const qkv_real *ml,
                                   const qkv_real *dout, qkv_real *dq, qkv_real *dk, qkv_real *dv,
                                   qkv_real *scratch)
{
    const int tq = sh->tq, tk = sh->tk, d_k = sh->dk, d_v = sh->dv;
    const int bq = sh->bq, bk = sh->bk;
    const qkv_kernel_set *im = qkv_kernels();
    const qkv_real *rm = ml, *rl = ml + tq; /* each row's m and 1/l */
    qkv_real *p = scratch, *dp = scratch + (size_t)bq * bk, *gl = dp + (size_t)bq * bk;
    double dsum[QKV_ONLINE_BQ];
    qkv_real cl[QKV_ONLINE_BQ];
    for (int i0 = 0; i0 < tq; i0 += bq) {
        const int nq = tq - i0 < bq ? tq - i0 : bq;
        const qkv_real *go = dout + (size_t)i0 * d_v;
        if (!qkv_any_nonzero(go, (size_t)nq * d_v))
            continue;                  /* these rows pass no gradient on */
        for (int i = 0; i < nq; i++) { /* D = Σ dO∘O, scale/l and dO/l, row by row */
            const qkv_real *gr = go + (size_t)i * d_v, *orow = o + (size_t)(i0 + i) * d_v;
            const qkv_real r = rl[i0 + i];
            double s = 0;
            for (int t = 0; t < d_v; t++)
                s += (double)gr[t] * orow[t];
            dsum[i] = s;
            cl[i] = (qkv_real)(sh->scale * r);
            for (int t = 0; dv != NULL && t < d_v; t++)
                gl[(size_t)i * d_v + t] = gr[t] * r;
        }
        for (int j0 = 0; j0 < tk; j0 += bk) {
            const int nk = tk - j0 < bk ? tk - j0 : bk;
            if (online_block_masked(sh, i0, nq, j0, nk))
                continue;
            qkv_gemm(0, 1, nq, nk, d_k, q + (size_t)i0 * d_k, k + (size_t)j0 * d_k, p, 0);
            for (int i = 0; i < nq; i++) { /* l·P = e^(x - m), m >= every x */
                qkv_real *x = p + (size_t)i * nk;
                online_logits(sh, i0 + i, j0, nk, x);
                if (rm[i0 + i] == -INFINITY)
                    qkv_zero(x, (size_t)nk);
                else
                    (void)im->exps((size_t)nk, x, rm[i0 + i], x);
            }
            if (dv != NULL) /* dV += Pᵀ·dO = (l·P)ᵀ·(dO/l) */
                qkv_gemm(1, 0, nk, d_v, nq, p, gl, dv + (size_t)j0 * d_v, 1);
            if (dq == NULL && dk == NULL)
                continue;
            qkv_gemm(0, 1, nq, nk, d_v, go, v + (size_t)j0 * d_v, dp, 0); /* dP = dO·Vᵀ */
            for (int i = 0; i < nq; i++) { /* dS = c·P∘(dP - D) = (c/l)·(l·P)∘(dP - D) */
                const qkv_real *pr = p + (size_t)i * nk;
                qkv_real *dr = dp + (size_t)i * nk, df = (qkv_real)dsum[i], cf = cl[i];
                for (int j = 0; j < nk; j++)
                    dr[j] = cf * (pr[j] * (dr[j] - df));
            }
            if (dq != NULL) /* dQ += dS·K */
                qkv_gemm(0, 0, nq, d_k, nk, dp, k + (size_t)j0 * d_k, dq + (size_t)i0 * d_k, 1);
            if (dk != NULL) /* dK += dSᵀ·Q */
                qkv_gemm(1, 0, nk, d_k, nq, dp, q + (size_t)i0 * d_k, dk + (size_t)j0 * d_k, 1);
        }
    }
}
