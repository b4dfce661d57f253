/*
 * attention.c - fused attention of one batch item, on any kernel set.
 *
 * The generic path is the unfused ops' kernels called on one item, in the
 * order the ops would call them: qkv_gemm for S = Q·Kᵀ, the scaling op's
 * rounding (c·x in double), the additive mask, qkv_softmax_rows, qkv_gemm
 * for O = A·V; backward, dV = Aᵀ·dO, dA = dO·Vᵀ, softmax's backward, the
 * mask, the scaling, dQ = dS·K and dK = dSᵀ·Q. So its order of additions is
 * exactly the unfused ops'. A kernel set with a fused path of its own
 * (avx512_attn.c) takes the shapes it handles and repeats the same order.
 * An item whose Q, K or V holds an infinity or a NaN goes backward row by
 * row instead, skipping the rows of zeros that the fused paths skip.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
static int attn_dropped(const qkv_attn_shape *sh, int i, int j)
{
    if (sh->mask == NULL)
        return 0;
    qkv_real m = sh->mask[(size_t)i * sh->mask_rs + (size_t)j * sh->mask_cs];
    return isinf(m) && m < 0;
}

/* Row i of the backward through the mask and the scaling: dSs[i,:] += the
 * softmax gradient g where the mask keeps the entry, then g = scale·dSs
 * (rounded as the scaling op rounds). No mask or one laid out along the
 * keys takes the kernel set's loop, or one that vectorises; any other
 * the general test. */
static void mask_scale_row(const qkv_attn_shape *sh, int i, qkv_real *dsi, qkv_real *g)
{
    const int tk = sh->tk;
    const qkv_kernel_set *im = qkv_kernels();
    if (im->mask_scale_bwd != NULL && (sh->mask == NULL || sh->mask_cs == 1)) {
        im->mask_scale_bwd(dsi, g, sh->mask != NULL ? sh->mask + (size_t)i * sh->mask_rs : NULL,
                           (size_t)tk, sh->scale);
        return;
    }
    if (sh->mask != NULL && sh->mask_cs == 1) {
        const qkv_real *mr = sh->mask + (size_t)i * sh->mask_rs;
        for (int j = 0; j < tk; j++)
            dsi[j] += mr[j] == -INFINITY ? 0 : g[j];
    } else {
        for (int j = 0; j < tk; j++)
            dsi[j] += attn_dropped(sh, i, j) ? 0 : g[j];
    }
    const double c = sh->scale;
    for (int j = 0; j < tk; j++)
        g[j] = (qkv_real)(c * dsi[j]);
}

/* Row i of the forward's scaling and mask: si = scale·si (rounded as the
 * scaling op rounds), ai = si + the mask's row i. No mask or one laid out
 * along the keys takes the kernel set's loop; loops of one shape each
 * otherwise, so that they vectorise. */
static void scale_mask_row(const qkv_attn_shape *sh, int i, qkv_real *si, qkv_real *ai)
{
    const int tk = sh->tk;
    const double c = sh->scale;
    const qkv_kernel_set *im = qkv_kernels();
    const qkv_real *mr = sh->mask != NULL ? sh->mask + (size_t)i * sh->mask_rs : NULL;
    if (im->scale_mask != NULL && (mr == NULL || sh->mask_cs == 1)) {
        im->scale_mask(si, ai, mr, (size_t)tk, c);
        return;
    }
    for (int j = 0; j < tk; j++)
        si[j] = (qkv_real)(c * si[j]);
    if (mr == NULL)
        memcpy(ai, si, sizeof *ai * (size_t)tk);
    else if (sh->mask_cs == 1)
        for (int j = 0; j < tk; j++)
            ai[j] = si[j] + mr[j];
    else
        for (int j = 0; j < tk; j++)
            ai[j] = si[j] + mr[(size_t)j * sh->mask_cs];
}

void qkv_attention_forward(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                           const qkv_real *v, qkv_real *s, qkv_real *a, qkv_real *o)
{
    const qkv_kernel_set *im = qkv_kernels();
    if (im->attn_fwd != NULL && im->attn_fwd(sh, q, k, v, s, a, o) == 0)
        return;
    const int tq = sh->tq, tk = sh->tk;
    qkv_gemm(0, 1, tq, tk, sh->dk, q, k, s, 0);
    const double c = sh->scale;
    const int row_fn = im->scale_mask != NULL && (sh->mask == NULL || sh->mask_cs == 1);
    enum { ROWS = 32 }; /* a block's softmax finds its rows still in cache */
    int i0 = 0;
    if (row_fn && im->attn_rows != NULL &&
        im->attn_rows(s, a, sh->mask, sh->mask_rs, (size_t)tq, (size_t)tk, c) == 0)
        i0 = tq; /* all three steps done */
    for (; i0 < tq; i0 += ROWS) {
        const int i1 = tq - i0 < ROWS ? tq : i0 + ROWS;
        for (int i = i0; i < i1; i++)
            scale_mask_row(sh, i, s + (size_t)i * tk, a + (size_t)i * tk);
        qkv_real *ab = a + (size_t)i0 * tk;
        qkv_softmax_rows(ab, ab, (size_t)(i1 - i0), (size_t)tk);
    }
    /* that row alone, when its chains are the full product's (as in
     * one_row_exact: O = A·V has dQ's depth, tk). In the BLOCKS order the
     * full product adds its one block to a zero, where a chain of -0
     * comes out +0: so does the row's. */
    const int blocked = qkv_gemm_blocked(tq, sh->dv, tk);
    if (sh->row_out && !(blocked && tk > QKV_GEMM_KC)) {
        qkv_real *orow = o + (size_t)sh->row * sh->dv;
        qkv_gemm(0, 0, 1, sh->dv, tk, a + (size_t)sh->row * tk, v, orow, 0);
        for (int c = 0; blocked && c < sh->dv; c++)
            orow[c] += 0;
    } else {
        qkv_gemm(0, 0, tq, sh->dv, tk, a, v, o, 0);
    }
}

int qkv_any_nonzero(const qkv_real *x, size_t n)
{
    size_t i = 0;
    for (; i + 64 <= n; i += 64) { /* no exit inside a block, so it vectorises */
        int any = 0;
        for (size_t j = 0; j < 64; j++)
            any |= x[i + j] != 0;
        if (any)
            return 1;
    }
    for (; i < n; i++)
        if (x[i] != 0)
            return 1;
    return 0;
}

/* Nonzero when x[0..n) holds no infinity or NaN. */
static int all_finite(const qkv_real *x, int n)
{
    qkv_real z = 0;
    for (int i = 0; i < n; i++) /* x·0 is 0 for finite x, NaN otherwise */
        z += x[i] * 0;
    return z == 0;
}

/* Nonzero when the one-row products below give the full products' bits:
 * in qkv_gemm's orders (kernels.h), from a zero C, row r of dA = dO·Vᵀ and
 * of dQ = dS·K is a chain from zero in the CHAIN order, and in the BLOCKS
 * order too while the depth fits one block, which the one-row products
 * (CHAIN, or DOTS where the full product took DOTS) then repeat. The
 * same holds for row r of O = A·V, whose depth is tk like dQ's. */
static int one_row_exact(const qkv_attn_shape *sh)
{
    return !(qkv_gemm_blocked(sh->tq, sh->tk, sh->dv) && sh->dv > QKV_GEMM_KC) &&
           !(qkv_gemm_blocked(sh->tq, sh->dk, sh->tk) && sh->tk > QKV_GEMM_KC);
}

/* The scatter backward of an item whose dO is zero but for row r and into
 * whose A and S nothing else flows (the coreference model: only the
 * pronoun's output is read), in O(T·d): dV[j] += A[r,j]·dO[r], dA[r] =
 * dO[r]·Vᵀ, its softmax backward, dS[r], dQ[r] = dS[r]·K and dK[j] +=
 * dS[r,j]·Q[r], each row added into its table row. Every other row of the
 * full computation is a chain of multiply-adds by 0, so these are its
 * bits (but for the sign of a zero; dV's and dK's elements are one rounded
 * product in every order), given one_row_exact. ar is A[r], go dO[r]; dar
 * and dsr (NULL when neither dq nor dk is wanted) are row r of dA and dS,
 * holding zeros; scratch holds tk + dk reals. */
static void one_row_backward(const qkv_attn_shape *sh, int r, const qkv_real *q, const qkv_real *k,
                             const qkv_real *v, const qkv_real *ar, const qkv_real *go,
                             qkv_real *dar, qkv_real *dsr, qkv_real *dq, qkv_real *dk, qkv_real *dv,
                             qkv_real *scratch)
{
    const int tk = sh->tk, d_k = sh->dk, d_v = sh->dv;
    const int *rows = sh->row_index;
    /* a weight of 0 (a masked key: padding) adds products of ±0, which
     * change nothing but a -0 (into +0) while the other factor is finite */
    const int skip_v = all_finite(go, d_v);
    if (dv != NULL)
        qkv_scatter_add_scaled(dv, rows, ar, (size_t)tk, go, (size_t)d_v, skip_v);
    if (dar == NULL)
        return;
    qkv_real *g = scratch, *gq = scratch + tk;
    qkv_gemm(0, 1, 1, tk, d_v, go, v, dar, 1); /* dA[r] += dO[r]·Vᵀ */
    qkv_zero(g, (size_t)tk);
    qkv_softmax_backward_rows(g, ar, dar, 1, (size_t)tk);
    mask_scale_row(sh, r, dsr, g);
    /* a row of dS of zeros adds nothing to dQ or dK, as the kernel sets'
     * fused backward skip it: the same bits as theirs even where K or Q
     * holds an infinity (0·inf, which the unfused ops make NaN) */
    if (!qkv_any_nonzero(dsr, (size_t)tk))
        return;
    if (dq != NULL) { /* dQ[r] = dS[r]·K, from zero, then into its table row */
        qkv_zero(gq, (size_t)d_k);
        qkv_gemm(0, 0, 1, d_k, tk, g, k, gq, 1);
        qkv_scatter_add_rows(dq, gq, rows + r, 1, (size_t)d_k);
    }
    const int skip_k = dk != NULL && all_finite(q + (size_t)r * d_k, d_k);
    if (dk != NULL)
        qkv_scatter_add_scaled(dk, rows, g, (size_t)tk, q + (size_t)r * d_k, (size_t)d_k, skip_k);
}

/* Nonzero when one_row_backward gives the full computation's bits for
 * this item: one_row_exact, and no gradient in da or ds from elsewhere. */
static int one_row_ok(const qkv_attn_shape *sh, const qkv_real *ds, const qkv_real *da)
{
    const size_t nt = (size_t)sh->tq * sh->tk;
    return one_row_exact(sh) &&
           (da == NULL || sh->sa_zero || (!qkv_any_nonzero(da, nt) && !qkv_any_nonzero(ds, nt)));
}

/* one_row_backward for row r, whose dO row is go, with dA's and dS's rows
 * taken from da and ds; a zero go adds nothing. */
static void one_row_at(const qkv_attn_shape *sh, int r, const qkv_real *q, const qkv_real *k,
                       const qkv_real *v, const qkv_real *a, const qkv_real *go, qkv_real *ds,
                       qkv_real *da, qkv_real *dq, qkv_real *dk, qkv_real *dv, qkv_real *scratch)
{
    const size_t off = (size_t)r * sh->tk;
    if (qkv_any_nonzero(go, (size_t)sh->dv))
        one_row_backward(sh, r, q, k, v, a + off, go, da != NULL ? da + off : NULL,
                         da != NULL ? ds + off : NULL, dq, dk, dv, scratch);
}

/* one_row_backward for an item whose dO has at most one live row, found
 * here. Returns nonzero, having done nothing, when the item does not
 * qualify. */
static int backward_one_row(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                            const qkv_real *v, const qkv_real *a, const qkv_real *dout,
                            qkv_real *ds, qkv_real *da, qkv_real *dq, qkv_real *dk, qkv_real *dv,
                            qkv_real *scratch)
{
    const int d_v = sh->dv;
    if (!one_row_ok(sh, ds, da))
        return -1;
    int r = -1;
    for (int i = 0; i < sh->tq; i++)
        if (qkv_any_nonzero(dout + (size_t)i * d_v, (size_t)d_v)) {
            if (r >= 0)
                return -1;
            r = i;
        }
    if (r >= 0)
        one_row_at(sh, r, q, k, v, a, dout + (size_t)r * d_v, ds, da, dq, dk, dv, scratch);
    return 0;
}

size_t qkv_attention_row_scratch(int tq, int tk, int dk, int dv)
{
    return (size_t)tq * tk + (size_t)tq * dk + (size_t)tk * (dk + dv) /* the scatter form's */
           + (size_t)tq * dv;                                         /* then dO whole */
}

/* The backward of the row_out form (kernels.h): past the fused kernels'
 * keys, the one-row products, when they give the full computation's
 * bits; else dO is made whole in scratch, beyond the scatter form's own,
 * for the full form. */
static void backward_row_out(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                             const qkv_real *v, const qkv_real *a, const qkv_real *go, qkv_real *ds,
                             qkv_real *da, qkv_real *dq, qkv_real *dk, qkv_real *dv,
                             qkv_real *scratch)
{
    const int tq = sh->tq, tk = sh->tk, d_v = sh->dv, r = sh->row;
    if ((qkv_kernels()->attn_bwd == NULL || tk > QKV_ATTN_FUSED_KEYS) && one_row_ok(sh, ds, da)) {
        one_row_at(sh, r, q, k, v, a, go, ds, da, dq, dk, dv, scratch);
        return;
    }
    qkv_real *dout = scratch + (size_t)tq * tk + (size_t)tq * sh->dk + (size_t)tk * (sh->dk + d_v);
    qkv_zero(dout, (size_t)tq * d_v);
    memcpy(dout + (size_t)r * d_v, go, sizeof *go * (size_t)d_v);
    qkv_attn_shape full = *sh;
    full.row_out = 0;
    qkv_attention_backward(&full, q, k, v, a, dout, ds, da, dq, dk, dv, scratch);
}

int qkv_attention_row_only_exact(int tq, int tk, int dk, int dv)
{
    const qkv_attn_shape sh = {.tq = tq, .tk = tk, .dk = dk, .dv = dv};
    return one_row_exact(&sh) && !(qkv_gemm_blocked(tq, tk, dk) && dk > QKV_GEMM_KC) &&
           !(qkv_gemm_blocked(tq, dv, tk) && tk > QKV_GEMM_KC);
}

/* c[0..n) += 0 when the full product (m rows) takes the BLOCKS order: it
 * adds its one block to a zero, where a chain of -0 comes out +0. */
static void as_blocked(int m, int n, int k, qkv_real *c)
{
    if (!qkv_gemm_blocked(m, n, k))
        return;
    for (int j = 0; j < n; j++)
        c[j] += 0;
}

void qkv_attention_row_scores(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                              qkv_real *s, qkv_real *a)
{
    const int r = sh->row;
    qkv_gemm(0, 1, 1, sh->tk, sh->dk, q + (size_t)r * sh->dk, k, s, 0); /* S[r] = Q[r]·Kᵀ */
    as_blocked(sh->tq, sh->tk, sh->dk, s);
    scale_mask_row(sh, r, s, a);
}

void qkv_attention_row_output(const qkv_attn_shape *sh, const qkv_real *a, const qkv_real *v,
                              qkv_real *o)
{
    qkv_gemm(0, 0, 1, sh->dv, sh->tk, a, v, o, 0); /* O[r] = A[r]·V */
    as_blocked(sh->tq, sh->dv, sh->tk, o);
}

size_t qkv_attention_row_only_scratch(int tk, int dk)
{
    return 3 * (size_t)tk + (size_t)dk;
}

void qkv_attention_row_backward(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                                const qkv_real *v, const qkv_real *a, const qkv_real *go,
                                qkv_real *dq, qkv_real *dk, qkv_real *dv, qkv_real *scratch)
{
    const size_t tk = (size_t)sh->tk;
    if (!qkv_any_nonzero(go, (size_t)sh->dv))
        return;
    const int grads = dq != NULL || dk != NULL;
    if (grads)
        qkv_zero(scratch, 2 * tk); /* the rows of dA and dS */
    one_row_backward(sh, sh->row, q, k, v, a, go, grads ? scratch : NULL,
                     grads ? scratch + tk : NULL, dq, dk, dv, scratch + 2 * tk);
}

void qkv_attention_backward_scatter(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                                    const qkv_real *v, const qkv_real *a, const qkv_real *dout,
                                    qkv_real *ds, qkv_real *da, qkv_real *dq, qkv_real *dk,
                                    qkv_real *dv, qkv_real *scratch)
{
    const size_t nq = (size_t)sh->tq * sh->dk, nk = (size_t)sh->tk * sh->dk,
                 nv = (size_t)sh->tk * sh->dv;
    if (backward_one_row(sh, q, k, v, a, dout, ds, da, dq, dk, dv, scratch) == 0)
        return;
    qkv_real *g = scratch + (size_t)sh->tq * sh->tk;
    qkv_attn_shape item = *sh;
    item.row_index = NULL;
    qkv_zero(g, nq + nk + nv);
    qkv_attention_backward(&item, q, k, v, a, dout, ds, da, dq ? g : NULL, dk ? g + nq : NULL,
                           dv ? g + nq + nk : NULL, scratch);
    if (dq != NULL)
        qkv_scatter_add_rows(dq, g, sh->row_index, (size_t)sh->tq, (size_t)sh->dk);
    if (dk != NULL)
        qkv_scatter_add_rows(dk, g + nq, sh->row_index, (size_t)sh->tk, (size_t)sh->dk);
    if (dv != NULL)
        qkv_scatter_add_rows(dv, g + nq + nk, sh->row_index, (size_t)sh->tk, (size_t)sh->dv);
}

/* Nonzero when x[0..n) holds an infinity or a NaN (x - x is then NaN). */
static int any_not_finite(const qkv_real *x, size_t n)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) /* no exit in the loop, so it vectorises */
        bad |= !(x[i] - x[i] == 0);
    return bad;
}

/* The generic backward row by row, for an item whose Q, K or V holds an
 * infinity or a NaN: a row of dO of zeros adds nothing, and a row of dS
 * of zeros nothing to dQ and dK, as in the kernel sets' fused backward
 * (the full products would add their products of 0: NaN). scratch holds
 * tk reals. */
static void backward_rows_skipping(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                                   const qkv_real *v, const qkv_real *a, const qkv_real *dout,
                                   qkv_real *ds, qkv_real *da, qkv_real *dq, qkv_real *dk,
                                   qkv_real *dv, qkv_real *scratch)
{
    const int tk = sh->tk, d_k = sh->dk, d_v = sh->dv;
    for (int i = 0; i < sh->tq; i++) {
        const qkv_real *go = dout + (size_t)i * d_v, *ai = a + (size_t)i * tk;
        const int live = qkv_any_nonzero(go, (size_t)d_v);
        if (live && dv != NULL) /* dV += A[i]ᵀ·dO[i] */
            qkv_gemm(1, 0, tk, d_v, 1, ai, go, dv, 1);
        if (da == NULL)
            continue;
        qkv_real *dai = da + (size_t)i * tk, *dsi = ds + (size_t)i * tk;
        if (live) /* dA[i] += dO[i]·Vᵀ */
            qkv_gemm(0, 1, 1, tk, d_v, go, v, dai, 1);
        qkv_zero(scratch, (size_t)tk);
        qkv_softmax_backward_rows(scratch, ai, dai, 1, (size_t)tk);
        mask_scale_row(sh, i, dsi, scratch);
        if (!qkv_any_nonzero(dsi, (size_t)tk))
            continue;
        if (dq != NULL) /* dQ[i] += dS[i]·K */
            qkv_gemm(0, 0, 1, d_k, tk, scratch, k, dq + (size_t)i * d_k, 1);
        if (dk != NULL) /* dK += dS[i]ᵀ·Q[i] */
            qkv_gemm(1, 0, tk, d_k, 1, scratch, q + (size_t)i * d_k, dk, 1);
    }
}

void qkv_attention_backward(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                            const qkv_real *v, const qkv_real *a, const qkv_real *dout,
                            qkv_real *ds, qkv_real *da, qkv_real *dq, qkv_real *dk, qkv_real *dv,
                            qkv_real *scratch)
{
    if (sh->row_out) {
        backward_row_out(sh, q, k, v, a, dout, ds, da, dq, dk, dv, scratch);
        return;
    }
    const qkv_kernel_set *im = qkv_kernels();
    /* A set's fused backward adds dS·K into dQ as one chain from dQ, as the
     * CHAIN order does; in the BLOCKS order (tq and d_k of 48 or more) the
     * generic product below adds a chain from zero to dQ, and only the
     * generic path gives its bits. */
    const int chain_dq = sh->row_index != NULL || dq == NULL || da == NULL ||
                         !qkv_gemm_blocked(sh->tq, sh->dk, sh->tk);
    if (im->attn_bwd != NULL && chain_dq &&
        im->attn_bwd(sh, q, k, v, a, dout, ds, da, dq, dk, dv, scratch) == 0)
        return;
    if (sh->row_index != NULL) {
        qkv_attention_backward_scatter(sh, q, k, v, a, dout, ds, da, dq, dk, dv, scratch);
        return;
    }
    const int tq = sh->tq, tk = sh->tk;
    if (any_not_finite(q, (size_t)tq * sh->dk) || any_not_finite(k, (size_t)tk * sh->dk) ||
        any_not_finite(v, (size_t)tk * sh->dv)) {
        backward_rows_skipping(sh, q, k, v, a, dout, ds, da, dq, dk, dv, scratch);
        return;
    }
    if (dv != NULL) /* dV += Aᵀ·dO */
        qkv_gemm(1, 0, tk, sh->dv, tq, a, dout, dv, 1);
    if (da == NULL)
        return;
    qkv_gemm(0, 1, tq, tk, sh->dv, dout, v, da, 1); /* dA += dO·Vᵀ */
    memset(scratch, 0, sizeof *scratch * (size_t)tq * (size_t)tk);
    qkv_softmax_backward_rows(scratch, a, da, (size_t)tq, (size_t)tk);
    for (int i = 0; i < tq; i++) /* dSs += kept entries; then dS = scale·dSs */
        mask_scale_row(sh, i, ds + (size_t)i * tk, scratch + (size_t)i * tk);
    if (dq != NULL) /* dQ += dS·K */
        qkv_gemm(0, 0, tq, sh->dk, tk, scratch, k, dq, 1);
    if (dk != NULL) /* dK += dSᵀ·Q */
        qkv_gemm(1, 0, tk, sh->dk, tq, scratch, q, dk, 1);
}
