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

void qkv_attention_forward(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                           const qkv_real *v, qkv_real *s, qkv_real *a, qkv_real *o)
{
    const qkv_kernel_set *im = qkv_kernels();
    if (im->attn_fwd != NULL && im->attn_fwd(sh, q, k, v, s, a, o) == 0)
        return;
    const int tq = sh->tq, tk = sh->tk;
    qkv_gemm(0, 1, tq, tk, sh->dk, q, k, s, 0);
    for (int i = 0; i < tq; i++)
        for (int j = 0; j < tk; j++) {
            size_t e = (size_t)i * tk + j;
            s[e] = (qkv_real)(sh->scale * s[e]);
            a[e] = sh->mask != NULL
                       ? s[e] + sh->mask[(size_t)i * sh->mask_rs + (size_t)j * sh->mask_cs]
                       : s[e];
        }
    qkv_softmax_rows(a, a, (size_t)tq, (size_t)tk);
    qkv_gemm(0, 0, tq, sh->dv, tk, a, v, o, 0);
}

void qkv_attention_backward_scatter(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                                    const qkv_real *v, const qkv_real *a, const qkv_real *dout,
                                    qkv_real *ds, qkv_real *da, qkv_real *dq, qkv_real *dk,
                                    qkv_real *dv, qkv_real *scratch)
{
    const size_t nq = (size_t)sh->tq * sh->dk, nk = (size_t)sh->tk * sh->dk,
                 nv = (size_t)sh->tk * sh->dv;
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

void qkv_attention_backward(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                            const qkv_real *v, const qkv_real *a, const qkv_real *dout,
                            qkv_real *ds, qkv_real *da, qkv_real *dq, qkv_real *dk, qkv_real *dv,
                            qkv_real *scratch)
{
    const qkv_kernel_set *im = qkv_kernels();
    if (im->attn_bwd != NULL &&
        im->attn_bwd(sh, q, k, v, a, dout, ds, da, dq, dk, dv, scratch) == 0)
        return;
    if (sh->row_index != NULL) {
        qkv_attention_backward_scatter(sh, q, k, v, a, dout, ds, da, dq, dk, dv, scratch);
        return;
    }
    const int tq = sh->tq, tk = sh->tk;
    if (dv != NULL) /* dV += Aᵀ·dO */
        qkv_gemm(1, 0, tk, sh->dv, tq, a, dout, dv, 1);
    if (da == NULL)
        return;
    qkv_gemm(0, 1, tq, tk, sh->dv, dout, v, da, 1); /* dA += dO·Vᵀ */
    memset(scratch, 0, sizeof *scratch * (size_t)tq * (size_t)tk);
    qkv_softmax_backward_rows(scratch, a, da, (size_t)tq, (size_t)tk);
    for (int i = 0; i < tq; i++) /* dSs += kept entries; then dS = scale·dSs */
        for (int j = 0; j < tk; j++) {
            size_t e = (size_t)i * tk + j;
            ds[e] += attn_dropped(sh, i, j) ? 0 : scratch[e];
            scratch[e] = (qkv_real)(sh->scale * ds[e]);
        }
    if (dq != NULL) /* dQ += dS·K */
        qkv_gemm(0, 0, tq, sh->dk, tk, scratch, k, dq, 1);
    if (dk != NULL) /* dK += dSᵀ·Q */
        qkv_gemm(1, 0, tk, sh->dk, tq, scratch, q, dk, 1);
}
