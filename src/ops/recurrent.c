/*
 * recurrent.c - the Elman recurrence over a whole sequence as one node.
 *
 * Unrolled on the tape, each step of h_s = act(xw_s + h_{s-1}·W_h) is a
 * matmul, an add and an activation, and backward adds each step's
 * h_{s-1}ᵀ·dz_s into W_h's gradient: T products of depth B that read and
 * write all of dW_h for little work. Here backward runs through time once,
 * keeping every step's dz, and then makes dW_h in one product of depth
 * (T-1)·B, as cuDNN and PyTorch's CPU RNN do. Forward, each step is the
 * unrolled ops' arithmetic in their order (the product, then the add, then
 * the activation), so the states are those ops' bits.
 */
#include <limits.h>
#include <string.h>

#include "kernels/kernels.h"
#include "ops/op.h"

/* The node keeps xw, W_h and h0 (when given) as its inputs, tanh_act in
 * c, and in state the [T,B,H] buffer that backward fills with every
 * step's dL/dz; the sizes are the output's. */
static void scan_backward(const qkv_node *nd)
{
    const qkv_tensor *y = nd->out;
    qkv_tensor *xw = nd->in[0], *wh = nd->in[1], *h0 = nd->n_in == 3 ? nd->in[2] : NULL;
    const int T = y->shape[0], B = y->shape[1], H = y->shape[2];
    const size_t bh = (size_t)B * H;
    qkv_real *dz = nd->state;
    /* W_hᵀ stored once, after dz (qkv_rnn_scan keeps the room): each
     * step's product then reads it as it is, where with W_h stored n×k
     * every step would transpose all of it again into packed panels. A
     * product's order depends on its shape alone, except for a Bᵀ too
     * deep to copy (kernels.h), which keeps W_h; so the bits are those of
     * the transposed form. */
    const qkv_real *wt = wh->data;
    int tb = 1;
    if (!qkv_gemm_takes_dots(H, H)) {
        qkv_real *w = dz + (size_t)T * bh;
        qkv_gemm_bt_cols(H, 0, H, wh->data, w);
        wt = w;
        tb = 0;
    }
    /* back through time: dz_s = (dy_s + dz_{s+1}·W_hᵀ) ⊙ act'(z_s), with
     * the carried term made straight into dz_s, then the add and tanh' =
     * 1 - y² in one pass */
    for (int s = T - 1; s >= 0; s--) {
        qkv_real *d = dz + (size_t)s * bh;
        const qkv_real *dy = y->grad + (size_t)s * bh, *ys = y->data + (size_t)s * bh;
        const int last = s == T - 1;
        if (!last)
            qkv_gemm(0, tb, B, H, H, d + bh, wt, d, 0); /* dz_{s+1}·W_hᵀ */
        if (nd->c != 0)
            for (size_t i = 0; i < bh; i++)
                d[i] = (last ? dy[i] : d[i] + dy[i]) * (1 - ys[i] * ys[i]);
        else if (last)
            memcpy(d, dy, sizeof *d * bh);
        else
            for (size_t i = 0; i < bh; i++)
                d[i] += dy[i];
    }
    /* xw's gradient is usually this node's alone: then dz goes into it
     * as adding into zeros would (0 + dz: +0 for -0), with no zero fill */
    if (qkv_tensor_grad_claim(xw)) {
        const qkv_real zero = 0;
        for (size_t i = 0; i < (size_t)T * bh; i++)
            xw->grad[i] = zero + dz[i];
    } else if (xw->grad != NULL) {
        for (size_t i = 0; i < (size_t)T * bh; i++)
            xw->grad[i] += dz[i];
    }
    qkv_tensor_grad_ready(wh);
    if (h0 != NULL)
        qkv_tensor_grad_ready(h0);
    if (wh->grad != NULL) { /* dW_h += Σ_s h_{s-1}ᵀ·dz_s: states 0..T-2 against dz 1..T-1 */
        if (T > 1)
            qkv_gemm(1, 0, H, H, (T - 1) * B, y->data, dz + bh, wh->grad, 1);
        if (h0 != NULL)
            qkv_gemm(1, 0, H, H, B, h0->data, dz, wh->grad, 1);
    }
    if (h0 != NULL && h0->grad != NULL) /* dh0 += dz_0·W_hᵀ */
        qkv_gemm(0, tb, B, H, H, dz, wt, h0->grad, 1);
}

static const qkv_op_def op_rnn_scan = {"rnn_scan", scan_backward, QKV_OP_CLAIMS_GRADS};

qkv_tensor *qkv_rnn_scan(qkv_tape *t, qkv_tensor *xw, qkv_tensor *wh, qkv_tensor *h0, int tanh_act)
{
    if (!qkv_op_inputs_ok(t, "rnn_scan", xw, wh, 1) ||
        (h0 != NULL && !qkv_op_inputs_ok(t, "rnn_scan", h0, NULL, 0)))
        return qkv_nil();
    const int H = wh->ndim == 2 ? wh->shape[1] : -1;
    if (xw->ndim != 3 || wh->ndim != 2 || wh->shape[0] != H || xw->shape[2] != H ||
        (h0 != NULL && (h0->ndim != 2 || h0->shape[0] != xw->shape[1] || h0->shape[1] != H))) {
        char sx[64], sw[64], sh[64] = "none";
        qkv_shape_str(xw, sx, sizeof sx);
        qkv_shape_str(wh, sw, sizeof sw);
        if (h0 != NULL)
            qkv_shape_str(h0, sh, sizeof sh);
        qkv_tape_fail(t, QKV_ERR_SHAPE,
                      "rnn_scan: xw %s must be [T,B,H], W_h %s [H,H] and h0 %s [B,H]", sx, sw, sh);
        return qkv_nil();
    }
    const int T = xw->shape[0], B = xw->shape[1];
    const size_t bh = (size_t)B * H;
    if ((size_t)T * (size_t)B > INT_MAX) /* the depth of dW_h's product is an int */
        return qkv_tape_fail(t, QKV_ERR_SHAPE, "rnn_scan: T·B = %zu rows is too many",
                             (size_t)T * (size_t)B),
               qkv_nil();
    const int grad = qkv_wants_grad(xw, wh) || (h0 != NULL && qkv_wants_grad(h0, NULL));
    qkv_tensor *y = qkv_op_tensor(t, "rnn_scan", 3, xw->shape, grad);
    if (qkv_tensor_is_nil(y))
        return y;
    for (int s = 0; s < T; s++) {
        const qkv_real *x = xw->data + (size_t)s * bh;
        const qkv_real *h = s > 0 ? y->data + (size_t)(s - 1) * bh : h0 != NULL ? h0->data : NULL;
        qkv_real *ys = y->data + (size_t)s * bh;
        if (h != NULL) { /* the ops' order: h·W_h, then xw + that (one rounding either way round) */
            qkv_gemm(0, 0, B, H, H, h, wh->data, ys, 0);
            for (size_t i = 0; i < bh; i++)
                ys[i] += x[i];
        } else {
            memcpy(ys, x, sizeof *ys * bh);
        }
        if (tanh_act)
            qkv_vtanh(ys, ys, bh);
    }
    if (y->grad == NULL) /* no input needs one, or gradients are off */
        return y;
    /* dL/dz for every step, then room for W_hᵀ (scan_backward) */
    const size_t wt_n = qkv_gemm_takes_dots(H, H) ? 0 : (size_t)H * H;
    qkv_real *dz = qkv_op_alloc(t, "rnn_scan", sizeof *dz * (bh * (size_t)T + wt_n));
    qkv_tensor *in[3] = {xw, wh, h0};
    qkv_node *nd = dz != NULL ? qkv_tape_record(t, &op_rnn_scan, y, h0 != NULL ? 3 : 2, in) : NULL;
    if (nd == NULL)
        return qkv_nil();
    nd->c = tanh_act != 0;
    nd->state = dz;
    return y;
}
